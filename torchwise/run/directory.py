"""The run directory: what `--out` must be before anything is read or written, and the run's
prepared files published into it.

A refused command changes nothing on disk: these checks run before any file is written, and the
run's own files are prepared elsewhere and copied in only once every check has passed.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from torchwise.errors import TorchwiseError

# What the run directory holds, by kind: a file of that name where a folder belongs (or the other way
# round) would only fail later, in the middle of the run.
RUN_FOLDERS = ("checkpoints", "final", "best", "tb")
RUN_FILES = ("config.yaml", "split.json", "data_stats.json", "meta.json", "metrics.csv", "eval.json", "report.html",
             "trainer_config.json")
OUT_FIX = "pass --out a folder that can be created and written (a new one is created, with its parents)"


def check_out_dir(run_dir: Path) -> None:
    """--out must be a folder that exists or can be created, and be writable: said before anything is read."""
    try:
        if run_dir.exists() and not run_dir.is_dir():
            raise TorchwiseError("--out names a file, not a run directory.",
                                 values={"out": str(run_dir), "size": f"{run_dir.stat().st_size} bytes"}, fix=OUT_FIX)
        existing = run_dir.absolute()
        while not existing.exists():
            existing = existing.parent
    except OSError as exc:
        raise TorchwiseError("--out cannot be looked at.", values={"out": str(run_dir), "error": exc.strerror},
                             fix=OUT_FIX) from None
    if not existing.is_dir():
        raise TorchwiseError("--out lies inside a file, not a folder.",
                             values={"out": str(run_dir), "file": str(existing)}, fix=OUT_FIX)
    try:  # the one sure test of "can be written" (root ignores permission bits; /proc refuses anyway)
        os.rmdir(tempfile.mkdtemp(prefix=".torchwise-probe-", dir=existing))
    except OSError as exc:
        raise TorchwiseError("--out cannot be created or written.",
                             values={"out": str(run_dir), "folder": str(existing), "error": exc.strerror},
                             fix=OUT_FIX) from None
    for name in RUN_FOLDERS:
        if (run_dir / name).exists() and not (run_dir / name).is_dir():
            raise TorchwiseError("The run directory holds a file where torchwise keeps a folder.",
                                 values={"path": str(run_dir / name), "expected": "a folder"},
                                 fix=f"move {run_dir / name} away, or choose another --out directory")
    for name in RUN_FILES:
        if (run_dir / name).is_dir():
            raise TorchwiseError("The run directory holds a folder where torchwise writes a file.",
                                 values={"path": str(run_dir / name), "expected": "a file"},
                                 fix=f"move {run_dir / name} away, or choose another --out directory")


def check_out_apart_from_data(run_dir: Path, data_path: str | None) -> None:
    """--out and --data may not overlap either way (links followed): a run folder inside the data becomes a class
    of its own at the next scan (a resume refused, the data set broken for every later run), and data inside the
    run folder sits among files that are replaced. Said before anything is written."""
    if not data_path:
        return
    out, data = Path(os.path.realpath(run_dir)), Path(os.path.realpath(data_path))
    if out == data or out.is_relative_to(data) or (Path(data_path).is_dir() and data.is_relative_to(out)):
        where = "is" if out == data else "lies inside" if out.is_relative_to(data) else "holds"
        raise TorchwiseError(f"--out {where} the data folder: the run's files would mix with the data.",
                             values={"out": str(run_dir), "data": data_path, "out (resolved)": str(out),
                                     "data (resolved)": str(data)},
                             fix=f"choose a run folder outside the data, e.g. --out {data.parent / 'runs' / data.name}"
                                 if out.is_relative_to(data) else "choose a run folder apart from the data, e.g. "
                                                                  "--out runs/NAME beside it")


def check_run_dir(run_dir: Path, resume: bool) -> None:
    """A new run needs a directory without a run in it; a resumed one needs a complete checkpoint."""
    from torchwise.train.state import checkpoint as ckpt

    # complete or damaged: resume passes over a damaged one (and says so); a new run never mixes with one
    complete = ckpt.all_checkpoints(run_dir / "checkpoints")
    if resume:
        if not complete:
            # a run stopped before its first checkpoint has nothing to continue: it starts again
            left = sorted(p.name for p in (run_dir / "checkpoints").iterdir()) if (run_dir / "checkpoints").is_dir() else []
            raise TorchwiseError("Nothing to resume: the run directory has no complete checkpoint.",
                                 values={"out": str(run_dir), "exists": run_dir.is_dir(),
                                         "checkpoints": ", ".join(left) or "none"},
                                 fix="drop --resume to start this run from the beginning")
        return
    if complete:
        raise TorchwiseError("The run directory already holds a run.",
                             values={"out": str(run_dir), "latest checkpoint": complete[-1].name},
                             fix="add --resume to continue it, or choose a new --out directory")
    if (run_dir / "final").exists():
        raise TorchwiseError("The run directory already holds a finished run (final/, without checkpoints to "
                             "resume from).", values={"out": str(run_dir)},
                             fix="choose a new --out directory (or move its final/ folder away to train there again)")


def with_absolute_paths(config):
    """The saved config names files absolutely, so `--resume` and `eval` work from any directory."""
    data = dataclasses.replace(config.data, path=str(Path(config.data.path).resolve()) if config.data.path else None)
    model = dataclasses.replace(config.model,
                                weights=str(Path(config.model.weights).resolve()) if config.model.weights else None)
    return dataclasses.replace(config, data=data, model=model)


def publish(staging: Path, run_dir: Path) -> None:
    """The prepared run files into the run directory, each replaced atomically (never half written)."""
    from torchwise.files import atomic_write_path

    for path in sorted(staging.iterdir()):
        with atomic_write_path(run_dir / path.name, root=run_dir) as tmp:
            tmp.write_bytes(path.read_bytes())
