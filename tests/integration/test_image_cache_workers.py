"""data.cache with worker processes (fork and spawn) and through `torchwise train`. The in-process cache is
tests/unit/data/test_image_cache.py."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from conftest import run_cli, write_color_images
from torchwise import config as cfg
from torchwise.data.tasks import prepare_task

# Some bigger than the cache side of a 32-pixel input (37), some smaller, both orientations.
SIZES = [(60, 45), (45, 60), (37, 50), (30, 20), (81, 40), (40, 40)]


def write_mixed_images(root: Path, per_class: int = 6, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    for c, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = SIZES[i % len(SIZES)]
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            pixels[..., c] //= 3  # a little class signal
            image = Image.fromarray(pixels)
            if i % 2:
                image.save(root / name / f"{i}.jpg", quality=90)
            else:
                image.save(root / name / f"{i}.png")
    return root


def task_for(data: Path, cache: str, cache_dir: Path, *sets: str, log=None):
    config = cfg.resolve(flags={"data": str(data), "image_size": "32"},
                         sets=[f"data.cache={cache}", f"data.cache_dir={cache_dir}", *sets])
    lines: list[str] = []
    task = prepare_task(config, None, log=log or lines.append)
    return task, lines


def val_batch(task) -> torch.Tensor:
    return torch.stack([task.val[i][0] for i in range(len(task.val))])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_disk_cache_in_worker_processes(tmp_path, context):
    data = write_mixed_images(tmp_path / "data")
    disk, _ = task_for(data, "disk", tmp_path / "c")
    off, _ = task_for(data, "off", tmp_path / "c")
    # A worker gets the file name, not the pixels: it maps pixels.npy itself.
    assert len(pickle.dumps(disk.train)) < disk.train.cache.nbytes / 2
    val = DataLoader(disk.val, batch_size=4, num_workers=2, multiprocessing_context=context)
    assert torch.equal(torch.cat([x for x, _ in val]), val_batch(off))
    if context == "spawn":
        return  # (spawned workers start slowly: one loader is enough to show they map the file)
    train = DataLoader(disk.train, batch_size=5, shuffle=True, num_workers=2, multiprocessing_context=context)
    shapes = [tuple(x.shape) for x, _ in train]
    assert shapes[0] == (5, 3, 32, 32) and sum(s[0] for s in shapes) == len(disk.train)


def test_memory_cache_in_spawned_workers(tmp_path):
    data = write_mixed_images(tmp_path / "data")
    memory, _ = task_for(data, "memory", tmp_path / "c")
    off, _ = task_for(data, "off", tmp_path / "c")
    val = DataLoader(memory.val, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert torch.equal(torch.cat([x for x, _ in val]), val_batch(off))


@pytest.mark.parametrize("cache", ["memory", "disk"])
def test_cli_train_with_cache(tmp_path, cache):
    write_color_images(tmp_path / "data", 8, seed=0, size=16)
    run_dir = tmp_path / "run"
    proc = run_cli("train", "--data", tmp_path / "data", "--out", run_dir, "--epochs", "1", "--batch-size", "8",
                   "--set", f"data.cache={cache}", "--set", f"data.cache_dir={tmp_path / 'cache'}",
                   "--set", "train.threads=1", "--set", "output.report=false", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("data: image cache:"))
    assert line.startswith(f"data: image cache: {cache} (data.cache={cache}): 24 images")
    assert json.loads((run_dir / "eval.json").read_text())["data"]["cache"] == line.split(": ", 2)[2]
    assert (run_dir / "final" / "model.safetensors").is_file()
    if cache == "disk":
        assert "on disk at " + str(tmp_path / "cache") in line
        assert len([p for p in (tmp_path / "cache").iterdir()]) == 1
