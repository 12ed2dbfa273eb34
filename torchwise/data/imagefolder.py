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

import os
import random
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from torchwise.errors import TorchwiseError

# Compared in lower case: .JPG, .Png, ... count too.
IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".bmp", ".gif", ".webp", ".tif", ".tiff",
                    ".ppm", ".pgm", ".pbm", ".pnm"}
# Never classes nor images (besides every name starting with "."): folders zip tools and Python leave.
IGNORED_FOLDERS = {"__MACOSX", "__pycache__"}
# Transparent pixels are composited over this gray level (white), see to_standard.
ALPHA_BACKGROUND = 255
# open_image records the file's own pixel mode (I;16, P, RGBA, ...) in image.info under this key.
SOURCE_MODE = "torchwise_source_mode"
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
    source_modes: dict[str, int] = field(default_factory=dict)  # the files' own pixel modes -> count

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
            "pixels": describe_modes(self.source_modes),
        }


# ----------------------------------------------------------------------------- decoding


class UnreadableImage(Exception):
    """A file that does not decode into pixels torchwise can trust; the message says why."""


def _fraction_to_uint8(values: Any):
    import numpy as np

    return np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)


def _integer_full_scale(image: Any, values: Any, bits: int | None) -> int:
    """The value that means "white" for an integer image: from its mode or its recorded bit depth.
    PNG and PGM/PPM files with more than 8 bits open as 16-bit values (mode "I;16" or "I")."""
    if image.mode.startswith("I;16"):
        return 65535
    if bits is not None and bits > 16:
        # Scaled by 2^32 - 1 such images (often 16-bit data in a 32-bit container) would all be black.
        raise UnreadableImage(f"{bits}-bit integer pixels (up to {int(values.max(initial=0))}): torchwise reads "
                              "1-, 8- and 16-bit integer and [0, 1] float images; save it with 16 bits per pixel")
    if bits is None and int(values.max(initial=0)) > 65535:
        raise UnreadableImage(f"32-bit integer pixels (up to {int(values.max())}) with no recorded bit depth: "
                              "their scale is unknown; save the image with 8 or 16 bits per pixel")
    return 2 ** (bits or 16) - 1


def _composite(values: Any, alpha: Any):
    """Colour over the white background: transparent pixels become white, as a page shows them."""
    import numpy as np

    a = alpha.astype(np.float32)[..., None] / 255.0 if values.ndim == 3 else alpha.astype(np.float32) / 255.0
    out = values.astype(np.float32) * a + ALPHA_BACKGROUND * (1.0 - a)
    return np.rint(out).clip(0, 255).astype(np.uint8)


def _gray_palette(image: Any) -> bool:
    palette = image.getpalette() or []
    used = {index for _, index in (image.getcolors(256) or [])}
    triples = [palette[3 * i:3 * i + 3] for i in used if 3 * i + 2 < len(palette)]
    return bool(triples) and all(t[0] == t[1] == t[2] for t in triples)


def to_standard(image: Any, *, bits: int | None = None):
    """Any PIL image -> an 8-bit "L" (gray sources) or "RGB" (colour sources) PIL image, scaled by the
    image's real bit depth (never saturated, never clipped to black).

    * "L", "RGB": unchanged. "1": 0 / 255.
    * 16-bit gray ("I;16", "I;16B", "I;16L", and "I" opened from 16-bit PNG/PGM/TIFF): value * 255 / 65535,
      rounded, so 8-bit value v and 16-bit value 257 v decode alike (a mixed folder is on one scale).
      "I" with a recorded bit depth up to 16 (TIFF BitsPerSample, `bits`) uses it; deeper integers and
      negative values are refused (their scale is unknown, and 2^32 - 1 as white would make them black).
    * 32-bit float ("F"): taken as a fraction in [0, 1] (x 255); values outside, NaN or inf are refused
      (their scale is unknown).
    * Transparency ("RGBA", "LA", "PA", "P" with a transparent colour, premultiplied "RGBa"/"La"):
      composited over white (ALPHA_BACKGROUND): the colour under a fully transparent pixel is
      arbitrary (often black or garbage), so dropping alpha would train on invisible pixels.
    * Palette ("P"): its colours; "L" when every palette colour it uses is gray.
    * "CMYK", "YCbCr", "LAB", "HSV", "RGBX", ...: Pillow's conversion to "RGB".

    Raises UnreadableImage (its message says why) for pixels whose scale cannot be known."""
    import numpy as np
    from PIL import Image

    mode = image.mode
    if mode in ("L", "RGB"):
        return image
    if mode == "1":
        return image.convert("L")
    if mode == "F":
        values = np.asarray(image, dtype=np.float32)
        if values.size and not np.isfinite(values).all():
            raise UnreadableImage("32-bit float pixels include NaN or infinity")
        low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        if low < 0.0 or high > 1.0:
            raise UnreadableImage(f"32-bit float pixels span [{low:.4g}, {high:.4g}], not [0, 1]: their scale "
                                  "is unknown; save them as fractions in [0, 1] or as 8- or 16-bit integers")
        return Image.fromarray(_fraction_to_uint8(values))
    if mode.startswith("I"):
        values = np.asarray(image)
        if values.ndim != 2:
            raise UnreadableImage(f"pixel mode {mode} with shape {values.shape} is not supported")
        values = values.astype(np.int64)
        if values.size and int(values.min()) < 0:
            raise UnreadableImage(f"integer pixels below zero (down to {int(values.min())}): their scale is unknown")
        full = _integer_full_scale(image, values, bits)
        if values.size and int(values.max()) > full:
            raise UnreadableImage(f"pixel values up to {int(values.max())} exceed the {full} of the recorded bit depth")
        return Image.fromarray(_fraction_to_uint8(values / full))
    if mode in ("La", "RGBa", "PA"):
        image = image.convert("LA" if mode == "La" else "RGBA")
        mode = image.mode
    if mode == "P":
        if "transparency" in image.info:
            image, mode = image.convert("RGBA"), "RGBA"
        else:
            return image.convert("L" if _gray_palette(image) else "RGB")
    if mode == "LA":
        values = np.asarray(image)
        return Image.fromarray(_composite(values[..., 0], values[..., 1]))
    if mode == "RGBA":
        values = np.asarray(image)
        return Image.fromarray(_composite(values[..., :3], values[..., 3]))
    try:
        return image.convert("RGB")
    except (ValueError, OSError) as exc:
        raise UnreadableImage(f"pixel mode {mode} cannot be converted to RGB ({exc})") from None


MODE_NAMES = {"1": "1-bit", "L": "8-bit gray", "P": "palette", "RGB": "8-bit RGB", "RGBA": "RGB + alpha",
              "LA": "gray + alpha", "PA": "palette + alpha", "I;16": "16-bit gray", "I;16B": "16-bit gray",
              "I;16L": "16-bit gray", "I": "32-bit integer gray", "F": "32-bit float gray", "CMYK": "CMYK",
              "YCbCr": "YCbCr"}


def describe_modes(modes: dict[str, int]) -> str:
    """One line: the files' own pixel formats and how they were brought to 8 bits."""
    if not modes:
        return "none"
    parts = [f"{MODE_NAMES.get(m, m)} ({m}): {n}" for m, n in sorted(modes.items(), key=lambda kv: (-kv[1], kv[0]))]
    notes = []
    if any(m.startswith("I") or m == "F" for m in modes):
        notes.append("16/32-bit scaled to 8 bits by bit depth")
    if any(m in ("RGBA", "LA", "PA", "RGBa", "La") for m in modes):
        notes.append("transparency composited over white")
    return ", ".join(parts) + (f" ({'; '.join(notes)})" if notes else "")


def to_mode(image: Any, mode: str):
    """Any PIL image -> `mode` ("L" or "RGB", what the model takes), through to_standard: gray sources
    become RGB by repeating the channel, colour sources become L by their luminance."""
    image = to_standard(image)
    return image if image.mode == mode else image.convert(mode)


def _recorded_bits(image: Any) -> int | None:
    tags = getattr(image, "tag_v2", None)           # TIFF: BitsPerSample
    try:
        value = tags.get(258) if tags is not None else None
    except Exception:
        return None
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) and 0 < value <= 32 else None


def open_image(path: str | Path):
    """The one way torchwise reads an image file: decode every byte, apply the EXIF orientation (phone
    photos are stored sideways with a "rotate" tag), then to_standard (8-bit "L" or "RGB" by the real
    bit depth). The first frame of an animated or multi-page file. Raises UnreadableImage."""
    from PIL import Image, ImageOps

    try:
        with Image.open(path) as opened:
            opened.load()  # decodes every byte: catches truncated files that Image.verify() lets through
            bits = _recorded_bits(opened)
            image = ImageOps.exif_transpose(opened)
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError, ...
        raise UnreadableImage(f"{type(exc).__name__}: {exc}".splitlines()[0][:200]) from None
    source = image.mode
    image = to_standard(image, bits=bits)
    image.info[SOURCE_MODE] = source
    return image


def decode_image(path: str) -> tuple[Any, str | None]:
    """(image, None) when the file decodes completely (an 8-bit "L" or "RGB" PIL image, see open_image),
    else (None, reason)."""
    try:
        return open_image(path), None
    except UnreadableImage as exc:
        return None, str(exc)


def read_image(path: str | Path, mode: str):
    """open_image, then to_mode(mode): what training, validation and prediction feed the transforms."""
    return to_mode(open_image(path), mode)


# ----------------------------------------------------------------------------- finding the files


def ignored_name(name: str) -> bool:
    """Hidden files and folders (.ipynb_checkpoints, .DS_Store, ._* AppleDouble files, .git) and the
    folders archivers and tools leave behind (__MACOSX, __pycache__): never a class, never an image."""
    return name.startswith(".") or name in IGNORED_FOLDERS


def _is_loop(target: str, container: Path) -> bool:
    """A folder whose real path is `container` itself or a folder above it: scanning it would loop."""
    real = Path(os.path.realpath(container))
    return real == Path(target) or real.is_relative_to(target)


def _class_dirs(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.iterdir()) if not ignored_name(p.name) and p.is_dir()]


def walk_images(folder: Path, notes: list[tuple[str, str]] | None = None,
                others: list[Path] | None = None) -> list[Path]:
    """The image files under `folder` (sub-folders too), sorted, without following a link into a loop.

    Links are followed (a class folder or image linked from elsewhere is a common way to build a data
    set), but a link to a folder already being scanned, or to one above it, is not: it is listed in
    `notes` as (path, why). Broken links with an image extension are listed there too. Hidden and tool
    folders/files (ignored_name) are skipped. Files that are not images go to `others` (for messages)."""
    notes = notes if notes is not None else []
    found: list[Path] = []
    visited = {os.path.realpath(folder)}
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as exc:
            notes.append((str(current), f"folder not readable ({type(exc).__name__}: {exc.strerror or exc})"))
            continue
        for entry in entries:
            if ignored_name(entry.name):
                continue
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()           # follows links
            except OSError:
                is_dir = False
            if is_dir:
                real = os.path.realpath(entry.path)
                if real in visited or _is_loop(real, current):
                    notes.append((str(path), f"a link to {real}, a folder already scanned (a loop): not followed"))
                    continue
                visited.add(real)
                stack.append(path)
            elif path.suffix.lower() in IMAGE_EXTENSIONS:
                if entry.is_symlink() and not os.path.exists(entry.path):
                    notes.append((str(path), f"a broken link (to {os.readlink(entry.path)})"))
                elif entry.is_file():
                    found.append(path)
            elif others is not None:
                others.append(path)
    return sorted(found)


def image_files(folder: Path) -> list[Path]:
    """The image files under `folder` (see walk_images)."""
    return walk_images(Path(folder))


def find_subfolder(root: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        if (root / name).is_dir():
            return root / name
    return None


def list_class_dirs(folder: Path, what: str) -> list[Path]:
    """The class folders of `folder`, in name order; refuses links that loop back (to `folder` or above
    it), links to a folder another class already is, and broken links (a class that silently is not
    there)."""
    folder = Path(folder)
    broken = [p for p in sorted(folder.iterdir()) if not ignored_name(p.name) and p.is_symlink()
              and not p.exists() and p.suffix.lower() not in IMAGE_EXTENSIONS]
    if broken:
        raise TorchwiseError(
            f"A class folder in the {what} is a broken link: that class would be missing.",
            values={"links": {str(p): os.readlink(p) for p in broken[:5]}, "broken links": len(broken)},
            fix="restore (or mount) what the link points to, or remove the link")
    classes = _class_dirs(folder)
    loops = {str(p): os.path.realpath(p) for p in classes if _is_loop(os.path.realpath(p), folder)}
    if loops:
        raise TorchwiseError(
            f"A class folder in the {what} is a link back to it (or to a folder above it): as a class it "
            "would hold every image again, in training and validation.",
            values={"links": loops, "folder": str(folder)},
            fix="remove the link (it is not a class), or move it out of the data folder")
    by_real: dict[str, list[str]] = {}
    for p in classes:
        by_real.setdefault(os.path.realpath(p), []).append(p.name)
    same = {real: names for real, names in by_real.items() if len(names) > 1}
    if same:
        raise TorchwiseError(
            f"Several class folders in the {what} are the same folder (links to it): each image would be "
            "in several classes.",
            values={"same folder": {real: names for real, names in list(same.items())[:5]}, "folder": str(folder)},
            fix="keep one folder (or link) per class and remove the others")
    if not classes:
        loose = [p for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_EXTENSIONS][:3]
        raise TorchwiseError(
            f"No class folders in the {what}.",
            values={"folder": str(folder), "images found directly in it": [p.name for p in loose] or "none"},
            fix="put each class's images in its own subfolder, e.g. DATA/cat/*.png and DATA/dog/*.png "
                "(or DATA/train/<class>/ and DATA/val/<class>/)")
    return classes


def _class_name(path: Path) -> str:
    # macOS writes names decomposed (NFD), most other systems composed (NFC): "café" from a train/ folder
    # made on one and a val/ folder made on the other is one class.
    return unicodedata.normalize("NFC", path.name)


def _same_files(files: Sequence[tuple[str, int, str]], class_names: Sequence[str], skipped: list[tuple[str, str]]
                ) -> list[tuple[str, int, str]]:
    """Each real file once (links and hard links resolved by device + inode). A second path to a file of
    the same class and part is dropped and listed in `skipped`; the same file in two classes, or in
    train/ and val/, is refused with the paths."""
    first: dict[tuple[int, int], tuple[str, int, str]] = {}
    kept: list[tuple[str, int, str]] = []
    two_classes: list[list[str]] = []
    train_and_val: list[list[str]] = []
    for item in files:
        path, label, part = item
        try:
            st = os.stat(path)
        except OSError:
            kept.append(item)               # it vanished: decoding reports it
            continue
        key = (st.st_dev, st.st_ino)
        if key not in first:
            first[key] = item
            kept.append(item)
            continue
        other_path, other_label, other_part = first[key]
        if other_label != label:
            two_classes.append([f"{other_path} ({class_names[other_label]})", f"{path} ({class_names[label]})"])
        elif other_part != part:
            train_and_val.append([other_path, path])
        else:
            skipped.append((path, f"the same file as {other_path} (a link): counted once"))
    if two_classes:
        raise TorchwiseError(
            "The same image file is in two classes (through a link or hard link).",
            values={"files": two_classes[:5], "files in two classes": len(two_classes)},
            fix="give each image one class: remove the link (or the copy) from the class it does not belong to")
    if train_and_val:
        raise TorchwiseError(
            "The same image file is in both the training and the validation folder (through a link or "
            "hard link): validation would measure images the model trained on.",
            values={"files": train_and_val[:5], "files in both": len(train_and_val)},
            fix="remove each such file (or link) from train/ or from val/")
    return kept


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
    skipped: list[tuple[str, str]] = []          # (path, why): unreadable files, loops, broken links, repeats
    others: dict[int, list[Path]] = {}           # label -> files that are not images (for messages)

    def images_of(class_dir: Path, label: int, part: str) -> list[tuple[str, int, str]]:
        return [(str(f), label, part) for f in walk_images(class_dir, skipped, others.setdefault(label, []))]

    if train_dir is not None and val_dir is not None:
        layout = "train/val folders"
        class_paths = list_class_dirs(train_dir, "training folder")
        val_class_paths = list_class_dirs(val_dir, "validation folder")
        class_names = [_class_name(p) for p in class_paths]
        extra = sorted({_class_name(p) for p in val_class_paths} - set(class_names))
        if extra:
            raise TorchwiseError("The validation folder has classes the training folder does not.",
                                 values={"only in val": extra, "train classes": class_names},
                                 fix="add training images for these classes or remove them from val/")
        files = [item for i, p in enumerate(class_paths) for item in images_of(p, i, "train")]
        files += [item for p in val_class_paths for item in images_of(p, class_names.index(_class_name(p)), "val")]
    else:
        layout = "split by val_fraction"
        class_paths = list_class_dirs(train_dir or root, "data folder")
        class_names = [_class_name(p) for p in class_paths]
        files = [item for i, p in enumerate(class_paths) for item in images_of(p, i, "all")]
    twice = sorted({name for name in class_names if class_names.count(name) > 1})
    if twice:
        raise TorchwiseError("Two class folders have the same name (written with different Unicode forms).",
                             values={"classes": twice, "folders": [str(p) for p in class_paths
                                                                   if _class_name(p) in twice]},
                             fix="rename or merge the folders so each class has one folder")
    if len(class_names) < 2:
        raise TorchwiseError("Classification needs at least two classes; found one.",
                             values={"folder": str(root), "classes": class_names},
                             fix="add a folder per class (each with its images) next to the one there")
    files = _same_files(files, class_names, skipped)

    decoded: dict[str, Any] = {}
    modes: Counter[str] = Counter()
    source_modes: Counter[str] = Counter()
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
            source_modes[image.info.get(SOURCE_MODE, image.mode)] += 1
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
        kinds = sorted({p.suffix.lower() or p.name for i, name in enumerate(class_names) if name in empty
                        for p in others.get(i, [])})
        raise TorchwiseError("Some classes have no readable training images.",
                             values={"classes": empty, "skipped files": len(skipped),
                                     "other files in them": kinds[:10] or "none",
                                     "image types read": " ".join(sorted(IMAGE_EXTENSIONS))},
                             fix="add images to these class folders, or remove the folders "
                                 "(other formats: convert them to PNG or JPEG)")
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
        source_modes=dict(source_modes),
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
