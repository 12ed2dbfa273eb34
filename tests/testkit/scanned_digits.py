"""Digits the way a messy real folder holds them: scikit-learn's 8x8 digits enlarged to 16-96 pixels,
dark on white, stored as gray PNGs, RGB JPEGs and RGBA PNGs in turn: gray pixels in colour files."""
from __future__ import annotations

from pathlib import Path

NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def write_scanned_digits(root: Path, per_class: int, *, sides=(16, 24, 40, 64, 96)) -> Path:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    written: dict[int, int] = {}
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target)):
        if written.get(int(label), 0) >= per_class:
            continue
        k = written[int(label)] = written.get(int(label), 0) + 1
        folder = root / NAMES[label]
        folder.mkdir(parents=True, exist_ok=True)
        side = sides[i % len(sides)]
        image = Image.fromarray(255 - (pixels / 16 * 255).astype(np.uint8), "L").resize((side, side),
                                                                                     Image.BILINEAR)
        if k % 3 == 0:
            image.save(folder / f"{i}.png")
        elif k % 3 == 1:
            image.convert("RGB").save(folder / f"{i}.jpg", quality=85)
        else:
            image.convert("RGBA").save(folder / f"{i}.png")
    return root
