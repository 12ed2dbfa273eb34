"""Resuming a run: which settings may change, the configuration the resumed run uses, and the check
that it trains on the data of its checkpoint.

A resumed run continues the checkpoint, so each setting given again with another value is either
applied, ignored (said, with both values) or refused (the run would no longer be the one the
checkpoint belongs to). config.yaml then holds what the run really uses: the saved values plus
the applied changes, never an ignored or refused one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchwise.errors import TorchwiseError
from torchwise.run.directory import with_absolute_paths

# How and where the run computes, and what it records, but not what it learns: applied.
RESUME_APPLIED = frozenset({
    "data.num_workers", "data.cache", "data.cache_dir",
    "train.device", "train.precision", "train.fast", "train.threads", "train.profile", "train.deterministic",
    "train.eval_batch_size", "train.eval_every", "train.on_oom", "train.checkpoint_every", "train.keep_last",
    "output.report", "output.worst_examples", "output.progress", "train.loggers", "train.extend_schedule",
})
# The run's length: applied (a longer or shorter run); a schedule laid out for the old length needs the
# user's choice of how it goes on (train.extend_schedule), else the new length is refused with the choices.
RESUME_LENGTH = frozenset({"train.epochs", "train.max_steps"})
LAID_OUT_SCHEDULES = ("onecycle", "cosine")
# Only where the run started from: the checkpoint's weights replace them, so a new value is ignored.
RESUME_IGNORED = {"model.weights": "the checkpoint's weights replace the starting weights"}
# This invocation rather than the run; data.path may name moved data, checked after reading (check_same_data).
RESUME_NOT_COMPARED = frozenset({"train.resume", "output.dir", "data.path"})
# Every other setting is refused: the data's split and preprocessing, the model, the optimizer, the
# learning rate and its schedule, the batch, the seed, the loss, the strategy (and any key added later).


def resume_policy(key: str, saved_scheduler: str, extend_schedule: str = "none") -> str:
    """'applied', 'ignored' or 'refused' for a setting changed on resume."""
    if key in RESUME_LENGTH:
        return "refused" if saved_scheduler in LAID_OUT_SCHEDULES and extend_schedule == "none" else "applied"
    if key in RESUME_APPLIED:
        return "applied"
    return "ignored" if key in RESUME_IGNORED else "refused"


def _flat(config) -> dict[str, Any]:
    return {f"{section}.{key}": value for section, values in config.to_dict().items() for key, value in values.items()}


def plan_resume(config, run_dir: Path, checkpoint: Path, log=print):
    """The configuration a resumed run uses: its saved config.yaml plus the changes it can take."""
    from torchwise import config as cfg

    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise TorchwiseError("The run to resume has no config.yaml (the settings it was trained with).",
                             values={"out": str(run_dir), "missing": str(saved_path)},
                             fix="restore config.yaml into the run directory, or start a new run with another --out")
    saved = with_absolute_paths(cfg.load_yaml(saved_path))
    was, now = _flat(saved), _flat(with_absolute_paths(config))
    changed = {key: (was[key], now[key]) for key in was if key not in RESUME_NOT_COMPARED and was[key] != now[key]}
    by_policy: dict[str, dict[str, tuple[Any, Any]]] = {"applied": {}, "ignored": {}, "refused": {}}
    for key, values in changed.items():
        by_policy[resume_policy(key, saved.train.scheduler, now["train.extend_schedule"])][key] = values
    refused = by_policy["refused"]
    weights_fix = (f"train longer or differently as a new run that starts from this one's weights: --weights "
                   f"{checkpoint / 'model.safetensors'} --out NEW_RUNDIR")
    if refused and set(refused) <= RESUME_LENGTH:
        raise _length_refused(saved, config, run_dir, checkpoint, refused)
    if refused:
        raise TorchwiseError(
            "These settings cannot change when a run is resumed: its checkpoint was trained with the saved values.",
            values={"run": str(run_dir), **{key: f"saved {a}, given {b}" for key, (a, b) in refused.items()}},
            fix=f"drop them to continue the run as it was, or {weights_fix}")
    for key, (a, b) in by_policy["applied"].items():
        log(f"resume: {key} changes from {a} to {b}")
    for key, (a, b) in by_policy["ignored"].items():
        log(f"resume: ignoring {key}={b}: the run keeps {a} ({RESUME_IGNORED[key]})")
    tree = saved.to_dict()
    for key, (_, b) in by_policy["applied"].items():
        section, _, name = key.partition(".")
        tree[section][name] = b
    tree["data"]["path"] = now["data.path"]
    tree["output"]["dir"] = config.output.dir
    tree["train"]["resume"] = True
    return cfg.from_dict(tree)


def _length_refused(saved, config, run_dir: Path, checkpoint: Path, refused: dict[str, tuple[Any, Any]]):
    """A new length for a schedule laid out over the old one: the choices, in steps (the checkpoint's position
    and how far the run goes now, from its batches per epoch)."""
    from torchwise.train.recipes.schedule import extend_error
    from torchwise.train.state.checkpoint import read_state

    state = read_state(checkpoint, mmap=True)
    at_step = int(state["position"]["step"])
    per_epoch = -(-int(state["data"]["batches_per_epoch"]) // max(1, saved.train.accumulate))
    t = config.train
    steps_now = t.max_steps if t.max_steps is not None else per_epoch * t.epochs
    start = int(state.get("schedule_start_step", 0))
    return extend_error(saved.train.scheduler, start + int(state["schedule_total_steps"]), steps_now, at_step,
                        saved.train.lr, choice=lambda name: f"--extend-schedule {name}",
                        values={"run": str(run_dir), **{key: f"saved {a}, given {b}" for key, (a, b) in refused.items()}})


def _comparable(value: Any) -> Any:
    """JSON content with floats rounded (recomputed normalization statistics may differ in the last digits)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


# Where the data live is not part of what they are: moved data resume as well.
NOT_THE_DATA = {"split.json": ("root", "skipped"), "meta.json": ("data_path",)}


def check_same_data(run_dir: Path, now: dict[str, dict[str, Any]], data_path: str) -> None:
    """A resumed run trains on the data of its checkpoint: the same split (the same files or rows,
    train and val) and the same preprocessing (classes, input, normalization, encoders)."""
    differs, then_root = [], None
    for name, fresh in now.items():
        path = run_dir / name
        if not path.is_file():
            continue  # a run from before these files were kept: the Trainer still compares sample counts
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            raise TorchwiseError(f"The run's {name} is damaged (not valid JSON).", values={"path": str(path)},
                                 fix="restore it from a backup, or start a new run with another --out") from None
        then_root = then_root or saved.get("root") or saved.get("data_path")
        skip = NOT_THE_DATA.get(name, ())
        keys = sorted(set(saved) | set(fresh))
        differs += [f"{name}:{key}" for key in keys if key not in skip
                    and _comparable(saved.get(key)) != _comparable(fresh.get(key))]
    if differs:
        raise TorchwiseError(
            "The training data differ from the data of the run being resumed.",
            values={"run": str(run_dir), "data then": then_root or "-", "data now": data_path,
                    "differs in": ", ".join(differs)},
            fix="resume with the run's own data (drop --data), or start a new run with another --out")


def resume_command(config) -> str:
    """The command that continues this run (said on Ctrl-C): the command, not the Python call."""
    import shlex

    return f"torchwise train --out {shlex.quote(str(config.output.dir))} --resume"
