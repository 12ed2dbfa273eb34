"""`torchwise train` on a folder of gray digits stored as colour files (RGB JPEGs, RGBA PNGs): no flips
by default, and the data line says why and which key turns them on (issue 28, item 9)."""
from __future__ import annotations

from pathlib import Path

from conftest import run_cli
from testkit.scanned_digits import write_scanned_digits


def test_train_says_which_augmentations_are_on_and_why(tmp_path: Path):
    folder = write_scanned_digits(tmp_path / "digits", 10)
    proc = run_cli("train", "--data", folder, "--out", tmp_path / "run", "--epochs", "1", "--quiet",
                   "--set", "train.max_steps=2", "--set", "train.threads=1", "--set", "output.report=false",
                   timeout=300)
    assert proc.returncode == 0, f"torchwise train failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    line = next((x for x in proc.stdout.splitlines() if x.startswith("data: ") and "augmentation" in x), None)
    assert line is not None, f"no data line with the augmentation in:\n{proc.stdout}"
    assert "input 3x" in line, line  # colour files: the model takes RGB, yet the pixels are gray
    assert "random crop >= 0.35 of the area, no flips, val center crop 0.875" in line, line
    assert "no flips, as every image is gray" in line and "data.hflip=true turns them on" in line, line
