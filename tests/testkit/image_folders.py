"""Small image folders written pixel by pixel for the image-path robustness tests."""
from __future__ import annotations

from pathlib import Path
from PIL import Image


def _img(path: Path, value: int = 100, mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (8, 8), (value, value, value) if mode == "RGB" else value).save(path)
    return path


def _classes(root: Path, per_class: int = 3, names=("cat", "dog")) -> Path:
    for c, name in enumerate(names):
        for i in range(per_class):
            _img(root / name / f"{i}.png", 40 + 80 * c + i)
    return root
