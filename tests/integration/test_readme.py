"""README.md is a contract: its Python example runs as written and its set-up commands are real."""
import re
import subprocess
import sys
from pathlib import Path
from conftest import REPO_ROOT


ROOT = REPO_ROOT
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


def console_sessions(section_marker: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines README shows for it) for each `$ ` line of the console blocks after
    `section_marker`, up to the next `## ` heading."""
    section = README.split(section_marker, 1)[1].split("\n## ", 1)[0]
    sessions: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                sessions.append((line[2:], []))
            elif sessions and line.strip():
                sessions[-1][1].append(line)
    return sessions


def console_commands(section_marker: str) -> list[str]:
    return [command for command, _ in console_sessions(section_marker)]


# --- README's numbers against the run's -----------------------------------------------------------
# A number README shows is checked against the same line of the real output: counts exactly, scores
# within a tolerance (another CPU may round differently), times, sizes and throughput not at all
# (they belong to the machine, and benchmarks measure them).
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
MACHINE_UNITS = re.compile(r"\s?(?:s|ms|samples/s|B|KiB|MiB|GiB)\b|\s?s\)")
SCORE_ABS_TOL, SCORE_REL_TOL = 0.03, 0.10

# Lines whose numbers sit on the edge of a divergence, with why: there a last-bit difference between two CPUs'
# kernels moves the result a step or two, so their counts may differ by LOOSE_COUNT and their values by
# LOOSE_REL_TOL (a change of the code that matters, such as a sweep twice as long, still fails).
LOOSE_LINES = {"lr-find:": "the sweep stops where the loss explodes; measured on two machines of the same "
                           "kind with the same packages: 93 steps to lr 2.72, and 92 steps to lr 2.26"}
LOOSE_COUNT, LOOSE_REL_TOL = 3, 0.25


def _numbers(line: str) -> list[tuple[str, bool]]:
    """Each number of the line with whether it is a machine measurement (a time, size or speed)."""
    found = []
    for m in NUMBER.finditer(line):
        after = line[m.end():m.end() + 12]
        machine = bool(MACHINE_UNITS.match(after)) or "e" in m.group().lower()  # 1.9e-06: rounding noise
        found.append((m.group(), machine))
    return found


def _value(token: str) -> float:
    return float(token.rstrip("%").replace(",", ""))


def _close(shown: str, got: str, loose: bool = False) -> bool:
    a, b = _value(shown), _value(got)
    if loose:
        if re.fullmatch(r"[-+]?[\d,]+", shown):
            return abs(a - b) <= LOOSE_COUNT
        return abs(a - b) <= LOOSE_REL_TOL * max(abs(a), abs(b))
    if shown.endswith("%"):  # a share (agreement, memory saved): within a few points
        return abs(a - b) <= 3.0 + SCORE_REL_TOL / 2 * abs(a)
    if re.fullmatch(r"[-+]?[\d,]+", shown):  # a count (examples, steps, classes): exact
        return a == b
    if 0.0 <= a <= 1.0 and len(shown.split(".")[-1]) >= 3:  # a score in [0, 1] (accuracy, F1, ...)
        return abs(a - b) <= SCORE_ABS_TOL
    return abs(a - b) <= SCORE_REL_TOL * max(abs(a), abs(b))


def _key(line: str) -> str:
    """What identifies a line: its words before the first number (the rest of the line is checked)."""
    return " ".join(NUMBER.split(line, maxsplit=1)[0].split())


def readme_number_mismatches(shown: list[str], printed: str) -> list[str]:
    """README lines whose numbers disagree with the line of the same words in the real output."""
    printed_lines = [line for line in printed.splitlines() if line.strip()]
    machine_columns: set[int] = set()
    problems = []
    for line in shown:
        if line.strip() in ("...", "") or not _numbers(line):
            if "duration_s" in line:  # a table header: its timing column holds machine numbers
                machine_columns = {i for i, word in enumerate(line.split()) if word.endswith("_s")}
            continue
        key = _key(line)
        candidates = [p for p in printed_lines if _key(p) == key and len(_numbers(p)) == len(_numbers(line))]
        if not candidates:
            problems.append(f"README shows {line!r}; no printed line starts {key!r} with as many numbers")
            continue
        words = line.split()
        machine_here = {words[i] for i in machine_columns if i < len(words)}
        loose = any(line.lstrip().startswith(start) for start in LOOSE_LINES)

        def agrees(candidate: str) -> bool:
            return all(machine or token in machine_here or _close(token, got, loose)
                       for (token, machine), (got, _) in zip(_numbers(line), _numbers(candidate)))

        if not any(agrees(c) for c in candidates):
            problems.append(f"README shows {line!r}; the run printed {candidates[0]!r}")
    return problems


def test_the_number_comparison_tells_drift_from_noise():
    shown = ["done: val accuracy 0.9694 after 69 steps (3 epochs) in 4.1 s (1050.2 samples/s)"]
    assert readme_number_mismatches(shown, "done: val accuracy 0.9612 after 69 steps (3 epochs) in 9.9 s (301.0 samples/s)") == []
    assert readme_number_mismatches(shown, "done: val accuracy 0.7075 after 69 steps (3 epochs) in 4.1 s (1050.2 samples/s)")
    assert readme_number_mismatches(shown, "done: val accuracy 0.9694 after 70 steps (3 epochs) in 4.1 s (1050.2 samples/s)")
    assert readme_number_mismatches(shown, "something else entirely")
    table = ["trial  state     val_loss  train.lr  duration_s", "0      complete  0.3308    0.002288  6.41"]
    assert readme_number_mismatches(table, "0      complete  0.3390    0.002288  1.20") == []
    assert readme_number_mismatches(table, "0      complete  0.9000    0.002288  6.41")
    saved = ["measured peak 142.9 MiB -> 101.2 MiB (29% less)"]
    assert readme_number_mismatches(saved, "measured peak 143.7 MiB -> 101.2 MiB (30% less)") == []
    assert readme_number_mismatches(saved, "measured peak 143.7 MiB -> 131.2 MiB (9% less)")
    edge = ["lr-find: 93 steps from 1e-07 to 2.72; diverged at lr=2.72 (smoothed loss 3.188 > 4 x best 0.691)"]
    assert readme_number_mismatches(edge, "lr-find: 92 steps from 1e-07 to 2.26; diverged at lr=2.26 "
                                          "(smoothed loss 2.917 > 4 x best 0.691)") == []
    assert readme_number_mismatches(edge, "lr-find: 61 steps from 1e-07 to 0.04; diverged at lr=0.04 "
                                          "(smoothed loss 2.917 > 4 x best 0.691)")


# What a README command is expected to end with (all others must succeed).
EXPECTED_FAILURES = {"--set train.schedular=onecycle": (2, "did you mean: train.scheduler")}


def run_readme_command(command: str, cwd: Path) -> subprocess.CompletedProcess:
    import shlex

    argv = shlex.split(command)
    assert argv[0] == "torchwise", command
    return subprocess.run([sys.executable, "-m", "torchwise", *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


# Commands whose output describes the machine they run on (its GPU, its workers), not the code.
MACHINE_REPORTS = (" doctor",)


def run_and_check(sessions: list[tuple[str, list[str]]], cwd: Path) -> list[str]:
    """Run each command; assert its exit status; return README's numbers that the run contradicts."""
    mismatches = []
    for command, shown in sessions:
        proc = run_readme_command(command, cwd)
        expected = next((v for k, v in EXPECTED_FAILURES.items() if k in command), None)
        if expected is None:
            # doctor exits 1 when it finds a problem on the machine it runs on; that is its job
            assert proc.returncode in (0, 1) if " doctor" in command else proc.returncode == 0, \
                f"{command}\n{proc.stdout}\n{proc.stderr}"
        else:
            assert proc.returncode == expected[0] and expected[1] in proc.stdout + proc.stderr, \
                f"{command}\n{proc.stdout}\n{proc.stderr}"
        if not any(marker in command for marker in MACHINE_REPORTS):
            printed = (proc.stdout + proc.stderr).replace(f"{cwd}/", "")  # README shows paths relative to it
            mismatches += [f"$ {command}: {m}" for m in readme_number_mismatches(shown, printed)]
    return mismatches


def test_every_command_of_the_cli_tour_and_the_toolbox_runs(tmp_path):
    tour = console_sessions("<!-- readme-tour")
    assert tour[0][0].startswith("torchwise demo") and len(tour) >= 7
    toolbox = console_sessions("<!-- readme-toolbox")
    assert {c.split()[1] for c, _ in toolbox} == {"lr-find", "summary", "memory"}
    ddp = console_sessions("<!-- readme-ddp")
    assert len(ddp) == 1 and "--nproc 2" in ddp[0][0]
    space = README.split("<!-- readme-space", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "space.yaml").write_text(space)
    tune = console_sessions("<!-- readme-space")
    assert [c.split()[1] for c, _ in tune] == ["tune", "train"]
    mismatches = run_and_check(tour + toolbox + tune + ddp, tmp_path)
    assert (tmp_path / "runs" / "search" / "best.yaml").is_file()
    assert (tmp_path / "lr-find" / "lr_find.png").is_file()
    assert not mismatches, "README's numbers drifted from what the commands print:\n" + "\n".join(mismatches)


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
    from torchwise.train.distributed.process_group import free_port

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


def test_the_examples_of_any_model_any_batch_run_as_shown(tmp_path):
    import shlex

    sessions = console_sessions("<!-- readme-examples")
    assert len(sessions) >= 2
    mismatches = []
    for command, shown in sessions:
        argv = shlex.split(command)
        assert argv[0] == "python" and argv[1].startswith("examples/"), command
        proc = subprocess.run([sys.executable, str(ROOT / argv[1]), *argv[2:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr[-3000:]}"
        mismatches += [f"$ {command}: {m}" for m in readme_number_mismatches(shown, proc.stdout + proc.stderr)]
    assert not mismatches, "README's numbers drifted from what the examples print:\n" + "\n".join(mismatches)
