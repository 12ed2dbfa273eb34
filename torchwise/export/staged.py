"""Export files written whole or not at all: each format's file(s) are written into a private folder beside
them and renamed over the previous export only once complete (fsynced). An export that fails on the way
(a full disk, the file size limit, the exporter itself) removes what it wrote and leaves the previous
export as it was, instead of a cut-off model.onnx that onnxruntime then calls damaged.

One format can be more than one file (ONNX over 2 GB keeps its weights in model.onnx.data beside the
graph, named inside it): all of a format's files are written under their final names in the private
folder, so the names inside stay right, and each is renamed into place, the side files before the file
that names them. The writes and their failures are torchwise/files.py's (write_error names the file,
the free space and the file size limit).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

from torchwise import files
from torchwise.errors import TorchwiseError

class ExportWriteError(TorchwiseError):
    """An export file that could not be written (the disk's reason, not the model's): export stops there."""


EXPORT_WRITE_FIX = ("free disk space (or raise the file size limit, ulimit -f) and export again; the previous export "
                    "in that folder is unchanged")


@contextlib.contextmanager
def staged_export(path: Path) -> Iterator[Path]:
    """Yield where to write `path` (and any side file beside it, under its final name); when the block ends,
    every file written there replaces its namesake beside `path`. On any error, nothing replaces anything and
    the private folder is removed; a failed write is raised as a TorchwiseError saying which file and why."""
    path = Path(path)
    stage = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(stage, ignore_errors=True)  # this process's own leftover, from an earlier call killed midway
            stage.mkdir()
            yield stage / path.name
            _publish(stage, path)
        except Exception as exc:
            if not files.is_write_failure(exc):
                raise
            said = files.write_error(f"Could not write the exported file {path.name}.", path, exc, EXPORT_WRITE_FIX,
                                     **files.space_and_limit(path.parent))
            raise ExportWriteError(said.what, values=said.values, fix=said.fix) from exc
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _publish(stage: Path, path: Path) -> None:
    """Each file in `stage` fsynced and renamed beside `path`; `path`'s own name last (it names the others)."""
    names = sorted(p.name for p in stage.iterdir() if p.name != path.name) + [path.name]
    for name in names:
        written = stage / name
        if not written.is_file():
            continue
        files.usual_mode(written)
        files.fsync_file(written)
    for name in names:
        if (stage / name).is_file():
            os.replace(stage / name, path.parent / name)
    files.fsync_dir(path.parent)


def in_memory(save: Callable[[Any, Any], None], obj: Any) -> bytes:
    """What `save(obj, file)` writes, as bytes: torch's zip writer (torch.jit.save, torch.export.save) ends
    the process with a C++ terminate when a write to disk fails midway, so it writes into memory and the
    bytes go to disk with a plain write, whose failure is an OSError like any other."""
    import io

    buffer = io.BytesIO()
    save(obj, buffer)
    return buffer.getvalue()
