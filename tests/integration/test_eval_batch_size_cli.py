"""eval_batch_size through `torchwise eval`: the same results at another batch size."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from conftest import run_cli


def _val_losses(run_dir: Path) -> list[float]:
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return [float(row["val_loss"]) for row in csv.DictReader(handle)]


def test_cli_eval_batch_size(classification_csv, tmp_path):
    common = ("train", "--data", classification_csv, "--target", "label", "--epochs", "2", "--batch-size", "16",
              "--missing", "impute", "--set", "train.threads=1", "--set", "output.report=false")
    proc = run_cli(*common, "--out", tmp_path / "big", "--set", "train.eval_batch_size=64")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "data: validation and evaluation batches of 64 (training batches of 16)" in proc.stdout
    assert yaml.safe_load((tmp_path / "big" / "config.yaml").read_text())["train"]["eval_batch_size"] == 64
    plain = run_cli(*common, "--out", tmp_path / "plain")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "validation and evaluation batches" not in plain.stdout
    assert yaml.safe_load((tmp_path / "plain" / "config.yaml").read_text())["train"]["eval_batch_size"] is None
    assert _val_losses(tmp_path / "big") == pytest.approx(_val_losses(tmp_path / "plain"), rel=1e-5)

    bad = run_cli(*common, "--out", tmp_path / "bad", "--set", "train.eval_batch_size=0")
    assert bad.returncode == 2
    assert "out of range for 'train.eval_batch_size'" in bad.stderr and "Traceback" not in bad.stderr
