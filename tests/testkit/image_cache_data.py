"""Image folders for the cache tests, and what a cached data set reads back."""
from __future__ import annotations

from pathlib import Path
import numpy as np
import torch
from PIL import Image
from torchwise import config as cfg
from torchwise.data.tasks import prepare_task


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
