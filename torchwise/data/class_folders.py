"""Finding an image folder's classes and files: class folders, the image files under each, links.

Links are followed (a class folder or image linked from elsewhere is a common way to build a data
set) but never into a loop, and a file reached twice is counted once or refused when the two paths
would give it two classes (or put it in training and validation). Hidden folders and those tools
leave behind are never classes nor images.
"""
from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Sequence

from torchwise.errors import TorchwiseError
from torchwise.file_names import shown

# Compared in lower case: .JPG, .Png, ... count too.
IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".bmp", ".gif", ".webp", ".tif", ".tiff",
                    ".ppm", ".pgm", ".pbm", ".pnm"}
# Never classes nor images (besides every name starting with "."): folders zip tools and Python leave.
IGNORED_FOLDERS = {"__MACOSX", "__pycache__"}
TRAIN_DIRS = ("train", "training")
VAL_DIRS = ("val", "valid", "validation")


def ignored_name(name: str) -> bool:
    """Hidden files and folders (.ipynb_checkpoints, .DS_Store, ._* AppleDouble files, .git) and the
    folders archivers and tools leave behind (__MACOSX, __pycache__): never a class, never an image."""
    return name.startswith(".") or name in IGNORED_FOLDERS


def _is_loop(target: str, container: Path) -> bool:
    """A folder whose real path is `container` itself or a folder above it: scanning it would loop."""
    real = Path(os.path.realpath(container))
    return real == Path(target) or real.is_relative_to(target)


def is_run_folder(folder: Path) -> bool:
    """A torchwise run folder (config.yaml beside checkpoints/, final/ or metrics.csv): outputs, never a class.
    One left inside a data folder by an older version (or copied there) must not become a class with no images,
    which would make the data set impossible to train on or to resume."""
    try:
        return (folder / "config.yaml").is_file() and any(
            (folder / name).exists() for name in ("checkpoints", "final", "metrics.csv"))
    except OSError:
        return False


def _class_dirs(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.iterdir()) if not ignored_name(p.name) and p.is_dir() and not is_run_folder(p)]


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
                if is_run_folder(path):
                    notes.append((str(path), "a torchwise run folder (outputs, not data): skipped"))
                    continue
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


def class_name_of(path: Path) -> str:
    # macOS writes names decomposed (NFD), most other systems composed (NFC): "café" from a train/ folder
    # made on one and a val/ folder made on the other is one class. A name that is not UTF-8 (a Latin-1
    # "ni\xf1o" from an old archive) is read as Latin-1: class names go into reports, plots and JSON.
    return unicodedata.normalize("NFC", shown(path.name))


def unique_files(files: Sequence[tuple[str, int, str]], class_names: Sequence[str], skipped: list[tuple[str, str]]
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
