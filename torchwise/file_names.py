"""File and folder names as the operating system gives them: bytes-safe, and readable when shown.

On Linux a name is bytes. Python hands a name that is not valid UTF-8 (a file copied from an old Windows
share or a Latin-1 archive: b"caf\\xe9.png") to the program as text with "surrogate escapes"
("caf\\udce9.png"). That text opens the file fine, but raises UnicodeEncodeError the moment it is hashed,
written to a UTF-8 file or printed. This module is the one owner of turning such names into bytes (for
hashes and keys: exact, so two names never collide) and into text a person can read (messages, reports,
class names: the undecodable bytes read as Latin-1, which is what such names almost always are).
"""
from __future__ import annotations

import codecs
import contextlib
import os
from typing import Any, Iterator

READABLE = "torchwise_readable"  # an encoding error handler: sys.stdout.reconfigure(errors=READABLE)


def name_bytes(name: Any) -> bytes:
    """The exact bytes of a file name (str with surrogate escapes, bytes, or a Path)."""
    return os.fsencode(name)


def is_readable(text: str) -> bool:
    """True when `text` has no surrogate escapes (any UTF-8 file can hold it as it is)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: Any) -> str:
    """`name` as text a person can read and any UTF-8 file can hold: unchanged when it already is; else
    each undecodable byte read as Latin-1 (b"caf\\xe9" -> "café"), the valid UTF-8 parts kept."""
    text = os.fsdecode(name) if isinstance(name, bytes) else str(name)
    if is_readable(text):
        return text
    return "".join(_latin1(ch) if "\udc80" <= ch <= "\udcff" else ch for ch in text)


def readable(value: Any) -> Any:
    """`value` with every string in it (through lists, tuples, sets and dicts) made readable by shown()."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {readable(k): readable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return type(value)(readable(v) for v in value)
    return value


def _latin1(surrogate: str) -> str:
    return chr(ord(surrogate) - 0xDC00)  # U+DCxx holds the byte 0xxx; as Latin-1 that byte is U+00xx


def _readable_on_encode(exc: UnicodeError) -> tuple[bytes, int]:
    """For console streams: a surrogate-escaped byte is written as its Latin-1 letter, anything else the
    stream cannot hold as a backslash escape, so printing a file name never raises and never writes bytes
    that are not text."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    chunk = exc.object[exc.start:exc.end]
    text = "".join(_latin1(ch) if "\udc80" <= ch <= "\udcff" else ch for ch in chunk)
    # bytes, not text: CPython's UTF-8 encoder takes only ASCII text back from a handler
    return text.encode(exc.encoding, "backslashreplace"), exc.end


codecs.register_error(READABLE, _readable_on_encode)


def strict_utf8_path(folder: Any) -> tuple[str, int | None]:
    """A path to the existing `folder` that a library encoding paths as strict UTF-8 (TensorBoard's event
    writer does) can take: the folder's own path when it is UTF-8; else, on Linux, /proc/self/fd/N of a
    descriptor opened on it, which the caller closes with os.close when done (None: nothing to close)."""
    path = os.fsdecode(folder)
    if is_readable(path) or not os.path.isdir("/proc/self/fd"):
        return path, None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}", fd


@contextlib.contextmanager
def utf8_reachable(path: Any) -> Iterator[str]:
    """`path` (an existing file) as a name that readers which encode names as strict UTF-8 can open (torch.load
    with mmap=True and onnxruntime hand the name to C++): the name itself when it is UTF-8; else, on Linux,
    /proc/self/fd/N/<file> through its folder opened for the block (files beside it, an ONNX model's external
    data, are found there too), or /proc/self/fd/N of the file itself when its own name is not UTF-8."""
    name = os.fsdecode(path)
    if is_readable(name) or not os.path.isdir("/proc/self/fd"):
        yield name
        return
    folder, base = os.path.split(name)
    own = not is_readable(base)
    fd = os.open(name, os.O_RDONLY) if own else os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}" if own else f"/proc/self/fd/{fd}/{base}"
    finally:
        os.close(fd)
