"""data.cache with worker processes (fork and spawn) and through `torchwise train`. The in-process cache is
tests/unit/data/test_image_cache.py."""
from __future__ import annotations

import json
import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from conftest import run_cli, write_color_images
from testkit.image_cache_data import task_for, val_batch, write_mixed_images


# Some bigger than the cache side of a 32-pixel input (37), some smaller, both orientations.


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
