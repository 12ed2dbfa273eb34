"""Per-channel normalization statistics, computed on the training split only.

Statistics taken over train + val would leak the validation set into preprocessing; so they are
computed from the training images alone, after the deterministic resize/crop the model sees, and
cached in the run directory (keyed by a fingerprint of the files and the preprocessing) so that
`--resume` and `eval` use exactly the same numbers without recomputing them.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any, Callable, Sequence

from torchwise.files import write_text
from torchwise.file_names import name_bytes

# The statistics torchvision's ImageNet weights were trained with; used with --weights, because
# a pretrained network expects its inputs normalized the way it was trained.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# Enough images for mean/std to be stable to ~3 decimals; bigger sets are subsampled (seeded).
MAX_STATS_IMAGES = 5000

STATS_FILE = "data_stats.json"


def pretrained_stats(channels: int) -> tuple[list[float], list[float]]:
    if channels == 1:  # a grayscale input to an RGB-pretrained network: the average channel
        return [sum(IMAGENET_MEAN) / 3], [sum(IMAGENET_STD) / 3]
    return list(IMAGENET_MEAN), list(IMAGENET_STD)


def fingerprint(paths: Sequence[str], settings: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for path in sorted(paths):
        try:
            stat = Path(path).stat()
            digest.update(name_bytes(path) + f"|{stat.st_size}|{int(stat.st_mtime)}\n".encode())
        except OSError:
            digest.update(name_bytes(path) + b"|missing\n")
    return digest.hexdigest()[:16]


def compute_mean_std(load: Callable[[int], Any], count: int, *, channels: int, seed: int = 0,
                     progress: bool = False) -> tuple[list[float], list[float]]:
    """Mean and std per channel over `load(i)` (a C x H x W float tensor in [0, 1]) for i < count."""
    import torch
    from tqdm.auto import tqdm

    indices = list(range(count))
    if count > MAX_STATS_IMAGES:
        indices = sorted(random.Random(seed).sample(indices, MAX_STATS_IMAGES))
    total = torch.zeros(channels, dtype=torch.float64)
    total_sq = torch.zeros(channels, dtype=torch.float64)
    pixels = 0
    for i in tqdm(indices, desc="normalization stats (train split)", unit="img", disable=not progress,
                  leave=False):
        x = load(i).to(torch.float64).reshape(channels, -1)
        total += x.sum(dim=1)
        total_sq += (x * x).sum(dim=1)
        pixels += x.shape[1]
    mean = total / max(pixels, 1)
    var = (total_sq / max(pixels, 1) - mean * mean).clamp_min(0.0)
    # A constant channel (blank images) would divide by zero; 1.0 leaves it merely centered.
    std = torch.where(var.sqrt() > 1e-6, var.sqrt(), torch.ones_like(var))
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in std]


def cached_mean_std(run_dir: str | Path | None, key: str, compute: Callable[[], tuple[list[float], list[float]]]
                    ) -> tuple[list[float], list[float], bool]:
    """(mean, std, from_cache): read run_dir/data_stats.json when its key matches, else compute and store."""
    path = Path(run_dir) / STATS_FILE if run_dir else None
    if path is not None and path.is_file():
        try:
            cached = json.loads(path.read_text())
            if cached.get("key") == key:
                return list(cached["mean"]), list(cached["std"]), True
        except (ValueError, KeyError):
            pass  # a damaged cache is recomputed, never trusted
    mean, std = compute()
    if path is not None:  # atomically: a crash mid-write leaves the previous cache (or none), never half of one
        write_text(path, json.dumps({"key": key, "mean": mean, "std": std, "split": "train"}, indent=2))
    return mean, std, False
