"""Robustness of the image path through `torchwise train`: a looping folder refused with nothing changed, a
16-bit folder trained on."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

from conftest import assert_clear_cli_error, run_cli, tree_snapshot
from testkit.image_folders import _classes


# ----------------------------------------------------------------------------- writers


# Each case: (file name, writer(path), expected mode, check(decoded uint8 array)).


# ----------------------------------------------------------------------------- folders


def _link(link: Path, target: Path | str) -> None:
    os.symlink(target, link)


def test_cli_refuses_a_looping_folder_clearly_and_changes_nothing(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "all", ".")
    before = tree_snapshot(root)
    proc = run_cli("train", "--data", root, "--out", tmp_path / "run", "--epochs", "1", timeout=120)
    assert_clear_cli_error(proc, "link back", "all")
    assert tree_snapshot(root) == before


def test_cli_trains_on_a_16_bit_folder(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "d16"
    for c, name in enumerate(("dim", "bright")):
        (root / name).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(8000, 30000, (16, 16)) + 28000 * c
            Image.fromarray(pixels.astype(np.uint16)).save(root / name / f"{i:02d}.png")
    run = tmp_path / "run"
    proc = run_cli("train", "--data", root, "--out", run, "--epochs", "1", "--batch-size", "8", "--seed", "0",
                   "--set", "train.threads=1", timeout=180)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text
    assert f"data: {root} (split by val_fraction): 2 classes, 20 train / 4 val images, input 1x16x16" in text, text[-3000:]
    meta = json.loads((run / "final" / "meta.json").read_text())
    # The saturated reading made every pixel 1.0 (mean 1, std 0); the real one is mid-gray and spread.
    assert 0.2 < meta["mean"][0] < 0.8 and meta["std"][0] > 0.1, meta["mean"]
