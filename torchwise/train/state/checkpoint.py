"""Checkpoints as directories written atomically.

A checkpoint is `checkpoints/step-000000123/` holding `model.safetensors` (weights), `state.pt`
(optimizer, scheduler, scaler, RNG, position, best metric, config; tensors and plain containers
only, read back with weights_only=True) and `COMPLETE` (written last). Everything is written into a
temporary sibling directory, fsync'ed, then renamed into place: a process killed at any moment
leaves either the previous complete checkpoint or the new one, never a half-written one. A write
that fails (disk full, file size limit) removes its temporary directory and says which checkpoint
is still good. On resume a checkpoint whose files are cut short (copied in part, a damaged disk) is
recognised before loading, and the previous good one is used instead, with a warning.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import torch

from torchwise import files
from torchwise.errors import CheckpointError

PREFIX = "step-"
MARKER = "COMPLETE"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:09d}"


def begin_checkpoint(root: Path, step: int) -> Path:
    """The temporary directory a checkpoint is written into (shared by all ranks of a sharded run)."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = pending_path(root, step)
    files.remove_tree(tmp)  # a leftover, or a link put there: removed itself, never what it points to
    tmp.mkdir()
    return tmp


def pending_path(root: Path, step: int) -> Path:
    return root / f".tmp-{checkpoint_name(step)}"


def save_checkpoint(root: Path, step: int, model_state: dict[str, torch.Tensor], state: dict[str, Any],
                    tmp: Path | None = None) -> Path:
    """Write weights + state into `tmp` (begin_checkpoint's, possibly holding shards already), then publish it."""
    from safetensors.torch import save_file

    final = root / checkpoint_name(step)
    writing = "the checkpoint folder"
    try:
        if tmp is None:
            tmp = begin_checkpoint(root, step)
        writing = "model.safetensors"
        save_file({k: v.cpu() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
        writing = "state.pt"
        torch.save(state, tmp / "state.pt")
        writing = MARKER
        # The marker is written only once both files are whole (and fsync'ed): a write that fails
        # or is killed before this line leaves a directory that no reader takes for a checkpoint.
        for name in ("model.safetensors", "state.pt"):
            files.usual_mode(tmp / name)
            files.fsync_file(tmp / name)
        (tmp / MARKER).write_text(json.dumps({"step": step, "time": time.time()}))
        files.fsync_file(tmp / MARKER)
        files.fsync_dir(tmp)
    except BaseException as exc:  # disk full, file size limit, I/O error (safetensors, torch, open()), Ctrl-C
        if not isinstance(exc, Exception):  # interrupted: no half checkpoint stays behind either
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        # torch's own words can be as bare as "unexpected pos 151616 vs 151568": say what was being
        # written, and the two usual causes, measured
        written = tmp / writing if tmp is not None and writing != "the checkpoint folder" else None
        where = f"{writing} ({written.stat().st_size} bytes written)" if written and written.is_file() else writing
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        good = [p for p in list_checkpoints(root) if unreadable_reason(p) is None]
        raise files.write_error(
            f"Could not write checkpoint {final.name}.", final, exc,
            "free disk space (or raise the file size limit), then continue the run with --resume"
            + (f": it restarts from {good[-1].name}, which is intact" if good else " (no checkpoint was saved yet)"),
            **{"while writing": where, **files.space_and_limit(root),
               "latest good checkpoint": good[-1].name if good else "none"}) from exc
    if os.path.lexists(final):  # the same step saved again (a resumed run): move the old one out of the way first
        old = root / f".old-{checkpoint_name(step)}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        files.remove_tree(old)
    else:
        os.replace(tmp, final)
    files.fsync_dir(root)
    return final


def has_shards(path: Path) -> bool:
    return (path / "sharded").is_dir()


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "model.safetensors").is_file() and (path / "state.pt").is_file()


def unreadable_reason(path: Path) -> str | None:
    """Why a checkpoint marked complete cannot be read (None: it can), from its files' sizes and
    framing alone: a cut-off model.safetensors or state.pt is found without loading either."""
    for name in ("model.safetensors", "state.pt"):
        file = path / name
        try:
            size = file.stat().st_size
            problem = _safetensors_problem(file, size) if name.endswith(".safetensors") else _torch_file_problem(file)
        except OSError as exc:
            problem = f"cannot be read ({exc.strerror})"
            size = 0
        if problem:
            return f"{name}: {size} bytes, {problem}"
    return None


def _safetensors_problem(file: Path, size: int) -> str | None:
    # safetensors: 8 bytes of header length, the JSON header, then every tensor's bytes
    with open(file, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return "shorter than a safetensors header"
        length = int.from_bytes(head, "little")
        if length > size - 8:
            return f"cut short: its header alone needs {8 + length} bytes"
        try:
            header = json.loads(fh.read(length))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, AttributeError):
            return "its header is damaged"
    if 8 + length + end != size:
        return f"cut short: its header describes {8 + length + end} bytes"
    return None


def _torch_file_problem(file: Path) -> str | None:
    # torch.save writes a zip archive whose directory comes last: a cut-off file has none
    try:
        with zipfile.ZipFile(file) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError):
        return "cut short or damaged: not a complete torch archive"
    return None


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
        for p in sorted(root.iterdir()):
            # A checkpoint moved aside to be replaced by a newer save of its step, when the process died
            # between the two renames: it is the only copy of that step, so it goes back, not away.
            if p.name.startswith(".old-") and p.is_dir():
                name = p.name[len(".old-"):].rsplit("-", 1)[0]
                target = root / name
                if is_complete(p) and not is_complete(target):
                    shutil.rmtree(target, ignore_errors=True)
                    os.replace(p, target)
                    continue
            if p.name.startswith((".tmp-", ".old-")) or (p.is_dir() and p.name.startswith(PREFIX) and not is_complete(p)):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
    return removed


def prune(root: Path, keep_last: int) -> None:
    for old in list_checkpoints(root)[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def _warn(line: str) -> None:
    print(line, file=sys.stderr)


def newest_readable(found: list[Path], warn: Any = _warn) -> Path | None:
    """The newest checkpoint of `found` (oldest first) that can be read; a newer unreadable one is
    passed over with a warning naming both. None when `found` is empty; an error when none is readable."""
    broken: dict[str, str] = {}
    for path in reversed(found):
        reason = unreadable_reason(path)
        if reason is None:
            if broken and warn is not None:
                warn(f"torchwise: warning: checkpoint {', '.join(broken)} is unreadable "
                     f"({'; '.join(broken.values())}); resuming from the previous good checkpoint {path.name} "
                     f"({path}) instead")
            return path
        broken[path.name] = reason
    if broken:
        raise CheckpointError("No checkpoint of this run can be read: each is cut short or damaged.",
                              values={"checkpoints": str(found[-1].parent), **broken},
                              fix="start a new run (another --out), or restore the checkpoint files from a backup")
    return None


def find_resume_checkpoint(resume: bool | str | Path, out_dir: Path | None, warn: Any = _warn) -> Path | None:
    """Resolve `resume=` to a complete, readable checkpoint directory (None: start fresh).
    `warn` gets the line saying an unreadable newer checkpoint was passed over (None: silent)."""
    if resume is False or resume is None:
        return None
    if resume is True:
        if out_dir is None:
            raise CheckpointError("resume=True needs out_dir to know where the checkpoints are.",
                                  fix="Pass out_dir=... (the run directory), or resume='path/to/checkpoint'.")
        return newest_readable(list_checkpoints(out_dir / "checkpoints"), warn)
    path = Path(resume)
    if path.is_dir() and not is_complete(path):
        found = list_checkpoints(path / "checkpoints") or list_checkpoints(path)
        if found:
            return newest_readable(found, warn)
    if not (path.is_dir() and is_complete(path)):
        raise CheckpointError(
            "No complete checkpoint at the resume path.",
            values={"resume": str(path)},
            fix="Pass a run directory, its checkpoints/ folder or one checkpoints/step-... directory.",
        )
    reason = unreadable_reason(path)
    if reason is not None:  # named by the user: no other checkpoint is taken silently in its place
        raise CheckpointError("The checkpoint to resume from cannot be read.", values={"resume": str(path),
                              "problem": reason}, fix="pass an earlier checkpoint, or the run directory (its "
                              "newest readable checkpoint is then used)")
    return path


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    from safetensors.torch import load_file

    if not is_complete(path):
        raise CheckpointError("Checkpoint is incomplete (it was being written when the process stopped).",
                              values={"path": str(path)}, fix="Resume from an earlier checkpoint.")
    reason = unreadable_reason(path)
    if reason is not None:
        raise CheckpointError("The checkpoint cannot be read: a file is cut short or damaged.",
                              values={"path": str(path), "problem": reason},
                              fix="Resume from an earlier checkpoint (resume=True takes the newest readable one).")
    name = "model.safetensors"
    try:
        weights = load_file(str(path / name), device=str(map_location))
        # Optimizer.load_state_dict moves its state to the parameters' device by itself, and RNG states
        # must stay on the CPU, so the rest of the state is always read onto the CPU.
        name = "state.pt"
        state = torch.load(path / name, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError) + files.safetensors_errors() as exc:  # damaged inside
        raise CheckpointError("The checkpoint cannot be read: a file is damaged.",
                              values={"path": str(path / name), "size": f"{(path / name).stat().st_size} bytes",
                                      "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__},
                              fix="Resume from an earlier checkpoint, or restore the file from a backup.") from exc
    return weights, state
