"""Image classification from a folder of class folders.

Two layouts are accepted:

    root/train/<class>/*.png  and  root/val/<class>/*.png     (the user's own split)
    root/<class>/*.png                                          (split here: seeded, stratified)

Every image is decoded once up front. That is the only way to find truncated or corrupt files
before training starts: a file that fails here is skipped, counted and listed in the report,
instead of crashing the DataLoader in the middle of epoch 7. The decoded images of small data
sets are kept (up to CACHE_BYTES), so that the image cache (torchwise.data.image_cache, built
from them once the input size is known) does not decode them a second time.
"""
from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from torchwise.errors import TorchwiseError

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
TRAIN_DIRS = ("train", "training")
VAL_DIRS = ("val", "valid", "validation")
GRAY_MODES = {"1", "L", "LA", "I", "I;16", "F"}
# The scan keeps decoded images up to this many bytes (of the raw pixels), for the image cache.
CACHE_BYTES = 512 * 1024 * 1024

Sample = tuple[str, int]


@dataclass
class ImageFolderData:
    """The result of scanning: which files train, which validate, which were skipped and why."""
    root: str
    layout: str                                  # "train/val folders" or "split by val_fraction"
    class_names: list[str]
    train: list[Sample]
    val: list[Sample]
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (path, reason)
    grayscale: bool = False
    median_side: int = 0
    cache: dict[str, Any] = field(default_factory=dict, repr=False)  # path -> decoded PIL image
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)  # path -> (width, height)

    def class_counts(self, samples: Sequence[Sample]) -> dict[str, int]:
        counts = Counter(label for _, label in samples)
        return {name: counts.get(i, 0) for i, name in enumerate(self.class_names)}

    def summary(self) -> dict[str, Any]:
        return {
            "kind": "image folder",
            "root": self.root,
            "layout": self.layout,
            "classes": self.class_names,
            "train_counts": self.class_counts(self.train),
            "val_counts": self.class_counts(self.val),
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
            "grayscale": self.grayscale,
            "median_side": self.median_side,
        }


def _class_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file() and not p.name.startswith("."))


def find_subfolder(root: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        if (root / name).is_dir():
            return root / name
    return None


def decode_image(path: str) -> tuple[Any, str | None]:
    """(image, None) when the file decodes completely, else (None, reason)."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as image:
            image.load()  # decodes every byte: catches truncated files that Image.verify() lets through
            # Phone photos are often stored sideways with an EXIF orientation tag; apply it, or the
            # model trains on rotated images that every viewer shows upright.
            return ImageOps.exif_transpose(image), None
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError, ...
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def list_class_dirs(folder: Path, what: str) -> list[Path]:
    classes = _class_dirs(folder)
    if not classes:
        loose = image_files(folder)[:3]
        raise TorchwiseError(
            f"No class folders in the {what}.",
            values={"folder": str(folder), "images found directly in it": [p.name for p in loose] or "none"},
            fix="put each class's images in its own subfolder, e.g. DATA/cat/*.png and DATA/dog/*.png "
                "(or DATA/train/<class>/ and DATA/val/<class>/)")
    return classes


def scan_image_folder(root: str | Path, *, val_fraction: float = 0.2, seed: int = 0,
                      progress: bool = False, threads: int = 4, keep_decoded: bool = True) -> ImageFolderData:
    """Find the classes and images under `root`, decode each image once, and split train/val.

    keep_decoded: keep the decoded images (up to CACHE_BYTES) in `.cache` for the image cache."""
    from tqdm.auto import tqdm

    root = Path(root)
    if not root.exists():
        raise TorchwiseError("The data folder does not exist.", values={"path": str(root)},
                             fix="pass --data PATH with an existing folder (or a .csv file with --target)")
    if not root.is_dir():
        raise TorchwiseError("The data path is a file, not an image folder.", values={"path": str(root)},
                             fix="pass a folder of class folders, or a .csv file with --target COLUMN")
    train_dir, val_dir = find_subfolder(root, TRAIN_DIRS), find_subfolder(root, VAL_DIRS)
    if train_dir is not None and val_dir is not None:
        layout = "train/val folders"
        class_paths = list_class_dirs(train_dir, "training folder")
        val_class_paths = list_class_dirs(val_dir, "validation folder")
        class_names = [p.name for p in class_paths]
        extra = sorted({p.name for p in val_class_paths} - set(class_names))
        if extra:
            raise TorchwiseError("The validation folder has classes the training folder does not.",
                                 values={"only in val": extra, "train classes": class_names},
                                 fix="add training images for these classes or remove them from val/")
        files = [(str(f), i, "train") for i, p in enumerate(class_paths) for f in image_files(p)]
        files += [(str(f), class_names.index(p.name), "val") for p in val_class_paths for f in image_files(p)]
    else:
        layout = "split by val_fraction"
        class_paths = list_class_dirs(train_dir or root, "data folder")
        class_names = [p.name for p in class_paths]
        files = [(str(f), i, "all") for i, p in enumerate(class_paths) for f in image_files(p)]
    if len(class_names) < 2:
        raise TorchwiseError("Classification needs at least two classes; found one.",
                             values={"folder": str(root), "classes": class_names},
                             fix="add a folder per class (each with its images) next to the one there")

    decoded: dict[str, Any] = {}
    skipped: list[tuple[str, str]] = []
    modes: Counter[str] = Counter()
    sides: list[int] = []
    sizes: dict[str, tuple[int, int]] = {}
    cached_bytes = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:  # PIL decodes outside the GIL
        results = pool.map(decode_image, [f for f, _, _ in files])
        for (path, _, _), (image, reason) in tqdm(zip(files, results), total=len(files), unit="img",
                                                  desc="scanning images", disable=not progress, leave=False):
            if image is None:
                skipped.append((path, reason or "unreadable"))
                continue
            modes[image.mode] += 1
            sides.append(min(image.size))
            sizes[path] = image.size
            size = image.size[0] * image.size[1] * len(image.getbands())
            if keep_decoded and cached_bytes + size <= CACHE_BYTES:
                decoded[path] = image
                cached_bytes += size
            else:
                decoded[path] = None
    good = [(f, label, part) for f, label, part in files if f in decoded]

    counts = Counter(label for _, label, part in good if part != "val")
    empty = [name for i, name in enumerate(class_names) if counts.get(i, 0) == 0]
    if empty:
        raise TorchwiseError("Some classes have no readable training images.",
                             values={"classes": empty, "skipped files": len(skipped)},
                             fix="add images to these class folders, or remove the folders")
    if layout == "train/val folders":
        train = [(f, label) for f, label, part in good if part == "train"]
        val = [(f, label) for f, label, part in good if part == "val"]
    else:
        train, val = stratified_split([(f, label) for f, label, _ in good], val_fraction, seed)
    if not val:
        raise TorchwiseError("The validation split is empty.",
                             values={"images": len(good), "val_fraction": val_fraction},
                             fix="add images (at least two per class), raise --val-fraction, or give a val/ folder")
    sides.sort()
    return ImageFolderData(
        root=str(root), layout=layout, class_names=class_names, train=train, val=val, skipped=skipped,
        grayscale=bool(modes) and all(m in GRAY_MODES for m in modes),
        median_side=sides[len(sides) // 2] if sides else 0,
        cache={k: v for k, v in decoded.items() if v is not None},
        sizes={f: sizes[f] for f, _, _ in good},
    )


def stratified_split(samples: Sequence[Sample], val_fraction: float, seed: int
                     ) -> tuple[list[Sample], list[Sample]]:
    """Hold out round(n * val_fraction) of each class (at least one when a class has two or more)."""
    rng = random.Random(seed)
    by_class: dict[int, list[Sample]] = {}
    for sample in samples:
        by_class.setdefault(sample[1], []).append(sample)
    train: list[Sample] = []
    val: list[Sample] = []
    for label in sorted(by_class):
        items = sorted(by_class[label])
        rng.shuffle(items)
        n_val = min(len(items) - 1, max(1, round(len(items) * val_fraction))) if len(items) > 1 else 0
        val.extend(items[:n_val])
        train.extend(items[n_val:])
    return sorted(train), sorted(val)


class ImageDataset:
    """(transformed image, label) for each (path, label); a torch Dataset by duck typing
    (torch is not imported at module level).

    `cache`: None (decode the file on every access), a dict path -> PIL image, or an
    image_cache.ImageCache (uint8 C x H x W tensors, already in `mode` and shrunk); the transform
    gets a PIL image or such a tensor (torchvision's v2 transforms take both)."""

    def __init__(self, samples: Sequence[Sample], transform: Callable[[Any], Any], *, mode: str,
                 cache: Any = None):
        self.samples = list(samples)
        self.transform = transform
        self.mode = mode
        self.cache = cache if cache is not None else {}

    def __len__(self) -> int:
        return len(self.samples)

    def load_image(self, index: int):
        """The image as a PIL image in `mode` (from a PIL cache, else decoded from its file)."""
        from PIL import Image, ImageOps

        path = self.samples[index][0]
        image = self.cache.get(path) if isinstance(self.cache, dict) else None
        if image is None:
            try:
                with Image.open(path) as opened:
                    image = ImageOps.exif_transpose(opened).convert(self.mode)
            except Exception as exc:
                # It decoded during the scan, so it changed since: say so instead of a worker traceback.
                raise TorchwiseError("An image became unreadable after the data was scanned.",
                                     values={"path": path, "error": str(exc)},
                                     fix="do not modify the data folder while training; rerun to rescan") from None
        elif image.mode != self.mode:
            image = image.convert(self.mode)
        return image

    def load_pixels(self, index: int):
        """What the transform gets: the cached tensor when there is one, else the PIL image."""
        if not isinstance(self.cache, dict):
            pixels = self.cache.get(self.samples[index][0])
            if pixels is not None:
                return pixels
        return self.load_image(index)

    def __getitem__(self, index: int):
        return self.transform(self.load_pixels(index)), self.samples[index][1]


def convert_cache(cache: dict[str, Any], mode: str) -> dict[str, Any]:
    """Convert cached images once to the mode the model takes (instead of on every access)."""
    return {path: (image if image.mode == mode else image.convert(mode)) for path, image in cache.items()}
