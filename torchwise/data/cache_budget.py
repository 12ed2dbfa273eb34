"""How big the image cache would be and where it fits: in memory, on disk, or not at all (data.cache=auto).

The cached copies have their shorter side at the validation resize side (cache_side), so their size
follows from the images' sizes alone, before anything is decoded; the budgets come from the free
memory (and /dev/shm for spawned workers) and the free space of the cache folder.
"""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Iterable

ENV_DIR = "TORCHWISE_CACHE_DIR"
MEMORY_BUDGET = 2 * 1024**3
MEMORY_SHARE = 0.25
DISK_BUDGET = 16 * 1024**3
DISK_SHARE = 0.5


def cache_side(size: int, center_crop: float) -> int:
    """The shorter side of the cached copies: the validation resize side (transforms.eval_resize)."""
    return max(size, int(round(size / center_crop)))


def resized_shape(width: int, height: int, side: int) -> tuple[int, int]:
    """(height, width) of an image after shrinking its shorter side to `side`; smaller ones unchanged.

    The same arithmetic as torchvision's Resize(side) (which the validation transform runs), so the
    validation resize of a cached copy is a no-op."""
    short, long = (width, height) if width <= height else (height, width)
    if short <= side:
        return height, width
    new_long = int(side * long / short)
    return (new_long, side) if width <= height else (side, new_long)


def estimate_bytes(sizes: Iterable[tuple[int, int]], channels: int, side: int) -> int:
    """Bytes of the cache for images of the given (width, height)."""
    total = 0
    for width, height in sizes:
        h, w = resized_shape(width, height, side)
        total += channels * h * w
    return total


def default_root() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchwise" / "images"


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_budget() -> int:
    budget = MEMORY_BUDGET
    free = available_memory()
    if free is not None:
        budget = min(budget, int(free * MEMORY_SHARE))
    # Spawned / forkserver workers receive the buffer through shared memory (/dev/shm), which
    # containers often keep small; fork workers share it copy-on-write and need none.
    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if method != "fork":
        try:
            shm = os.statvfs("/dev/shm")
            budget = min(budget, int(shm.f_bavail * shm.f_frsize * 0.5))
        except OSError:
            pass
    return budget


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_budget(root: Path) -> int:
    try:
        st = os.statvfs(_existing_parent(root))
        return min(DISK_BUDGET, int(st.f_bavail * st.f_frsize * DISK_SHARE))
    except OSError:
        return 0


def _writable(root: Path) -> bool:
    parent = _existing_parent(root)
    return os.access(parent, os.W_OK | os.X_OK)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def choose_mode(requested: str, nbytes: int, root: Path) -> tuple[str, str]:
    """(mode, why) for data.cache=`requested` and a cache of `nbytes`."""
    if requested != "auto":
        return requested, f"data.cache={requested}"
    budget = memory_budget()
    if nbytes <= budget:
        return "memory", f"auto: {human_bytes(nbytes)} fit the memory budget of {human_bytes(budget)}"
    space = disk_budget(root)
    if nbytes <= space and _writable(root):
        return "disk", (f"auto: {human_bytes(nbytes)} exceed the memory budget of {human_bytes(budget)} "
                        f"and fit the disk budget of {human_bytes(space)}")
    why = "is not writable" if not _writable(root) else f"has a budget of {human_bytes(space)}"
    return "off", (f"auto: {human_bytes(nbytes)} exceed the memory budget of {human_bytes(budget)}, and the "
                   f"cache folder {root} {why}; set data.cache_dir to a larger folder to cache on disk")
