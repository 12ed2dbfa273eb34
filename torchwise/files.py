"""Writing files so that a crash never leaves half of one: write beside, fsync, rename over.

The one owner of "how the package writes a file it must not lose" (checkpoints, weights, the run's
JSON and YAML, cached statistics): every layer above may use it, so it imports nothing of the package
but the errors. A failed write says which file, the system's reason, the free space and the file size
limit, instead of a traceback from inside a writer.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

from torchwise.errors import TorchwiseError


def fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def umask() -> int:
    try:  # Linux says it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def usual_mode(path: Path) -> None:
    """The mode a plain open() would give: safetensors writes its file 0600 whatever the umask says,
    which hides weights from the rest of a team sharing the run directory."""
    os.chmod(path, 0o666 & ~umask())


def space_and_limit(folder: Path) -> dict[str, str]:
    """Free space where `folder` is, and this process' file size limit when it has one."""
    found = {}
    with contextlib.suppress(OSError):
        found["free disk space"] = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB"
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY:
            found["file size limit"] = f"{soft} bytes (ulimit -f)"
    return found


def write_error(what: str, path: Path, exc: BaseException, fix: str, **values: Any) -> TorchwiseError:
    """A failed write (disk full, file too large, read-only disk, a file where a folder belongs) as an
    error that names the file and the system's reason instead of a traceback from inside a writer."""
    reason = f"{exc.strerror} (errno {exc.errno})" if isinstance(exc, OSError) and exc.strerror else str(exc)
    return TorchwiseError(what, values={"path": str(path), "error": reason, **values}, fix=fix)


def is_write_failure(exc: BaseException) -> bool:
    """The disk said no (full, file size limit, read-only, I/O error), whoever was writing: open() and
    os raise OSError, safetensors its own error with the OS's words, torch.save a RuntimeError."""
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, safetensors_errors() + (RuntimeError,)) and (
        "os error" in str(exc).lower() or "write" in str(exc).lower())


@contextlib.contextmanager
def atomic_write_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`.

    The file gets the usual mode from the umask (0644 under umask 022), whoever wrote it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            usual_mode(tmp)
            fsync_file(tmp)
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except Exception as exc:
            if not is_write_failure(exc):
                raise
            raise write_error("Could not write a file of the run.", path, exc,
                              "free disk space (or raise the file size limit), check that the folder is "
                              "writable, and run again (a training run continues with --resume); the previous "
                              "version of the file is unchanged", **space_and_limit(path.parent)) from exc
    finally:
        if tmp.is_dir():  # whatever the writer left there, a file or (it happens) a folder
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def safetensors_errors() -> tuple[type[BaseException], ...]:
    try:
        from safetensors import SafetensorError
    except ImportError:  # older safetensors: its error is a plain Exception subclass
        return ()
    return (SafetensorError,)


def write_text(path: Path, text: str) -> None:
    """`path` holds `text` afterwards, or (after a crash or a full disk) what it held before."""
    with atomic_write_path(Path(path)) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON, written atomically (see write_text)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
