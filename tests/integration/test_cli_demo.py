"""The demo is the first thing a new user runs: real digits, the real train path, fast and accurate."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, run_cli


ROOT = REPO_ROOT


def make_demo(cwd: Path) -> subprocess.CompletedProcess:
    """README's `make demo`, for real, in `cwd`, with the virtual environment running these tests (it
    is already installed: -o keeps make from reinstalling it because a file is newer than its stamp)."""
    venv = Path(sys.executable).parent.parent
    make = shutil.which("make")
    assert make, "`make` is not installed: README's first command cannot run"
    return subprocess.run([make, "-f", str(ROOT / "Makefile"), f"VENV={venv}", "-o", f"{venv}/.installed-all", "demo"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_make_demo_trains_digits_accurately_and_leaves_what_the_tour_uses(tmp_path):
    # How long the demo takes is the benchmarks' business; here a limit only stops a hang.
    proc = make_demo(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    digits = sorted((tmp_path / "torchwise-demo" / "digits").glob("*/*.png"))
    assert len(digits) == 1797
    run_dir = Path("torchwise-demo") / "run"  # printed relative to where the user ran it
    evaluation = json.loads((tmp_path / run_dir / "eval.json").read_text())
    assert evaluation["examples"] == 359
    assert evaluation["accuracy"] >= 0.95, evaluation["accuracy"]
    assert (tmp_path / run_dir / "final" / "model.safetensors").is_file()
    assert (tmp_path / run_dir / "report.html").is_file()
    assert f"open the report: {run_dir / 'report.html'}" in proc.stdout
    assert "next, try:" in proc.stdout and "eval --run" in proc.stdout
    # the chain ends with export + onnxruntime verification + one prediction from the .onnx alone
    assert (tmp_path / run_dir / "export" / "model.onnx").is_file()
    assert "matches PyTorch (max abs error" in proc.stdout
    assert "prediction from model.onnx alone" in proc.stdout
    predicted = run_cli("predict", run_dir / "export" / "model.onnx", Path("torchwise-demo") / "digits" / "7", "--json",
                        cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    top1 = [row["predictions"][0]["class"] for row in json.loads(predicted.stdout)]
    assert sum(label == "7" for label in top1) >= 0.9 * len(top1)
