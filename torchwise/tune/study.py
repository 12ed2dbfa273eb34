"""The Optuna study behind a search: storage, settings, trial accounting, crash recovery.

Shared by the coordinating process (search.py) and the worker processes (worker.py). Optuna is
imported inside the functions: `import torchwise` must not pay for it.

Trial accounting. `--trials N` is the number of trials the study should end up with. A trial
counts once it is finished (complete, pruned, or failed for a reason of its own) or running in a
live worker. A trial whose process was killed is marked FAIL with `interrupted` set and its
parameters are queued again, so it does not count: the search still reaches N real trials.
"""
from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

from torchwise.errors import ConfigError, TorchwiseError

DEFAULT_STUDY = "torchwise"
PRUNERS = ("median", "halving", "none")
# metric -> direction; any other metric name needs an explicit direction.
KNOWN_METRICS = {"val_loss": "minimize", "val_acc": "maximize", "val_top5": "maximize", "val_mae": "minimize",
                 "train_loss": "minimize"}
# These change how a trial runs, not what it computes; a resumed search may change them.
_FREE_TO_CHANGE = {"output", "train.threads", "train.device", "data.num_workers"}


def require_optuna():
    try:
        import optuna
    except ImportError:
        raise TorchwiseError("torchwise tune needs Optuna, which is not installed.", values={"python": sys.executable},
                             fix="pip install optuna (or install torchwise with its `all` extra)") from None
    return optuna


def storage_url(storage: str | None, study_dir: Path) -> str:
    if not storage:
        return f"sqlite:///{(study_dir / 'study.db').resolve()}"
    if storage.startswith("sqlite:///"):
        path = Path(storage[len("sqlite:///"):])
        # workers may start elsewhere; a relative SQLite path must name the same file for all of them
        return f"sqlite:///{path.resolve()}" if not path.is_absolute() else storage
    if "://" not in storage:
        raise ConfigError("--storage must be a database URL.", values={"storage": storage},
                          fix="for example --storage sqlite:///study.db (a file next to the study)")
    return storage


def open_storage(url: str):
    import optuna

    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several worker processes write to one SQLite file: wait for the lock instead of failing.
        kwargs = {"connect_args": {"timeout": 120}}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    except Exception as exc:  # sqlalchemy errors: bad URL, missing driver, unwritable file
        raise TorchwiseError("Cannot open the study storage.", values={"storage": url, "error": f"{type(exc).__name__}: "
                                                                                          f"{exc}"},
                             fix="check the URL and that its folder exists and is writable") from None


def direction_for(metric: str, direction: str | None) -> str:
    if direction:
        text = {"min": "minimize", "max": "maximize"}.get(direction, direction)
        if text not in ("minimize", "maximize"):
            raise ConfigError("Unknown direction.", values={"direction": direction, "allowed": "min, max"},
                              fix="--direction min (losses, errors) or max (accuracies)")
        return text
    if metric in KNOWN_METRICS:
        return KNOWN_METRICS[metric]
    raise ConfigError("No direction known for this metric.", values={"metric": metric, "known": ", ".join(KNOWN_METRICS)},
                      fix="pass --direction min or max (Python: direction='min')")


def comparable(config_dict: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The part of a base config that decides what trials compute (compared on resume)."""
    return {f"{section}.{key}": value for section, values in config_dict.items() for key, value in values.items()
            if section not in _FREE_TO_CHANGE and f"{section}.{key}" not in _FREE_TO_CHANGE}


def create_or_load(url: str, name: str, settings: dict[str, Any], direction: str):
    """(the study named `name`, its storage); a new study stores `settings`; an existing one must have the same.

    The storage comes back too: recover_interrupted writes through it (see _mark_interrupted)."""
    import optuna

    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name=name, direction=direction, load_if_exists=True)
    stored = study.user_attrs.get("settings")
    if stored is None:
        if study.trials:
            raise TorchwiseError("The storage holds a study of this name that torchwise did not create.",
                                 values={"storage": url, "study": name}, fix="pass another --study-name")
        study.set_user_attr("settings", settings)
        return study, storage
    mismatch = _differences(stored, settings)
    if mismatch:
        raise ConfigError("This study was started with other settings; resuming it with these would mix "
                          "incomparable trials.", values={"study": name, "storage": url, **mismatch},
                          fix="rerun with the original --config/--space/--metric to resume, or start a new "
                              "study with another --out (or --study-name)")
    return study, storage


def _differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("metric", "direction", "space"):
        if old.get(key) != new.get(key):
            out[key] = f"{old.get(key)} -> {new.get(key)}"
    old_cfg, new_cfg = comparable(old.get("base_config", {})), comparable(new.get("base_config", {}))
    # A key only one side knows (a torchwise upgrade added or removed it) matters only if it is set
    # to something other than its default.
    changed = {k: f"{old_cfg.get(k, '(default)')!r} -> {new_cfg.get(k, '(default)')!r}"
               for k in sorted(set(old_cfg) | set(new_cfg))
               if old_cfg.get(k, _default(k)) != new_cfg.get(k, _default(k))}
    if changed:
        out["config changes"] = changed
    return out


def _default(key: str) -> Any:
    from torchwise.tune.space import default_value

    return default_value(key)


# ----------------------------------------------------------------------------- accounting


def is_interrupted(trial) -> bool:
    return bool(trial.user_attrs.get("interrupted"))


def counted(study) -> int:
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
    return sum(1 for t in study.get_trials(deepcopy=False, states=done) if not is_interrupted(t))


def failures_in_a_row(study) -> int:
    """Failed trials (not interrupted ones) at the end of the finished trials, in start order."""
    from optuna.trial import TrialState

    finished = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                                    TrialState.FAIL)) if not is_interrupted(t)]
    finished.sort(key=lambda t: t.datetime_complete or t.datetime_start)
    run = 0
    for trial in reversed(finished):
        if trial.state != TrialState.FAIL:
            break
        run += 1
    return run


def _alive(pid: Any, marker: str | None) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{int(pid)}/cmdline")
    if marker and cmdline.is_file():  # a reused pid is another program
        try:
            return marker in cmdline.read_bytes().decode(errors="replace")
        except OSError:
            return True
    return True


def recover_interrupted(study, storage, study_dir: Path, log) -> int:
    """RUNNING trials left by a killed process on this machine -> FAIL (interrupted), params re-queued.

    A trial is orphaned when its worker or the coordinator that started the worker is gone (the
    worker dies with its coordinator). Trials run from another machine are left alone. `storage`
    is the study's storage, as create_or_load returns it.
    """
    import datetime

    from optuna.trial import TrialState

    host = socket.gethostname()
    now = datetime.datetime.now()
    local = storage_is_local(storage)
    fixed = 0
    with claim_lock(study_dir):  # live workers record their process before they let go of this lock
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            attrs = trial.user_attrs
            if attrs.get("host", host) != host:
                continue
            if "worker_pid" in attrs:
                stale = not (_alive(attrs["worker_pid"], "torchwise.tune.worker")
                             and _alive(attrs.get("coordinator_pid"), None))
            else:  # killed between asking for the trial and recording its process
                age = (now - trial.datetime_start).total_seconds() if trial.datetime_start else math.inf
                stale = local or age > 60
            if stale:
                _mark_interrupted(study, storage, trial, log)
                fixed += 1
    return fixed


def storage_is_local(storage) -> bool:
    """A SQLite file: only processes on this machine can be running its trials."""
    return str(getattr(storage, "url", "")).startswith("sqlite")


def _mark_interrupted(study, storage, trial, log) -> None:
    from optuna.trial import TrialState

    # The trial is another (dead) process's. Optuna's public way to set a trial's user attributes is the
    # Trial object of the process that asked for it, gone with that process; the storage's own API
    # (public on every Optuna storage) sets them by the trial's id, found from the study's name and the
    # trial's number. They go in first: a finished trial's attributes can no longer change.
    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name),
                                                               trial.number)
    storage.set_trial_user_attr(trial_id, "interrupted", True)
    storage.set_trial_user_attr(trial_id, "fail_reason",
                                "interrupted: its process was killed before the trial finished")
    study.tell(trial.number, state=TrialState.FAIL)  # a trial number: any process may finish a RUNNING trial
    if trial.params:
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
    log(f"tune: trial {trial.number} was interrupted (its process is gone); marked failed, parameters queued again")


@contextlib.contextmanager
def claim_lock(study_dir: Path) -> Iterator[None]:
    """Serializes "count the trials, then ask for one" across the workers of this machine, so that
    K workers never start more than N trials in total."""
    path = study_dir / ".claim.lock"
    with open(path, "a+") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; at worst K-1 extra trials
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- sampler and pruner


def make_pruner(name: str, n_trials: int):
    import optuna

    if name == "median":
        # Steps are evaluation indices (1, 2, ...), so trials with other batch sizes line up. At least two
        # complete trials before pruning: a median of one is just the first trial, luck included.
        return optuna.pruners.MedianPruner(n_startup_trials=min(5, max(2, n_trials // 5)), n_warmup_steps=0)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError("Unknown pruner.", values={"pruner": name, "allowed": ", ".join(PRUNERS)},
                      fix="--pruner median (stop trials worse than the median so far), halving "
                          "(successive halving) or none")


def make_sampler(seed: int, n_trials: int, parallel: int):
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(2, min(10, n_trials // 3)),
                                      constant_liar=parallel > 1)
