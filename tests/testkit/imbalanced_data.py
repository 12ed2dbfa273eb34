"""Imbalanced data sets written to disk: a CSV (8% 'fraud') for the class-weight tests, and an image folder
with one rare class for the rare-class warning and the imbalance headline."""
from __future__ import annotations

import csv
from pathlib import Path
import numpy as np


def _write_imbalanced_csv(path: Path) -> Path:
    """300 rows, 25 'fraud' (8%) and 275 'ok'; fraud rows have a larger x1, with overlap."""
    rng = np.random.default_rng(0)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x1", "x2", "label"])
        for i in range(300):
            rare = i % 12 == 0
            writer.writerow([round(rng.normal(1.2 if rare else 0.0, 1.0), 4), round(rng.normal(0, 1), 4),
                             "fraud" if rare else "ok"])
    return path


def make_imbalanced_csv(tmp_path_factory) -> Path:
    return _write_imbalanced_csv(tmp_path_factory.mktemp("csv") / "transactions.csv")


# The newcomer's folder of issue 28: six classes, one of them ('five') 12 images of 612.
RARE_FOLDER_COUNTS = {"five": 12, "one": 120, "two": 120, "three": 120, "four": 120, "six": 120}


def write_rare_class_folder(root: Path, counts: dict[str, int] | None = None, side: int = 16) -> Path:
    """PNG class folders (RGB, `side` px): each common class a bright bar at its own place on noise, so a model
    learns them in a few steps; the rare class 'five' is the bar of 'six' one pixel lower, too close and too rare
    for a short unweighted run to ever predict it (what the newcomer met)."""
    from PIL import Image

    counts = counts or RARE_FOLDER_COUNTS
    rng = np.random.default_rng(0)
    rows = {name: 2 * i + 1 for i, name in enumerate(n for n in counts if n != "five")}
    rows["five"] = rows.get("six", 1) + 1
    for name, n in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            pixels = rng.integers(0, 60, size=(side, side, 3), dtype=np.uint8)
            pixels[rows[name] % side, :, :] = 230
            Image.fromarray(pixels, "RGB").save(root / name / f"{i:03d}.png")
    return root
