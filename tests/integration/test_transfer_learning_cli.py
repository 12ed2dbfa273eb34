"""Transfer learning through `torchwise train`: a timm model fine-tuned from a LOCAL weights file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from torchwise.models import model_from_run
from testkit.pretrained_files import imagenet_file


pytest.importorskip("timm")


def write_random_images(root: Path, per_class: int = 20, size: int = 32) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(("cats", "dogs")):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size, size, 3)).astype(np.float32) * 0.5 + 100 * c
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(root / name / f"{i:02d}.png")
    return root


def test_fine_tuning_a_timm_model_from_a_local_file_through_the_cli(tmp_path):
    from conftest import run_cli

    data = write_random_images(tmp_path / "pets")
    path, state = imagenet_file(tmp_path, "timm:resnet18")
    run_dir = tmp_path / "run"
    proc = run_cli("train", "--data", data, "--model", "timm:resnet18", "--weights", path, "--epochs", "1",
                   "--image-size", "32", "--batch-size", "16", "--out", run_dir,
                   "--set", "train.threads=1", "--set", "output.report=false", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the head's 2 skipped" in proc.stdout and "fc.weight: file (1000, 512), model (2, 512)" in proc.stdout
    final = load_file(str(run_dir / "final" / "model.safetensors"))
    assert final["fc.weight"].shape == (2, 512)
    assert set(final) == set(state)
    meta = json.loads((run_dir / "final" / "meta.json").read_text())
    assert meta["model"]["name"] == "timm:resnet18"
    model, _ = model_from_run(run_dir)  # the timm model is built again from the run's record
    assert torch.equal(model.fc.weight, final["fc.weight"])
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 2)
