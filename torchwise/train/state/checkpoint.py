"""Checkpoints as directories written atomically.

A checkpoint is `checkpoints/step-000000123/` holding `model.safetensors` (weights), `state.pt`
(optimizer, scheduler, scaler, RNG, position, best metric, config; tensors and plain containers
only, read back with weights_only=True) and `COMPLETE` (written last). Everything is written into a
temporary sibling directory, fsync'ed, then renamed into place: a process killed at any moment
leaves either the previous complete checkpoint or the new one, never a half-written one. A write
that fails (disk full, file size limit) removes its temporary directory and says which checkpoint
is still good.

On resume the newest checkpoint that loads is used: one that cannot be loaded for any reason (a file cut
short, missing or damaged, a state.pt the safe unpickler refuses, weights of another shape, a state its
component refuses) is passed over for the one before it, with a warning that names it and says why. It
is left on disk as it is (never deleted or renamed: it may be the one the user wants to rescue). When none
loads, one error lists each checkpoint with its reason. A checkpoint the user names is never replaced by
another. A refusal that is about the run rather than the checkpoint (other data, another schedule length)
is the same for every checkpoint: it is raised as it is.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

import torch

from torchwise import files
from torchwise.errors import CheckpointError, TorchwiseError
from torchwise.file_names import utf8_reachable

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
    """Why the checkpoint at `path` cannot be loaded (None: it can), found without loading its tensors: a
    file missing or cut short, a damaged safetensors header, a state.pt that is not a whole torch archive or
    that the safe unpickler (weights_only=True) refuses; nothing in it is ever executed."""
    missing = [name for name in (MARKER, "model.safetensors", "state.pt") if not (path / name).is_file()]
    if missing:
        return (f"{', '.join(missing)} missing" + (" (it was not written to the end)" if missing == [MARKER] else ""))
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
    try:
        read_state(path, mmap=True)  # the pickle alone: the tensors stay on disk (mapped, not read)
    except Exception as exc:  # the safe unpickler's refusal, or damage inside the archive
        return f"state.pt: {state_problem(exc)}"
    return None


def read_state(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """state.pt read with the safe unpickler (weights_only=True: tensors and plain containers, no code)."""
    with utf8_reachable(path / "state.pt") as name:  # (a run folder named in Latin-1: C++ takes UTF-8 names only)
        state = torch.load(name, map_location="cpu", weights_only=True, mmap=mmap)
    if not isinstance(state, dict):
        raise ValueError(f"it holds a {type(state).__name__}, not the checkpoint's dict of states")
    return state


def state_problem(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else type(exc).__name__
    if "weights_only" in text or "Weights only load failed" in text:
        return f"refused by the safe unpickler (weights_only=True; nothing in it was run): {first}"
    return f"damaged: {first}"


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
    return [p for p in all_checkpoints(root) if is_complete(p)]


def all_checkpoints(root: Path) -> list[Path]:
    """Every checkpoint folder (step-N), complete or not, oldest first; temporary ones (.tmp-, .old-) are not."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit() and p.is_dir()]
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
                    if not os.path.lexists(target):
                        os.replace(p, target)
                    continue  # (a damaged folder of that name is there: both are kept, for the user to choose)
            # Only the leftovers of its own writes: a step-N folder that is not complete is damage (every
            # checkpoint is renamed into place whole), kept for the user to see; resume passes over it.
            if p.name.startswith((".tmp-", ".old-")):
                files.remove_tree(p)
                removed.append(p.name)
    return removed


def prune(root: Path, keep_last: int) -> None:
    """The `keep_last` newest loadable checkpoints stay; one that cannot be loaded does not count, and is
    left as it is (resume passed over it and said so)."""
    good = [p for p in list_checkpoints(root) if unreadable_reason(p) is None]
    for old in good[:-keep_last] if keep_last > 0 else []:
        files.remove_tree(old)


def print_warning(line: str) -> None:
    print(line, file=sys.stderr)


def load_newest(found: list[Path], load: Callable[[Path], Any] | None = None, warn: Any = print_warning,
                named: bool = False) -> Path | None:
    """The newest checkpoint of `found` (oldest first) that loads: readable (unreadable_reason), then
    `load(path)` without an error. One that does not is passed over, with a warning naming it and why, and
    left as it is. A TorchwiseError other than a CheckpointError is about the run, not the checkpoint: it is
    raised as it is. None when `found` is empty; a CheckpointError listing each reason when none loads.
    `named`: the user named this one checkpoint, so no other is taken in its place."""
    skipped: dict[str, str] = {}
    for path in reversed(found):
        reason = unreadable_reason(path)
        if reason is None and load is not None:
            reason = _load_problem(path, load)
        if reason is None:
            if skipped and warn is not None:
                warn(f"torchwise: warning: checkpoint {', '.join(skipped)} is unreadable "
                     f"({'; '.join(f'{k}: {v}' for k, v in skipped.items())}); resuming from the previous good "
                     f"checkpoint {path.name} ({path}) instead (the unreadable one is left as it is)")
            return path
        if named:
            raise CheckpointError("The checkpoint to resume from cannot be read.",
                                  values={"resume": str(path), "problem": reason},
                                  fix="pass an earlier checkpoint, or the run directory (its newest readable "
                                      "checkpoint is then used)")
        skipped[path.name] = reason
    if skipped:
        raise CheckpointError("No checkpoint of this run can be read or loaded: each is cut short, damaged or refused.",
                              values={"checkpoints": str(found[-1].parent), **skipped},
                              fix="start a new run (another --out), or restore the checkpoint files from a backup "
                                  "(nothing was deleted)")
    return None


def _load_problem(path: Path, load: Callable[[Path], Any]) -> str | None:
    """Why `load(path)` failed (None: it loaded); a refusal about the run itself is raised."""
    try:
        load(path)
    except CheckpointError as exc:
        detail = "; ".join(f"{k}: {v}" for k, v in exc.values.items() if k not in ("path", "checkpoint"))
        return f"{exc.what}" + (f" ({detail})" if detail else "")
    except TorchwiseError:
        raise
    except Exception as exc:  # what a component's load_state_dict, or the state's own contents, refused
        text = str(exc).strip()
        return f"cannot be loaded: {type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}".rstrip(": ")
    return None


def newest_readable(found: list[Path], warn: Any = print_warning) -> Path | None:
    """The newest checkpoint of `found` (oldest first) that can be read (load_newest without loading it)."""
    return load_newest(found, None, warn)


def resume_candidates(resume: bool | str | Path, out_dir: Path | None) -> tuple[list[Path], bool]:
    """The checkpoints `resume=` may continue from, oldest first, and whether the user named one checkpoint
    (then no other is taken in its place). ([], False): start fresh."""
    if resume is False or resume is None:
        return [], False
    if resume is True:
        if out_dir is None:
            raise CheckpointError("resume=True needs out_dir to know where the checkpoints are.",
                                  fix="Pass out_dir=... (the run directory), or resume='path/to/checkpoint'.")
        return all_checkpoints(out_dir / "checkpoints"), False
    path = Path(resume)
    is_checkpoint = any((path / name).exists() for name in (MARKER, "model.safetensors", "state.pt"))
    if path.is_dir() and not is_checkpoint:
        found = all_checkpoints(path / "checkpoints") or all_checkpoints(path)
        if found:
            return found, False
    if not (path.is_dir() and is_checkpoint):
        raise CheckpointError(
            "No complete checkpoint at the resume path.",
            values={"resume": str(path)},
            fix="Pass a run directory, its checkpoints/ folder or one checkpoints/step-... directory.",
        )
    return [path], True


def find_resume_checkpoint(resume: bool | str | Path, out_dir: Path | None, warn: Any = print_warning) -> Path | None:
    """Resolve `resume=` to a complete, readable checkpoint directory (None: start fresh).
    `warn` gets the line saying an unreadable newer checkpoint was passed over (None: silent)."""
    found, named = resume_candidates(resume, out_dir)
    return load_newest(found, None, warn, named=named)


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
        with utf8_reachable(path / name) as file_name:  # (a run folder named in Latin-1: Rust takes UTF-8 only)
            weights = load_file(file_name, device=str(map_location))
        # Optimizer.load_state_dict moves its state to the parameters' device by itself, and RNG states
        # must stay on the CPU, so the rest of the state is always read onto the CPU.
        name = "state.pt"
        state = read_state(path)
    except Exception as exc:  # damaged inside, or (state.pt) refused by the safe unpickler: never run
        raise CheckpointError("The checkpoint cannot be read: a file is damaged or refused.",
                              values={"path": str(path / name), "size": f"{(path / name).stat().st_size} bytes",
                                      "error": state_problem(exc)},
                              fix="Resume from an earlier checkpoint, or restore the file from a backup.") from exc
    return weights, state
