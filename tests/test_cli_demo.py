"""The demo is the first thing a new user runs: real digits, the real train path, fast and accurate."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli


@pytest.mark.slow
def test_demo_trains_digits_fast_and_accurately(tmp_path):
    # How long the demo takes is the benchmarks' business; here a limit only stops a hang.
    proc = run_cli("demo", "--out", tmp_path / "demo", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    digits = sorted((tmp_path / "demo" / "digits").glob("*/*.png"))
    assert len(digits) == 1797
    run_dir = tmp_path / "demo" / "run"
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["examples"] == 359
    assert evaluation["accuracy"] >= 0.95, evaluation["accuracy"]
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert (run_dir / "report.html").is_file()
    assert f"open the report: {run_dir / 'report.html'}" in proc.stdout
    assert "next, try:" in proc.stdout and "eval --run" in proc.stdout
    # the chain ends with export + onnxruntime verification + one prediction from the .onnx alone
    assert (run_dir / "export" / "model.onnx").is_file()
    assert "matches PyTorch (max abs error" in proc.stdout
    assert "prediction from model.onnx alone" in proc.stdout
    predicted = run_cli("predict", run_dir / "export" / "model.onnx", tmp_path / "demo" / "digits" / "7", "--json")
    assert predicted.returncode == 0, predicted.stderr
    top1 = [row["predictions"][0]["class"] for row in json.loads(predicted.stdout)]
    assert sum(label == "7" for label in top1) >= 0.9 * len(top1)
