"""Class weights through `torchwise train`: the train split's weights recorded, the rare class found, a
regression refused. The Python API is tests/unit/train/test_class_weights.py."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from testkit.imbalanced_data import make_imbalanced_csv


# ----------------------------------------------------------------------------- the CLI on real data


@pytest.fixture(scope="module")
def imbalanced_csv(tmp_path_factory) -> Path:
    return make_imbalanced_csv(tmp_path_factory)


def _train_counts(csv_path: Path, run_dir: Path, class_names: list[str]) -> list[int]:
    """Class counts of the rows the run trained on, read back from the CSV through split.json."""
    with csv_path.open(newline="") as handle:
        labels = [row["label"] for row in csv.DictReader(handle)]
    train_rows = json.loads((run_dir / "split.json").read_text())["train_rows"]
    return [sum(labels[r] == name for r in train_rows) for name in class_names]


def _cli_train(csv_path: Path, run_dir: Path, *sets: str):
    return run_cli("train", "--data", csv_path, "--target", "label", "--out", run_dir, "--epochs", "3",
                   "--batch-size", "32", "--lr", "0.003", "--seed", "0", "--set", "train.threads=1",
                   *[arg for s in sets for arg in ("--set", s)])


def test_cli_balanced_run_records_train_split_weights_and_finds_the_rare_class(imbalanced_csv, tmp_path):
    weighted_dir, plain_dir = tmp_path / "weighted", tmp_path / "plain"
    proc = _cli_train(imbalanced_csv, weighted_dir, "train.class_weights=balanced")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    saved = yaml.safe_load((weighted_dir / "config.yaml").read_text())
    assert saved["train"]["class_weights"] == "balanced"
    meta = json.loads((weighted_dir / "meta.json").read_text())
    assert meta["class_names"] == ["fraud", "ok"]
    recorded = meta["class_weights"]
    assert recorded["scheme"] == "balanced" and recorded["computed_from"] == "training split"
    # the counts are those of the TRAINING rows (20 / 220), not of the whole file (25 / 275)
    counts = _train_counts(imbalanced_csv, weighted_dir, meta["class_names"])
    assert recorded["train_counts"] == counts == [20, 220]
    n, k = sum(counts), len(counts)
    assert recorded["values"] == pytest.approx([n / (k * c) for c in counts], rel=1e-7)  # 6.0, 0.5454...
    assert json.loads((weighted_dir / "final" / "meta.json").read_text())["class_weights"] == recorded
    assert ("loss: cross-entropy weighted per class (train.class_weights=balanced; training loss and val_loss): "
            "balanced, from the 240 training samples: fraud 6 (20), ok 0.5455 (220)") in proc.stdout
    evaluation = json.loads((weighted_dir / "eval.json").read_text())
    assert evaluation["data"]["class_weights"].startswith("balanced, from the 240 training samples")

    # Same data, seed and schedule without weights: the majority class swallows the rare one.
    proc = _cli_train(imbalanced_csv, plain_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "loss:" not in proc.stdout
    assert "class_weights" not in json.loads((plain_dir / "meta.json").read_text())
    recall = {name: {c["class"]: c["recall"] for c in json.loads((d / "eval.json").read_text())["per_class"]}
              for name, d in (("weighted", weighted_dir), ("plain", plain_dir))}
    assert recall["weighted"]["fraud"] >= 0.6, recall  # 5 fraud rows in val: at least 3 found
    assert recall["weighted"]["fraud"] >= recall["plain"]["fraud"] + 0.4, recall


def test_cli_class_weights_on_a_regression_is_a_config_error(regression_csv, tmp_path):
    run_dir = tmp_path / "reg"
    proc = run_cli("train", "--data", regression_csv, "--target", "price", "--out", run_dir, "--epochs", "1",
                   "--set", "train.class_weights=balanced")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "train.class_weights is for classification, but this task is a regression" in proc.stderr
    assert "problem: regression" in proc.stderr and "fix: drop --set train.class_weights" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "split.json").exists()

    proc = run_cli("train", "--data", regression_csv, "--target", "price", "--out", run_dir, "--problem",
                   "regression", "--set", "train.class_weights=balanced")
    assert proc.returncode == 2 and "but data.problem is regression" in proc.stderr, proc.stderr

    proc = run_cli("train", "--data", regression_csv, "--target", "price", "--out", run_dir,
                   "--set", "train.class_weights=inverse")
    assert proc.returncode == 2, proc.stderr
    assert "allowed: 'none' | 'balanced'" in proc.stderr
