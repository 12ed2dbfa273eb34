"""`torchwise check` sees through the training frameworks: Lightning, transformers' Trainer and accelerate.

Each framework has a correct script and a twin with one planted mistake (tests/check_frameworks/). Both run
through the real command line, in a subprocess, on the CPU, as a user runs them:

- the plain script exits 0, and under `torchwise check` it runs unchanged: to its end, its own output intact;
- the buggy twin's report has the planted id as a warning or an error, at the script's line marked
  `# ... reported here` (the user's own line, never one inside the framework); check exits 1;
- the correct twin gets no warning and no error (only the info hints listed in ALLOWED_HINTS); check exits 0.

Where the mistake's cause and the reported line differ, the script marks both: hf_trainer_labels_from_one.py
builds its labels 1..3 in the Dataset (`# planted`), but the loss that sees them is computed inside transformers,
so the innermost line of the script on the stack is `trainer.train()`, and that is the line check names.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TESTS_DIR


pytestmark = pytest.mark.slow  # 12 subprocesses, each importing torch and a framework: minutes, not seconds

HERE = TESTS_DIR / "check_frameworks"
TIMEOUT = 300

# transformers' Trainer refuses to start without accelerate (TrainingArguments asks for it), so it needs both
_HF_TRAINER = ("transformers", "accelerate")

# script -> (the framework modules it needs, the planted id or None for the correct twin, the script's last output)
SCRIPTS = {
    "lightning_correct.py": (("lightning",), None, "val_acc"),
    "lightning_softmax_before_loss.py": (("lightning",), "softmax-before-loss", "val_acc"),
    "hf_trainer_correct.py": (_HF_TRAINER, None, "eval {"),
    "hf_trainer_labels_from_one.py": (_HF_TRAINER, "labels-not-zero-based", "eval {"),
    "accelerate_correct.py": (("accelerate",), None, "epoch 3 val acc"),
    "accelerate_missing_zero_grad.py": (("accelerate",), "missing-zero-grad", "epoch 3 val acc"),
}

# info hints a correct twin may get, each with the reason it is by design there (none so far)
ALLOWED_HINTS: dict[str, str] = {}


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TORCHWISE_CHECK_STRICT="1",
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                TOKENIZERS_PARALLELISM="false")


def _run_side_by_side(jobs: list[tuple[list[str], Path, str]]) -> list[tuple[subprocess.CompletedProcess, float]]:
    """The plain run and the checked run at once (each uses one thread, the machine has two): half the wall time."""
    start = time.perf_counter()
    procs = [(subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
              cmd, what) for cmd, cwd, what in jobs]
    out = []
    for p, cmd, what in procs:
        try:
            stdout, stderr = p.communicate(timeout=max(1.0, TIMEOUT - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            for q, _, _ in procs:
                q.kill()
            _, stderr = p.communicate()
            pytest.fail(f"{what} did not finish within {TIMEOUT} s: {' '.join(cmd)}\nstderr tail:\n{stderr[-3000:]}")
        out.append((subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr), time.perf_counter() - start))
    return out


def _reported_line(script: Path) -> int:
    lines = [i for i, line in enumerate(script.read_text().splitlines(), 1) if re.search(r"#.*reported here", line)]
    assert len(lines) == 1, f"{script.name}: expected one line marked '# ... reported here', found {lines}"
    return lines[0]


def _where(where: str | None, cwd: Path) -> tuple[Path | None, int | None]:
    """'path:LINE' (relative to the check's working directory, or absolute) as (resolved path, line)."""
    if not where or ":" not in where:
        return None, None
    path, line = where.rsplit(":", 1)
    return (cwd / path).resolve(), int(line) if line.isdigit() else None


def _show(findings: list[dict]) -> str:
    return ", ".join(f"{f['id']} [{f['severity']}] at {f['where']}" for f in findings) or "none"


def _folder_files() -> set[str]:
    return {str(p.relative_to(HERE)) for p in HERE.rglob("*")}


@pytest.mark.parametrize("name", list(SCRIPTS), ids=lambda n: n.removesuffix(".py"))
def test_check_on_framework_script(name, tmp_path):
    modules, planted, last_output = SCRIPTS[name]
    for module in modules:
        pytest.importorskip(module)
    script = HERE / name
    before = _folder_files()

    plain_cwd, check_cwd = tmp_path / "plain", tmp_path / "check"
    plain_cwd.mkdir()
    check_cwd.mkdir()
    report_path = tmp_path / "report.json"
    (plain, plain_s), (proc, check_s) = _run_side_by_side([
        ([sys.executable, str(script)], plain_cwd, f"the plain script {name}"),
        ([sys.executable, "-m", "torchwise", "check", "--report", str(report_path), "--", sys.executable, str(script)],
         check_cwd, f"torchwise check on {name}")])
    assert plain.returncode == 0, f"{name} itself fails ({plain_s:.0f} s):\n{plain.stderr[-4000:]}"
    assert last_output in plain.stdout, f"{name} did not print {last_output!r}:\n{plain.stdout[-2000:]}"
    timing = f"{name}: plain {plain_s:.1f} s, check {check_s:.1f} s"
    assert report_path.exists(), f"{timing}; check wrote no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report = json.loads(report_path.read_text())
    findings = report["findings"]
    mistakes = [f for f in findings if f["severity"] in ("warning", "error")]
    print(f"{timing}; exit {proc.returncode}; {report['steps']} steps; findings: {_show(findings)}")
    summary = f"{timing}; exit {proc.returncode}; findings: {_show(findings)}\n--- check stderr tail:\n" \
              f"{proc.stderr[-3000:]}"

    # runs the script unchanged: to its end, its own output intact, no checker failure, training seen
    assert not report["script_failed"], summary
    assert report["checker_errors"] == [], summary
    assert report["steps"] > 0, f"no optimizer step seen: {summary}"
    assert not report["stopped_early"], f"the script was stopped before its end: {summary}"
    assert last_output in proc.stdout, f"the script's own output is missing under check: {summary}"
    assert _folder_files() == before, f"{name} wrote files next to itself: {sorted(_folder_files() - before)}"

    if planted is None:
        assert mistakes == [], f"the correct twin gets findings: {summary}"
        hints = {f["id"] for f in findings} - set(ALLOWED_HINTS)
        assert not hints, f"info hints not in ALLOWED_HINTS: {sorted(hints)}: {summary}"
        assert proc.returncode == 0, summary
        return

    hits = [f for f in mistakes if f["id"] == planted]
    assert hits, f"the planted {planted} is not reported as a warning or error: {summary}"
    want = (script.resolve(), _reported_line(script))
    assert any(_where(f["where"], check_cwd) == want for f in hits), \
        f"{planted} is not reported at {script.name}:{want[1]}: {summary}"
    assert proc.returncode == 1, summary
