"""Sets up the project's virtual environment for `make demo` / `make test`, and says what it is doing.

Runs before the environment exists, so it uses the standard library only. Each step prints what it
installs and about how long that usually takes, then a heartbeat line whenever the installer has
printed nothing for a while (a torch install unpacks ~3 GB of CUDA libraries and is silent for
minutes), then how long the step took.

Installer: uv where it can be had (it unpacks wheels in parallel: the torch step takes seconds
instead of minutes), pip otherwise. uv does not read pip's configuration, so the index, find-links
and constraint settings pip uses on this machine are read from `pip config list` and its PIP_*
variables and handed to uv, with pip's rule for choosing among indexes (the best version across all
of them), so both installers pick the same files, local wheels included. INSTALLER=pip forces pip.

    python3 tools/install_env.py --venv .venv --torch "torch==2.14.1 torchvision==0.29.1" --extras all
    python3 tools/install_env.py step --label "a slow step" -- sleep 30     # one step, with heartbeats
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

# Seconds of installer silence after which a "still ..." line is printed; settable for tests.
HEARTBEAT_S = float(os.environ.get("INSTALL_HEARTBEAT_S", "10"))
# Installer lines that only list packages one by one (uv prints ~130 for the test extras): the step's
# own line already says what is being installed, and a summary line follows. And pip's note that a
# local index has no copy of a package (it then takes it from the next index: nothing is wrong).
NOISE_PREFIXES = (" + ", " - ", " ~ ", "Requirement already satisfied", "WARNING: Location '")
# pip settings that uv accepts under the same meaning, as `pip config list` names them
PIP_TO_UV = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
             "find-links": "--find-links", "constraint": "--constraint"}


def say(line: str) -> None:
    print(line, flush=True)


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"


def run_step(label: str, cmd: list[str], expect: str = "", heartbeat_s: float = HEARTBEAT_S,
             env: dict | None = None) -> int:
    """Runs one install command: its useful output passes through (indented), and a heartbeat line is
    printed whenever it has been silent for heartbeat_s seconds. Returns the command's exit status."""
    say(f"==> {label}" + (f" (usually {expect})" if expect else ""))
    start = last = time.monotonic()
    lock = threading.Lock()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, env=env)

    def pump() -> None:
        nonlocal last
        for line in proc.stdout:
            line = line.rstrip()
            if line and not line.startswith(NOISE_PREFIXES):
                with lock:
                    say(f"    {line}")
                    last = time.monotonic()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while proc.poll() is None:
        time.sleep(min(0.2, heartbeat_s / 4))
        with lock:
            now = time.monotonic()
            if now - last >= heartbeat_s:
                say(f"    ... still working on {label.split(':')[0]}: {_clock(now - start)} so far")
                last = now
    reader.join()
    took = _clock(time.monotonic() - start)
    say(f"    done in {took}" if proc.returncode == 0 else f"    FAILED (exit {proc.returncode}) after {took}")
    return proc.returncode


def pip_settings(config_list: str) -> list[str]:
    """uv's flags for the pip settings in `pip config list` output (lines like
    global.find-links='/opt/wheels' or :env:.extra-index-url='a b'), each value once."""
    flags: list[str] = []
    for line in config_list.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name not in PIP_TO_UV or not value:
            continue
        for item in shlex.split(value)[0].split():
            pair = [PIP_TO_UV[name], item]
            if not any(flags[i:i + 2] == pair for i in range(0, len(flags), 2)):
                flags += pair
    return flags


def _uv_command(python: str) -> tuple[list[str], dict] | None:
    """The `uv pip install` prefix and environment that reproduce pip's choices here, or None when uv
    cannot be installed (offline, or no wheel for this platform)."""
    uv = Path(python).parent / "uv"
    if run_step("uv: a fast installer, into the environment", [python, "-m", "pip", "install", "--quiet", "uv"],
                "5 s") or not uv.exists():
        say("    uv is not available; installing with pip")
        return None
    config = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    env = dict(os.environ)
    cert = os.environ.get("PIP_CERT") or next((line.split("=", 1)[1].strip("'") for line in config.splitlines()
                                                if line.split("=", 1)[0].endswith(".cert")), None)
    if cert:  # pip's certificate bundle (a proxy's or the system's) for uv's downloads too
        env.setdefault("SSL_CERT_FILE", cert)
    # unsafe-best-match is pip's rule: the best version across every index, not the first index that has
    # the name (uv's default); with it uv installs the very versions and files pip would.
    return [str(uv), "pip", "install", "--python", python, "--index-strategy", "unsafe-best-match",
            *pip_settings(config)], env


def install(venv: Path, torch_pins: list[str], extras: str, installer: str) -> int:
    """Creates the environment (if needed) and installs torch, then torchwise with its extras."""
    t0 = time.monotonic()
    python = str(venv / "bin" / "python")
    if not Path(python).exists():
        if run_step(f"creating the virtual environment {venv}", [sys.executable, "-m", "venv", str(venv)],
                    "5 s"):
            return 1
    uv = None
    if installer != "pip":
        uv = _uv_command(python)
    if uv is None:
        if run_step("pip: upgrading pip itself", [python, "-m", "pip", "install", "--progress-bar", "off",
                                                      "--upgrade", "pip"], "10 s"):
            return 1
    what = ", ".join(torch_pins)
    # (label, pip arguments, usual time with uv, with pip): measured on 2 busy cores, torch's wheel on disk
    steps = [(f"torch: {what} with their CUDA libraries (~3 GB unpacked)", torch_pins, "30 s", "4-5 min"),
             (f"torchwise: the package, editable, with its [{extras}] extras", ["-e", f".[{extras}]"], "10 s",
              "about 1 min")]
    for label, args, with_uv, with_pip in steps:
        if uv is not None:
            if run_step(label + " (uv)", uv[0] + args, with_uv, env=uv[1]) == 0:
                continue
            say("    uv failed; trying pip")
        if run_step(label + " (pip)", [python, "-m", "pip", "install", "--progress-bar", "off", *args], with_pip):
            return 1
    say(f"==> environment ready in {_clock(time.monotonic() - t0)}: {venv}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["step"]:
        parser = argparse.ArgumentParser(prog="install_env.py step")
        parser.add_argument("--label", required=True)
        parser.add_argument("--heartbeat", type=float, default=HEARTBEAT_S)
        parser.add_argument("cmd", nargs=argparse.REMAINDER)
        args = parser.parse_args(argv[1:])
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        return run_step(args.label, cmd, heartbeat_s=args.heartbeat)
    parser = argparse.ArgumentParser(prog="install_env.py")
    parser.add_argument("--venv", type=Path, default=Path(".venv"))
    parser.add_argument("--torch", default="", help="torch's pins, space separated")
    parser.add_argument("--extras", default="all")
    parser.add_argument("--installer", choices=["auto", "pip"], default=os.environ.get("INSTALLER", "auto"),
                        help="auto: uv where it can be installed, else pip")
    args = parser.parse_args(argv)
    return install(args.venv, args.torch.split(), args.extras, args.installer)


if __name__ == "__main__":
    sys.exit(main())
