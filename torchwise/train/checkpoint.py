"""Checkpoints as directories written atomically.

A checkpoint is `checkpoints/step-000000123/` holding `model.safetensors` (weights), `state.pt`
(optimizer, scheduler, scaler, RNG, position, best metric, config; tensors and plain containers
only, read back with weights_only=True) and `COMPLETE` (written last). Everything is written into a
temporary sibling directory, fsync'ed, then renamed into place: a process killed at any moment
leaves either the previous complete checkpoint or the new one, never a half-written one.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from torchwise.errors import CheckpointError

PREFIX = "step-"
MARKER = "COMPLETE"


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:09d}"


def begin_checkpoint(root: Path, step: int) -> Path:
    """The temporary directory a checkpoint is written into (shared by all ranks of a sharded run)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = pending_path(root, step)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def pending_path(root: Path, step: int) -> Path:
    return root / f".tmp-{checkpoint_name(step)}"


def save_checkpoint(root: Path, step: int, model_state: dict[str, torch.Tensor], state: dict[str, Any],
                    tmp: Path | None = None) -> Path:
    """Write weights + state into `tmp` (begin_checkpoint's, possibly holding shards already), then publish it."""
    from safetensors.torch import save_file

    final = root / checkpoint_name(step)
    if tmp is None:
        tmp = begin_checkpoint(root, step)
    save_file({k: v.cpu() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
    torch.save(state, tmp / "state.pt")
    (tmp / MARKER).write_text(json.dumps({"step": step, "time": time.time()}))
    for name in ("model.safetensors", "state.pt", MARKER):
        _fsync_file(tmp / name)
    _fsync_dir(tmp)
    if final.exists():  # the same step saved again (a resumed run): move the old one out of the way first
        old = root / f".old-{checkpoint_name(step)}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    return final


def has_shards(path: Path) -> bool:
    return (path / "sharded").is_dir()


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "model.safetensors").is_file() and (path / "state.pt").is_file()


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, oldest first. Temporary and incomplete directories are ignored."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and is_complete(p)]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))


def clean_stale(root: Path) -> list[str]:
    """Remove leftovers of writes that were killed midway; returns their names."""
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp-", ".old-")) or (p.is_dir() and p.name.startswith(PREFIX) and not is_complete(p)):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
    return removed


def prune(root: Path, keep_last: int) -> None:
    for old in list_checkpoints(root)[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def find_resume_checkpoint(resume: bool | str | Path, out_dir: Path | None) -> Path | None:
    """Resolve `resume=` to a complete checkpoint directory (None: start fresh)."""
    if resume is False or resume is None:
        return None
    if resume is True:
        if out_dir is None:
            raise CheckpointError("resume=True needs out_dir to know where the checkpoints are.",
                                  fix="Pass out_dir=... (the run directory), or resume='path/to/checkpoint'.")
        found = list_checkpoints(out_dir / "checkpoints")
        return found[-1] if found else None
    path = Path(resume)
    if path.is_dir() and not is_complete(path):
        found = list_checkpoints(path / "checkpoints") or list_checkpoints(path)
        if found:
            return found[-1]
    if not (path.is_dir() and is_complete(path)):
        raise CheckpointError(
            "No complete checkpoint at the resume path.",
            values={"resume": str(path)},
            fix="Pass a run directory, its checkpoints/ folder or one checkpoints/step-... directory.",
        )
    return path


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    from safetensors.torch import load_file

    if not is_complete(path):
        raise CheckpointError("Checkpoint is incomplete (it was being written when the process stopped).",
                              values={"path": str(path)}, fix="Resume from an earlier checkpoint.")
    weights = load_file(str(path / "model.safetensors"), device=str(map_location))
    # Optimizer.load_state_dict moves its state to the parameters' device by itself, and RNG states
    # must stay on the CPU, so the rest of the state is always read onto the CPU.
    state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    return weights, state
