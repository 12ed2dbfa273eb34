"""Image classification from a folder of class folders.

Two layouts are accepted:

    root/train/<class>/*.png  and  root/val/<class>/*.png     (the user's own split)
    root/<class>/*.png                                          (split here: seeded, stratified)

Every image is decoded once up front. That is the only way to find truncated or corrupt files
before training starts: a file that fails here is skipped, counted and listed in the report,
instead of crashing the DataLoader in the middle of epoch 7. The decoded images of small data
sets are kept (up to CACHE_BYTES), so that the image cache (torchwise.data.image_cache, built
from them once the input size is known) does not decode them a second time.

Finding the files is torchwise.data.class_folders, decoding one file torchwise.data.image_decode;
their names used by other modules stay importable from here.
"""
from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from torchwise.data.class_folders import (IMAGE_EXTENSIONS, TRAIN_DIRS, VAL_DIRS, class_name_of, find_subfolder,
                                          image_files, list_class_dirs, unique_files, walk_images)
from torchwise.data.image_decode import (GRAY_MODES, SOURCE_MODE, UnreadableImage, decode_image, describe_modes,
                                         has_gray_pixels, open_image, read_image, to_mode, to_standard)
from torchwise.errors import TorchwiseError

# What this module offers, with the names of the two modules it was split into that other modules
# (predict.py, the tests) still import from here.
__all__ = ["CACHE_BYTES", "IMAGE_EXTENSIONS", "ImageDataset", "ImageFolderData", "Sample", "UnreadableImage",
           "VAL_DIRS", "decode_image", "find_subfolder", "image_files", "list_class_dirs", "open_image",
           "read_image", "scan_image_folder", "stratified_split", "to_mode", "to_standard", "walk_images"]

# The scan keeps decoded images up to this many bytes (of the raw pixels), for the image cache.
CACHE_BYTES = 512 * 1024 * 1024

Sample = tuple[str, int]
File = tuple[str, int, str]     # (path, label, part): part is "train", "val" or "all" (to be split)


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
    source_modes: dict[str, int] = field(default_factory=dict)  # the files' own pixel modes -> count
    # every readable image shows only grays, whatever its file stored (RGB JPEGs of scans, RGBA digits)
    gray_pixels: bool = False

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
            "gray_pixels": self.gray_pixels,
            "median_side": self.median_side,
            "pixels": describe_modes(self.source_modes),
        }



# ----------------------------------------------------------------------------- scanning


def _check_root(root: Path) -> None:
    if not root.exists():
        raise TorchwiseError("The data folder does not exist.", values={"path": str(root)},
                             fix="pass --data PATH with an existing folder (or a .csv file with --target)")
    if not root.is_dir():
        raise TorchwiseError("The data path is a file, not an image folder.", values={"path": str(root)},
                             fix="pass a folder of class folders, or a .csv file with --target COLUMN")


@dataclass
class _Found:
    """The files of the data folder, before decoding."""
    layout: str
    class_paths: list[Path]
    class_names: list[str]
    files: list[File]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): loops, broken links, repeats
    others: dict[int, list[Path]] = field(default_factory=dict)   # label -> files that are not images


def _find_files(root: Path) -> _Found:
    """The layout, the classes and every image file of each (train/ and val/ folders, or one to split)."""
    train_dir, val_dir = find_subfolder(root, TRAIN_DIRS), find_subfolder(root, VAL_DIRS)
    skipped: list[tuple[str, str]] = []
    others: dict[int, list[Path]] = {}

    def images_of(class_dir: Path, label: int, part: str) -> list[File]:
        return [(str(f), label, part) for f in walk_images(class_dir, skipped, others.setdefault(label, []))]

    if train_dir is not None and val_dir is not None:
        class_paths = list_class_dirs(train_dir, "training folder")
        val_class_paths = list_class_dirs(val_dir, "validation folder")
        class_names = [class_name_of(p) for p in class_paths]
        extra = sorted({class_name_of(p) for p in val_class_paths} - set(class_names))
        if extra:
            raise TorchwiseError("The validation folder has classes the training folder does not.",
                                 values={"only in val": extra, "train classes": class_names},
                                 fix="add training images for these classes or remove them from val/")
        files = [item for i, p in enumerate(class_paths) for item in images_of(p, i, "train")]
        files += [item for p in val_class_paths for item in images_of(p, class_names.index(class_name_of(p)), "val")]
        return _Found("train/val folders", class_paths, class_names, files, skipped, others)
    class_paths = list_class_dirs(train_dir or root, "data folder")
    class_names = [class_name_of(p) for p in class_paths]
    files = [item for i, p in enumerate(class_paths) for item in images_of(p, i, "all")]
    return _Found("split by val_fraction", class_paths, class_names, files, skipped, others)


def _check_classes(root: Path, found: _Found) -> None:
    names = found.class_names
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TorchwiseError("Two class folders have the same name (written with different Unicode forms).",
                             values={"classes": twice, "folders": [str(p) for p in found.class_paths
                                                                   if class_name_of(p) in twice]},
                             fix="rename or merge the folders so each class has one folder")
    if len(names) < 2:
        raise TorchwiseError("Classification needs at least two classes; found one.",
                             values={"folder": str(root), "classes": names},
                             fix="add a folder per class (each with its images) next to the one there")


@dataclass
class _Decoded:
    """What decoding every file found: the readable ones (kept decoded up to CACHE_BYTES), their modes
    and sizes."""
    images: dict[str, Any] = field(default_factory=dict)   # path -> PIL image, or None when not kept
    modes: Counter[str] = field(default_factory=Counter)
    source_modes: Counter[str] = field(default_factory=Counter)
    sides: list[int] = field(default_factory=list)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    colour_images: int = 0                       # images with coloured pixels (has_gray_pixels False)


def _decode_and_look(path: str) -> tuple[Any, str | None, bool]:
    """decode_image, and whether the image shows only grays (looked at in the pool's thread too)."""
    image, reason = decode_image(path)
    return image, reason, image is not None and has_gray_pixels(image)


def _decode_all(files: Sequence[File], skipped: list[tuple[str, str]], *, threads: int, progress: bool,
                keep_decoded: bool) -> _Decoded:
    """Decode each file once (in threads: PIL decodes outside the GIL); unreadable ones go to `skipped`."""
    from tqdm.auto import tqdm

    out = _Decoded()
    cached_bytes = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = pool.map(_decode_and_look, [f for f, _, _ in files])
        for (path, _, _), (image, reason, gray) in tqdm(zip(files, results), total=len(files), unit="img",
                                                  desc="scanning images", disable=not progress, leave=False):
            if image is None:
                skipped.append((path, reason or "unreadable"))
                continue
            out.modes[image.mode] += 1
            out.colour_images += not gray
            out.source_modes[image.info.get(SOURCE_MODE, image.mode)] += 1
            out.sides.append(min(image.size))
            out.sizes[path] = image.size
            size = image.size[0] * image.size[1] * len(image.getbands())
            if keep_decoded and cached_bytes + size <= CACHE_BYTES:
                out.images[path] = image
                cached_bytes += size
            else:
                out.images[path] = None
    return out


def _check_training_images(good: Sequence[File], found: _Found) -> None:
    """Refuse a class left with no readable training image, saying what else its folder holds."""
    counts = Counter(label for _, label, part in good if part != "val")
    empty = [name for i, name in enumerate(found.class_names) if counts.get(i, 0) == 0]
    if empty:
        kinds = sorted({p.suffix.lower() or p.name for i, name in enumerate(found.class_names) if name in empty
                        for p in found.others.get(i, [])})
        raise TorchwiseError("Some classes have no readable training images.",
                             values={"classes": empty, "skipped files": len(found.skipped),
                                     "other files in them": kinds[:10] or "none",
                                     "image types read": " ".join(sorted(IMAGE_EXTENSIONS))},
                             fix="add images to these class folders, or remove the folders "
                                 "(other formats: convert them to PNG or JPEG)")


def _train_val(layout: str, good: Sequence[File], val_fraction: float, seed: int
               ) -> tuple[list[Sample], list[Sample]]:
    """The user's own split, or a seeded stratified one; refuses an empty validation split."""
    if layout == "train/val folders":
        train = [(f, label) for f, label, part in good if part == "train"]
        val = [(f, label) for f, label, part in good if part == "val"]
    else:
        train, val = stratified_split([(f, label) for f, label, _ in good], val_fraction, seed)
    if not val:
        raise TorchwiseError("The validation split is empty.",
                             values={"images": len(good), "val_fraction": val_fraction},
                             fix="add images (at least two per class), raise --val-fraction, or give a val/ folder")
    return train, val


def scan_image_folder(root: str | Path, *, val_fraction: float = 0.2, seed: int = 0,
                      progress: bool = False, threads: int = 4, keep_decoded: bool = True) -> ImageFolderData:
    """Find the classes and images under `root`, decode each image once, and split train/val.

    keep_decoded: keep the decoded images (up to CACHE_BYTES) in `.cache` for the image cache."""
    root = Path(root)
    _check_root(root)
    found = _find_files(root)
    _check_classes(root, found)
    files = unique_files(found.files, found.class_names, found.skipped)
    decoded = _decode_all(files, found.skipped, threads=threads, progress=progress, keep_decoded=keep_decoded)
    good = [(f, label, part) for f, label, part in files if f in decoded.images]
    _check_training_images(good, found)
    train, val = _train_val(found.layout, good, val_fraction, seed)
    sides = sorted(decoded.sides)
    return ImageFolderData(
        root=str(root), layout=found.layout, class_names=found.class_names, train=train, val=val,
        skipped=found.skipped, grayscale=bool(decoded.modes) and all(m in GRAY_MODES for m in decoded.modes),
        median_side=sides[len(sides) // 2] if sides else 0,
        cache={k: v for k, v in decoded.images.items() if v is not None},
        sizes={f: decoded.sizes[f] for f, _, _ in good},
        source_modes=dict(decoded.source_modes), gray_pixels=bool(decoded.modes) and not decoded.colour_images,
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
        """The image as a PIL image in `mode` (from a PIL cache, else decoded from its file), always
        through to_standard: the scan's decoding, so the cached and the per-file path agree."""
        path = self.samples[index][0]
        image = self.cache.get(path) if isinstance(self.cache, dict) else None
        if image is None:
            try:
                image = read_image(path, self.mode)
            except UnreadableImage as exc:
                # It decoded during the scan, so it changed since: say so instead of a worker traceback.
                raise TorchwiseError("An image became unreadable after the data was scanned.",
                                     values={"path": path, "error": str(exc)},
                                     fix="do not modify the data folder while training; rerun to rescan") from None
        elif image.mode != self.mode:
            image = to_mode(image, self.mode)
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
