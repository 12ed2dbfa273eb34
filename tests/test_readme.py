"""README.md is a contract: its Python example runs as written and its set-up commands are real."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_python_example_runs_as_written(tmp_path):
    block = README.split("<!-- readme-example")[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert 15 <= len(block.strip().splitlines()) <= 25
    script = tmp_path / "example.py"
    script.write_text(block)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    best = float(re.search(r"best val_acc ([0-9.]+)", proc.stdout).group(1))
    assert best > 0.9
    assert (tmp_path / "runs" / "digits" / "final" / "model.safetensors").is_file()
    # the comment's promise: with resume=True the finished run is picked up from its last checkpoint
    script.write_text(block.replace('out_dir="runs/digits",', 'out_dir="runs/digits", resume=True,'))
    resumed = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    # and without it, the old run is not silently overwritten
    script.write_text(block)
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode != 0 and "already holds checkpoints" in again.stderr


def console_commands(section_marker: str) -> list[str]:
    """The `$ ` lines of the console blocks after `section_marker`, up to the next `## ` heading."""
    section = README.split(section_marker, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        commands += [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    return commands


# What a README command is expected to end with (all others must succeed).
EXPECTED_FAILURES = {"--set train.schedular=onecycle": (2, "did you mean: train.scheduler")}


def run_readme_command(command: str, cwd: Path) -> subprocess.CompletedProcess:
    import shlex

    argv = shlex.split(command)
    assert argv[0] == "torchwise", command
    return subprocess.run([sys.executable, "-m", "torchwise", *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def run_and_check(commands: list[str], cwd: Path) -> None:
    for command in commands:
        proc = run_readme_command(command, cwd)
        expected = next((v for k, v in EXPECTED_FAILURES.items() if k in command), None)
        if expected is None:
            # doctor exits 1 when it finds a problem on the machine it runs on; that is its job
            assert proc.returncode in (0, 1) if " doctor" in command else proc.returncode == 0, \
                f"{command}\n{proc.stdout}\n{proc.stderr}"
        else:
            assert proc.returncode == expected[0] and expected[1] in proc.stdout + proc.stderr, \
                f"{command}\n{proc.stdout}\n{proc.stderr}"


def test_every_command_of_the_cli_tour_and_the_toolbox_runs(tmp_path):
    tour = console_commands("<!-- readme-tour")
    assert tour[0].startswith("torchwise demo") and len(tour) >= 7
    toolbox = console_commands("<!-- readme-toolbox")
    assert {c.split()[1] for c in toolbox} == {"lr-find", "summary", "memory"}
    ddp = console_commands("<!-- readme-ddp")
    assert len(ddp) == 1 and "--nproc 2" in ddp[0]
    space = README.split("<!-- readme-space", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "space.yaml").write_text(space)
    tune = console_commands("<!-- readme-space")
    assert [c.split()[1] for c in tune] == ["tune", "train"]
    run_and_check(tour + toolbox + tune + ddp, tmp_path)
    assert (tmp_path / "runs" / "search" / "best.yaml").is_file()
    assert (tmp_path / "lr-find" / "lr_find.png").is_file()


def test_the_check_example_finds_its_two_planted_mistakes(tmp_path):
    import shutil

    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    commands = console_commands("<!-- readme-check")
    assert commands == ["torchwise check -- python examples/buggy_train.py"]
    proc = run_readme_command(commands[0], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = set(re.findall(r"\[error\] ([a-z-]+):", proc.stdout + proc.stderr))
    assert found == {"eval-mode-missing", "softmax-before-loss"}
    block = README.split("<!-- readme-check", 1)[1].split("```", 2)[1]
    for line in block.splitlines():  # the run's summary and coverage lines, numbers included
        if line.startswith(("torchwise check: examples/", "coverage: ")):
            assert line in proc.stderr, f"README shows {line!r}; the run printed:\n{proc.stderr}"


def test_the_multi_node_recipe_runs_on_one_machine(tmp_path):
    import shlex

    from torchwise.data.digits import write_digits
    from torchwise.train.distributed import free_port

    block = README.split("<!-- readme-multinode", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 2 and all("--nnodes 2" in line for line in lines)
    data = write_digits(tmp_path / "digits")
    port = free_port()
    nodes = []
    for line in lines:
        line = line.replace("10.0.0.1:29400", f"127.0.0.1:{port}").replace("DATA", str(data))
        line = line.replace("RUNDIR", str(tmp_path / "run")) + " --epochs 1 --quiet"
        argv = shlex.split(line)
        nodes.append(subprocess.Popen([sys.executable, "-m", "torchwise", *argv[1:]], cwd=tmp_path, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outputs = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
    assert "done: val accuracy" in outputs[0][0]


def test_readme_counts_the_checker_catalog():
    from torchwise.diagnose.catalog import CATALOG

    m = re.search(r"— (\d+) catalog entries", README)
    assert m and int(m.group(1)) == len(CATALOG), (m and m.group(1), len(CATALOG))
