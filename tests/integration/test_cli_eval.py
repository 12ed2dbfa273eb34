"""`torchwise eval` on a finished run: its own validation split, other data, a checkpoint."""
from __future__ import annotations

import json
import shutil

from conftest import run_cli, write_color_images, write_corrupt_files


def test_eval_run_prints_table_and_writes_json(image_run, tmp_path):
    run_dir, _ = image_run
    out = tmp_path / "eval.json"
    proc = run_cli("eval", "--run", run_dir, "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert "accuracy" in proc.stdout and "confusion matrix" in proc.stdout
    for name in ("blue", "green", "red"):
        assert name in proc.stdout
    result = json.loads(out.read_text())
    # the same validation split and weights as the training run's own evaluation
    trained = json.loads((run_dir / "eval.json").read_text())
    assert result["examples"] == trained["examples"]
    assert abs(result["accuracy"] - trained["accuracy"]) < 1e-6
    assert len(result["confusion"]) == 3 and sum(map(sum, result["confusion"])) == result["examples"]
    assert {row["class"] for row in result["per_class"]} == {"blue", "green", "red"}


def test_eval_on_other_data_skips_corrupt_files(image_run, tmp_path):
    run_dir, _ = image_run
    data = tmp_path / "new"
    write_color_images(data, 5, seed=7)
    shutil.rmtree(data / "green")  # a subset of the classes is fine
    write_corrupt_files(data / "blue")
    proc = run_cli("eval", "--run", run_dir, "--data", data, "--json", tmp_path / "new.json")
    assert proc.returncode == 0, proc.stderr
    assert "skipped 2 unreadable file(s)" in proc.stdout
    result = json.loads((tmp_path / "new.json").read_text())
    assert result["examples"] == 10
    assert result["accuracy"] >= 0.8


def test_eval_checkpoint(image_run, tmp_path):
    run_dir, _ = image_run
    checkpoint = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    proc = run_cli("eval", "--checkpoint", checkpoint, "--json", tmp_path / "ckpt.json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "ckpt.json").read_text())
    assert result["weights"].endswith("model.safetensors") and "checkpoints" in result["weights"]


def test_eval_rejects_unknown_classes(image_run, tmp_path):
    run_dir, _ = image_run
    data = tmp_path / "other"
    write_color_images(data, 2, seed=3)
    (data / "purple").mkdir()
    shutil.copy(next((data / "red").glob("*.png")), data / "purple" / "p.png")
    proc = run_cli("eval", "--run", run_dir, "--data", data)
    assert proc.returncode == 2
    assert "purple" in proc.stderr and "Traceback" not in proc.stderr
