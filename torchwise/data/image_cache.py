"""Decoded, shrunk images kept in memory or on disk, so that training does not decode files every epoch.

Each image is decoded once, converted to the model's mode (RGB or L), and resized once so that
its shorter side is the validation resize side, `max(size, round(size / center_crop))` (256 for a
224 input): the smallest copy from which the validation transform still gets every pixel it
uses. Images already that small or smaller are kept as they are (never enlarged). The pixels
are uint8 C x H x W, all images in one flat buffer (one allocation, one shared-memory segment
for spawned workers instead of one per image), with an index `path -> (offset, shape)`.

What is promised, and tested:

* validation (resize + center crop) and the normalization statistics are bit-for-bit the same
  with and without the cache: the cached copy is made by the very resize the validation
  transform runs, which then finds the image already at its size and leaves it alone;
* training crops (random resized crop, flip) have the same size and the same distribution of
  crop boxes (relative to the image); a crop is cut from the shrunk copy instead of the full
  image, so crops smaller than the input size are enlarged from fewer pixels (slightly softer).
  Images at or below the cache side are stored unchanged, so their training crops are identical.

Modes (`data.cache`):

    memory  one torch uint8 buffer in RAM; fork workers share it copy-on-write, spawned workers
            receive it through shared memory.
    disk    CACHE_DIR/<key>/pixels.npy (flat uint8) + index.json. Every process, the main one and
            each DataLoader worker (fork or spawn), maps the file itself (np.load(mmap_mode="r")),
            so nothing depends on memory inherited through fork. The key hashes the file list with
            sizes and modification times (ns), the cache side, the mode and the format version, so
            any change makes a new cache. It is written into a temporary folder and renamed into
            place only when complete; a damaged cache (bad index, short file, checksum mismatch)
            is reported and rebuilt. CACHE_DIR: data.cache_dir, else $TORCHWISE_CACHE_DIR, else
            $XDG_CACHE_HOME/torchwise/images (~/.cache/torchwise/images); shared by runs, so a
            second run or a tune trial on the same data reuses it. Opening checks a CRC-32 of the
            whole file (about 0.3 s per 400 MiB). Old caches are not deleted automatically.
    off     decode every file on every access.
    auto    memory when the cache takes at most MEMORY_BUDGET (2 GiB) and a quarter of the
            available RAM; else disk when it takes at most DISK_BUDGET (16 GiB) and half the free
            space of the cache folder (and the folder is writable); else off (torchwise.data.cache_budget).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from torchwise.data.cache_budget import ENV_DIR, default_root, human_bytes, resized_shape
from torchwise.errors import TorchwiseError
from torchwise.file_names import name_bytes

# 2: pixels decoded by image_decode.to_standard (16-bit, float, alpha by their real scale); caches
# built by version 1 saturated 16-bit images to white, so they are rebuilt, never reused.
FORMAT_VERSION = 2
PIXELS_FILE = "pixels.npy"
INDEX_FILE = "index.json"
# Images decoded and resized per batch of work when building (bounds the memory held in flight).
BUILD_CHUNK = 256


class CacheDamaged(Exception):
    """A disk cache that cannot be trusted; the reason is the message."""


# ----------------------------------------------------------------------------- the cache


class ImageCache:
    """uint8 C x H x W pixels of many images in one flat buffer, looked up by path.

    `get(path)` returns a fresh tensor (a copy: a transform that works in place cannot damage the
    cache) or None for a path not in the cache. Pickling (spawned DataLoader workers) carries the
    memory buffer (torch moves it to shared memory) or, for a disk cache, only the file name: each
    process maps the file itself on first use."""

    def __init__(self, paths: Sequence[str], offsets: Sequence[int], shapes: Sequence[Sequence[int]], *,
                 kind: str, side: int, mode: str, buffer: Any = None, file: str | None = None):
        self.paths = list(paths)
        self.slot = {p: i for i, p in enumerate(self.paths)}
        self.offsets = [int(o) for o in offsets]
        self.shapes = [tuple(int(v) for v in s) for s in shapes]
        self.kind, self.side, self.mode = kind, side, mode
        self.buffer = buffer          # memory: a flat torch uint8 tensor
        self.file = file              # disk: the pixels.npy path
        self.status = ""              # disk: "built", "reused" or "rebuilt (...)"
        self._array = None
        self._pid = -1

    @property
    def nbytes(self) -> int:
        if not self.shapes:
            return 0
        c, h, w = self.shapes[-1]
        return self.offsets[-1] + c * h * w

    def __len__(self) -> int:
        return len(self.paths)

    def __contains__(self, path: str) -> bool:
        return path in self.slot

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_array"], state["_pid"] = None, -1   # a worker maps the file itself
        return state

    def _mapped(self):
        if self._array is None or self._pid != os.getpid():
            import numpy as np

            self._array = np.load(self.file, mmap_mode="r")
            self._pid = os.getpid()
        return self._array

    def get(self, path: str, default: Any = None):
        i = self.slot.get(path)
        if i is None:
            return default
        import torch

        c, h, w = self.shapes[i]
        start, stop = self.offsets[i], self.offsets[i] + c * h * w
        if self.kind == "memory":
            flat = self.buffer[start:stop].clone()
        else:
            import numpy as np

            flat = torch.from_numpy(np.array(self._mapped()[start:stop]))
        return flat.view(c, h, w)

    def describe(self) -> str:
        where = "in memory" if self.kind == "memory" else f"on disk at {Path(self.file).parent}"
        text = (f"{len(self)} images, shorter side at most {self.side} ({self.mode}), "
                f"{human_bytes(self.nbytes)} {where}")
        return text + (f" ({self.status})" if self.status else "")


# ----------------------------------------------------------------------------- building


def _decode(path: str, mode: str, decoded: dict[str, Any] | None):
    """The image in `mode`: the scan's decoded copy, else the file, both through image_decode's decoding
    (to_standard: 16-bit, float, palette, alpha, CMYK, ... by their real bit depth), exactly as the
    per-file path (ImageDataset.load_image) and the scan decode it."""
    from torchwise.data import image_decode

    image = (decoded or {}).get(path)
    if image is None:
        try:
            return image_decode.read_image(path, mode)
        except image_decode.UnreadableImage as exc:
            raise TorchwiseError("An image became unreadable after the data was scanned.",
                                 values={"path": path, "error": str(exc)},
                                 fix="do not modify the data folder while preparing a run; rerun to rescan") from None
    return image_decode.to_mode(image, mode)


def shrink(image, side: int):
    """A PIL image -> uint8 C x H x W tensor with its shorter side at most `side` (the cached copy).

    The image must be 8-bit "L" or "RGB" (imagefolder.to_mode): the cache holds uint8, and any other
    mode would be cast or wrapped silently."""
    import torch
    from torchvision.transforms.v2 import functional as F

    if getattr(image, "mode", None) not in ("L", "RGB"):
        raise ValueError(f"shrink takes an 8-bit L or RGB image (imagefolder.to_mode), not mode {image.mode!r}")
    pixels = F.to_image(image)
    h, w = resized_shape(pixels.shape[-1], pixels.shape[-2], side)
    if (h, w) != tuple(pixels.shape[-2:]):
        pixels = F.resize(pixels, [h, w], antialias=True)
    return pixels.as_subclass(torch.Tensor).contiguous()


def _layout(shapes: Sequence[tuple[int, int, int]]) -> tuple[list[int], int]:
    offsets, total = [], 0
    for c, h, w in shapes:
        offsets.append(total)
        total += c * h * w
    return offsets, total


def _fill(paths: Sequence[str], shapes: Sequence[tuple[int, int, int]], offsets: Sequence[int], write: Callable,
          *, mode: str, side: int, decoded: dict[str, Any] | None, threads: int, progress: bool, desc: str) -> None:
    """Decode + shrink every image (threads: PIL and torch release the GIL) and write(offset, tensor)."""
    from tqdm.auto import tqdm

    def one(i: int):
        pixels = shrink(_decode(paths[i], mode, decoded), side)
        if tuple(pixels.shape) != tuple(shapes[i]):
            raise TorchwiseError("An image changed size after the data was scanned.",
                                 values={"path": paths[i], "expected (C, H, W)": shapes[i],
                                         "got": tuple(pixels.shape)},
                                 fix="do not modify the data folder while preparing a run; rerun to rescan")
        return i, pixels

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool, \
            tqdm(total=len(paths), unit="img", desc=desc, disable=not progress, leave=False) as bar:
        for start in range(0, len(paths), BUILD_CHUNK):
            for i, pixels in pool.map(one, range(start, min(start + BUILD_CHUNK, len(paths)))):
                write(offsets[i], pixels.reshape(-1))
                bar.update(1)


def _shapes(paths: Sequence[str], sizes: dict[str, tuple[int, int]], channels: int, side: int):
    return [(channels, *resized_shape(*sizes[p], side)) for p in paths]


def build_memory(paths: Sequence[str], sizes: dict[str, tuple[int, int]], *, mode: str, side: int,
                 decoded: dict[str, Any] | None = None, threads: int = 4, progress: bool = False) -> ImageCache:
    """The memory cache: `sizes` are the (width, height) the scan found for each path."""
    import torch

    channels = 1 if mode == "L" else 3
    shapes = _shapes(paths, sizes, channels, side)
    offsets, total = _layout(shapes)
    buffer = torch.empty(total, dtype=torch.uint8)

    def write(offset: int, flat):
        buffer[offset:offset + flat.numel()] = flat

    _fill(paths, shapes, offsets, write, mode=mode, side=side, decoded=decoded, threads=threads,
          progress=progress, desc="caching images in memory")
    return ImageCache(paths, offsets, shapes, kind="memory", side=side, mode=mode, buffer=buffer)


def cache_key(paths: Sequence[str], *, mode: str, side: int) -> str:
    """Changes when a file is added, removed, replaced or touched, or the side / mode / format changes."""
    digest = hashlib.sha256(json.dumps({"version": FORMAT_VERSION, "mode": mode, "side": side}).encode())
    for path in sorted(os.path.abspath(p) for p in paths):
        try:
            st = os.stat(path)
            digest.update(name_bytes(path) + f"|{st.st_size}|{st.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(name_bytes(path) + b"|missing\n")
    return digest.hexdigest()[:20]


def _checksum(array) -> int:
    crc = 0
    step = 64 * 1024 * 1024
    for start in range(0, len(array), step):
        crc = zlib.crc32(memoryview(array[start:start + step]), crc)
    return crc


def _open_disk(folder: Path, paths: Sequence[str], key: str, *, mode: str, side: int) -> ImageCache:
    """Open a complete disk cache, or raise CacheDamaged saying what is wrong with it."""
    import numpy as np

    try:
        index = json.loads((folder / INDEX_FILE).read_text())
    except FileNotFoundError:
        raise CacheDamaged(f"{INDEX_FILE} is missing") from None
    except (OSError, ValueError) as exc:
        raise CacheDamaged(f"{INDEX_FILE} is unreadable ({type(exc).__name__})") from None
    try:
        if index.get("version") != FORMAT_VERSION or index.get("key") != key:
            raise CacheDamaged("its index belongs to another version or key")
        if index["paths"] != [os.path.abspath(p) for p in paths]:
            raise CacheDamaged("its file list differs from the data")
        shapes = [tuple(s) for s in index["shapes"]]
        offsets, total = _layout(shapes)
        if total != index["total"] or len(shapes) != len(paths):
            raise CacheDamaged("its index is inconsistent")
        crc = int(index["crc32"])
    except (KeyError, TypeError, ValueError):
        raise CacheDamaged("its index is incomplete") from None
    try:
        array = np.load(folder / PIXELS_FILE, mmap_mode="r")
    except FileNotFoundError:
        raise CacheDamaged(f"{PIXELS_FILE} is missing") from None
    except (OSError, ValueError) as exc:
        raise CacheDamaged(f"{PIXELS_FILE} is unreadable or truncated ({exc})") from None
    if array.dtype != np.uint8 or array.shape != (total,):
        raise CacheDamaged(f"{PIXELS_FILE} holds {array.dtype} {array.shape}, expected uint8 ({total},)")
    if _checksum(array) != crc:
        raise CacheDamaged(f"{PIXELS_FILE} fails its checksum")
    del array
    return ImageCache(paths, offsets, shapes, kind="disk", side=side, mode=mode, file=str(folder / PIXELS_FILE))


def _unwritable(root: Path, exc: OSError) -> TorchwiseError:
    return TorchwiseError("The disk image cache cannot be written: its folder is not writable or full.",
                          values={"folder": str(root), "error": f"{type(exc).__name__}: {exc.strerror or exc}"},
                          fix=f"set data.cache_dir (or ${ENV_DIR}) to a folder you can write with enough free "
                              "space, or use --set data.cache=memory or data.cache=off")


def _remove_stale_temporaries(root: Path, key: str) -> None:
    """Temporary folders of interrupted builds on this machine whose process is gone."""
    host = socket.gethostname()
    for tmp in root.glob(f".{key}.tmp-*"):
        parts = tmp.name.split(".tmp-", 1)[1].split("-")
        if len(parts) < 3 or "-".join(parts[:-2]) != host:
            continue
        try:
            os.kill(int(parts[-2]), 0)
            continue                       # still building
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


def _reuse_or_clear(folder: Path, root: Path, paths: Sequence[str], key: str, *, mode: str, side: int,
                    log: Callable[[str], None]) -> tuple[ImageCache | None, str]:
    """(the complete cache in `folder`, "") when there is one; else (None, why it was removed, or "" when
    there was none)."""
    if not folder.exists():
        return None, ""
    try:
        cache = _open_disk(folder, paths, key, mode=mode, side=side)
        cache.status = "reused"
        return cache, ""
    except CacheDamaged as damage:
        log(f"data: the disk image cache {folder} is damaged ({damage}); rebuilding it")
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            raise _unwritable(root, exc) from None
        return None, str(damage)


def _new_temporary(root: Path, key: str) -> Path:
    """A fresh folder to build the cache in, named for this host and process (see _remove_stale_temporaries)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(root, key)
        tmp = root / f".{key}.tmp-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
    except OSError as exc:
        raise _unwritable(root, exc) from None
    return tmp


def _write_disk(tmp: Path, paths: Sequence[str], shapes: list[tuple[int, ...]], offsets: list[int], total: int, *,
                key: str, mode: str, side: int, decoded: dict[str, Any] | None, threads: int,
                progress: bool) -> None:
    """The pixels and their index in `tmp`, fsynced (the caller renames the folder into place)."""
    import numpy as np

    array = np.lib.format.open_memmap(tmp / PIXELS_FILE, mode="w+", dtype=np.uint8, shape=(total,))

    def write(offset: int, flat):
        array[offset:offset + flat.numel()] = flat.numpy()

    _fill(paths, shapes, offsets, write, mode=mode, side=side, decoded=decoded, threads=threads,
          progress=progress, desc="caching images on disk")
    array.flush()
    crc = _checksum(array)
    del array
    index = {"version": FORMAT_VERSION, "key": key, "mode": mode, "side": side, "total": total,
             "crc32": crc, "created": time.time(), "paths": [os.path.abspath(p) for p in paths],
             "shapes": [list(s) for s in shapes]}
    (tmp / INDEX_FILE).write_text(json.dumps(index))
    for name in (PIXELS_FILE, INDEX_FILE):
        with open(tmp / name, "rb") as handle:
            os.fsync(handle.fileno())


def open_or_build_disk(paths: Sequence[str], sizes: dict[str, tuple[int, int]], *, mode: str, side: int,
                       root: str | Path | None = None, decoded: dict[str, Any] | None = None, threads: int = 4,
                       progress: bool = False, log: Callable[[str], None] | None = None) -> ImageCache:
    """The disk cache for these files: reused when complete and intact, else (re)built atomically."""
    log = log or (lambda _msg: None)
    root = Path(root).expanduser() if root else default_root()
    key = cache_key(paths, mode=mode, side=side)
    folder = root / key
    cache, rebuilt = _reuse_or_clear(folder, root, paths, key, mode=mode, side=side, log=log)
    if cache is not None:
        return cache
    tmp = _new_temporary(root, key)
    channels = 1 if mode == "L" else 3
    shapes = _shapes(paths, sizes, channels, side)
    offsets, total = _layout(shapes)
    try:
        try:
            _write_disk(tmp, paths, shapes, offsets, total, key=key, mode=mode, side=side, decoded=decoded,
                        threads=threads, progress=progress)
        except OSError as exc:
            raise _unwritable(root, exc) from None
        try:
            os.rename(tmp, folder)         # atomic: the cache appears complete or not at all
            ours = True
        except OSError:
            if not folder.exists():
                raise
            ours = False                   # another process finished the same cache first: use theirs
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if ours:
        cache = ImageCache(paths, offsets, shapes, kind="disk", side=side, mode=mode, file=str(folder / PIXELS_FILE))
    else:
        cache = _open_disk(folder, paths, key, mode=mode, side=side)
    cache.status = f"rebuilt: {rebuilt}" if rebuilt else "built"
    return cache
