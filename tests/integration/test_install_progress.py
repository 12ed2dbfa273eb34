"""README's two commands install torch (minutes of silent unpacking with plain pip): tools/install_env.py,
which the Makefile runs, says what each step installs and prints a heartbeat line while a step is silent."""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from conftest import REPO_ROOT

INSTALL = REPO_ROOT / "tools" / "install_env.py"
# the slow real command: quiet until it writes its "done" file
SLOW = "import pathlib, sys, time; time.sleep(4); pathlib.Path(sys.argv[1]).write_text('done')"


def test_a_silent_step_prints_heartbeats_while_it_runs(tmp_path: Path):
    done = tmp_path / "done"
    proc = subprocess.Popen([sys.executable, str(INSTALL), "step", "--label", "torch: a slow step", "--heartbeat",
                             "0.5", "--", sys.executable, "-c", SLOW, str(done)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, seen_while_running = [], []
    watchdog = threading.Timer(120, proc.kill)  # a hang ends the test instead of the suite
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if "still working on torch" in line:  # is the slow command still running at this moment?
                seen_while_running.append(not done.exists())
        proc.wait(timeout=30)
    finally:
        watchdog.cancel()
    out = "\n".join(lines)
    assert proc.returncode == 0, f"the step failed or was killed after 120 s (exit {proc.returncode}):\n{out}"
    assert lines[0] == "==> torch: a slow step", out
    assert any(seen_while_running), f"no heartbeat line came while the step was still running:\n{out}"
    assert done.read_text() == "done" and lines[-1].startswith("    done in "), out


def test_a_failing_step_says_so_with_its_exit_status(tmp_path: Path):
    proc = subprocess.run([sys.executable, str(INSTALL), "step", "--label", "pip: a failing step", "--",
                           sys.executable, "-c", "import sys; print('no such package'); sys.exit(3)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "    no such package" in proc.stdout and "FAILED (exit 3)" in proc.stdout, proc.stdout


def test_pips_index_settings_become_uvs_flags():
    # `pip config list` lines, as pip prints them (a file's setting and the same one from a PIP_* variable)
    sys.path.insert(0, str(INSTALL.parent))
    try:
        import install_env
    finally:
        sys.path.remove(str(INSTALL.parent))
    listed = ("global.extra-index-url='file:///srv/a/simple file:///srv/b/simple'\n"
              "global.find-links='/srv/wheels'\n:env:.find-links='/srv/wheels'\n"
              "global.constraint='/etc/pins.txt'\nglobal.cert='/etc/ca.crt'\n:env:.default-timeout='180'\n")
    assert install_env.pip_settings(listed) == [
        "--extra-index-url", "file:///srv/a/simple", "--extra-index-url", "file:///srv/b/simple",
        "--find-links", "/srv/wheels", "--constraint", "/etc/pins.txt"]


def test_the_makefile_installs_through_the_progress_script():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "tools/install_env.py" in makefile and "--quiet" not in makefile.split("install-dev:")[0]
    # make test must install everything the tests use; the demo needs only the CLI's extras
    assert "--extras dev" in makefile and "test: install-dev" in makefile and "demo: install\n" in makefile
