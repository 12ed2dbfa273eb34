"""`torchwise lr-find`: the plot, the curve and the suggestion applied to the config. The sweep itself is
tests/unit/train/test_lr_find.py."""
import json

import pytest
import yaml

from conftest import run_cli


def test_cli_lr_find_writes_plot_curve_and_applies_to_the_config(image_folder, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"data": {"path": str(image_folder)},
                                      "train": {"batch_size": 16, "lr": 0.5, "epochs": 2, "threads": 1}}))
    out = tmp_path / "sweep"
    proc = run_cli("lr-find", "--config", config, "--out", out, "--steps", "30", "--apply")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    curve = json.loads((out / "lr_find.json").read_text())
    assert (out / "lr_find.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert curve["steps"] == len(curve["lrs"]) > 5 and curve["suggested_lr"] > 0
    assert "steepest descent" in proc.stdout and "min/10" in proc.stdout and "applied" in proc.stdout
    saved = yaml.safe_load(config.read_text())
    assert saved["train"]["lr"] == pytest.approx(curve["suggested_lr"], rel=1e-2)
    assert saved["train"]["batch_size"] == 16 and saved["data"]["path"] == str(image_folder)
