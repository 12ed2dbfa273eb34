"""The embedded demo data set: scikit-learn's bundled digits, written as an image folder.

scikit-learn ships the 1,797 8x8 handwritten digits inside its wheel, so the demo needs no
download. Writing them as PNG files (one folder per class) means the demo goes through exactly
the same image-folder path a user's own data takes: scanning, splitting, statistics, transforms.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torchwise.files import space_and_limit, write_error

DIGITS_COUNT = 1797


def write_digits(root: str | Path) -> Path:
    """Write the digits as root/<digit>/digit_NNNN.png (8x8 grayscale); return root.

    Files already there are kept, so running the demo twice does not rewrite them.
    """
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    root = Path(root)
    if len(list(root.glob("*/digit_*.png"))) == DIGITS_COUNT:
        return root
    bunch = load_digits()
    # Pixel values are 0..16 (counts of set bits in 4x4 blocks of the original scans).
    pixels = np.clip(np.rint(bunch.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    for index, (image, label) in enumerate(zip(pixels, bunch.target)):
        folder = root / str(int(label))
        folder.mkdir(parents=True, exist_ok=True)
        _write_png(Image.fromarray(image, mode="L"), folder / f"digit_{index:04d}.png")
    return root


def _write_png(image: Any, path: Path) -> None:
    """Written beside `path` (a hidden name, which scans skip) and renamed into place: a crash or a full
    disk mid-way leaves whole files or none, never a truncated PNG that the count above would take for a
    digit. Not fsynced as files.write_text does (1,797 fsyncs take seconds): the set is rebuilt from
    scikit-learn whenever it is incomplete."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        image.save(tmp, format="PNG")
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error("Could not write the demo data set.", path, exc,
                          "free disk space (or choose another --out folder) and run the demo again",
                          **space_and_limit(path.parent)) from exc
    finally:
        if tmp.exists():
            tmp.unlink()
