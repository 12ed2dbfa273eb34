"""`torchwise.tune(...)`: a hyperparameter search where every trial is a real `torchwise train` run.

    result = torchwise.tune("run.yaml", "space.yaml", trials=30, out="runs/search", parallel=2)
    result.best_config_path   # runs/search/best.yaml: ready for `torchwise train --config`

The study directory holds:
    study.db                 the Optuna study (SQLite, unless storage= names another database)
    trials/trial-NNNN/       one run directory per trial (config.yaml, metrics.csv, final/, train.log)
    trials.csv               one row per trial: state, value, parameters, duration, failure reason
    best.yaml                the best trial's full config; output.dir: STUDY_DIR/best-run (a fresh run directory)
    optimization_history.png, param_importances.png, intermediate_values.png
    summary.json

Running the same call again resumes: finished trials are kept, interrupted ones are run again,
and the search stops when the study holds `trials` trials.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

from torchwise.errors import ConfigError, TorchwiseError
from torchwise.tune.results import TuneResult, write_results


def tune(config: Any, space: Any, *, trials: int, out: str | Path | None = None, storage: str | None = None,
         study_name: str | None = None, parallel: int = 1, pruner: str = "median", metric: str = "val_loss",
         direction: str | None = None, seed: int = 0, sets: list[str] | None = None,
         enqueue: list[Mapping[str, Any]] | None = None, max_failures: int = 5, apply: str | Path | None = None,
         log: Callable[[str], None] = print) -> TuneResult:
    """Search `space` around `config`; each trial trains in its own run directory under `out`
    (default: the config's output.dir + "-tune", else ./tune).

    config: a RunConfig, a YAML path or a mapping (sections data/model/train/output).
    space:  a YAML path or a mapping {"train.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}, ...}.
    trials: how many trials the study should hold when done (running it again resumes up to this).
    parallel: trials run at once, each in its own worker process.
    pruner: "median", "halving" (successive halving) or "none"; steps are evaluation indices.
    metric/direction: a validation metric of the run (val_loss, val_acc, val_top5, val_mae, ...).
    enqueue: parameter sets to try first (e.g. your current best guess).
    max_failures: stop when this many trials in a row failed (a broken setup, not a bad trial).
    apply: also copy the best config to this path, ready for `torchwise train --config`.
    """
    import warnings

    from torchwise.tune import study as st
    from torchwise.tune.space import load_space, space_to_dict

    optuna = st.require_optuna()

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = _base_config(config, sets)
    params = load_space(space)
    direction = _check_arguments(trials, parallel, max_failures, pruner, metric, direction)
    # Without `out`: next to the config's run directory (never inside it: it may hold a finished run).
    study_dir = Path(out or (f"{base.output.dir.rstrip('/')}-tune" if base.output.dir else "tune")).resolve()
    study_dir.mkdir(parents=True, exist_ok=True)
    url = st.storage_url(storage, study_dir)
    name = study_name or st.DEFAULT_STUDY
    base_dict = base.to_dict()
    settings = {"space": space_to_dict(params), "metric": metric, "direction": direction, "base_config": base_dict}
    study, study_storage = _open_study(url, name, settings, direction, study_dir, log)
    for item in enqueue or []:
        study.enqueue_trial(_check_enqueued(dict(item), params), skip_if_exists=True)
    st.recover_interrupted(study, study_storage, study_dir, log)
    remaining = max(0, trials - st.counted(study))
    if remaining:
        log(f"tune: {st.counted(study)} of {trials} trials already in the study; running {remaining} more, "
            f"{min(parallel, remaining)} at a time (pruner: {pruner}, {metric} -> {direction[:3]})")
        _run_workers(study, study_storage, study_dir, url, name, trials=trials, parallel=min(parallel, remaining),
                     pruner=pruner, seed=seed + len(study.trials), max_failures=max_failures, log=log)
    else:
        log(f"tune: the study already holds {trials} trials; writing the results")
    return write_results(study, study_dir, url, name, settings, apply=apply, log=log)


def _check_arguments(trials: Any, parallel: Any, max_failures: Any, pruner: str, metric: str,
                     direction: str | None) -> str:
    """The search's own arguments checked before anything is written; the direction the metric is optimized in."""
    from torchwise.tune import study as st

    _check_int("trials", trials, 1)
    _check_int("parallel", parallel, 1)
    _check_int("max_failures", max_failures, 1)
    if pruner not in st.PRUNERS:
        st.make_pruner(pruner, trials)  # raises the error with the allowed names
    return st.direction_for(metric, direction)


def _open_study(url: str, name: str, settings: dict[str, Any], direction: str, study_dir: Path,
                log: Callable[[str], None]):
    """(the study, its storage): a new one, or the one this directory's search started (same settings)."""
    from torchwise.tune import study as st

    new = not _study_exists(url, name)
    if new and any((study_dir / "trials").glob("trial-*")):
        raise TorchwiseError("The study directory already holds trial runs, but the storage has no such study.",
                             values={"out": str(study_dir), "storage": url, "study": name},
                             fix="choose a new --out, or pass the --storage/--study-name this search was started with")
    study, study_storage = st.create_or_load(url, name, settings, direction)
    log(f"tune: study {name!r} in {url} ({'new' if new else 'resumed'}); trial runs under {study_dir / 'trials'}")
    return study, study_storage


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}.", values={name: value}, fix=f"pass e.g. {name}={low}")


def _base_config(config: Any, sets: list[str] | None):
    from torchwise import config as cfg
    from torchwise.run.directory import with_absolute_paths

    if isinstance(config, cfg.RunConfig):
        base = config
    elif isinstance(config, Mapping):
        base = cfg.from_dict(config)
    elif isinstance(config, (str, Path)):
        base = cfg.load_yaml(config)
    elif config is None:
        base = cfg.RunConfig()
    else:
        raise ConfigError("config must be a RunConfig, a YAML path or a mapping.",
                          values={"config": type(config).__name__}, fix="pass e.g. tune('run.yaml', ...)")
    base = cfg.apply_overrides(base, None, sets)
    if not base.data.path:
        raise ConfigError("The run config names no data.", values={"data.path": None},
                          fix="set data.path in the config (or --set data.path=FOLDER_OR_CSV)")
    # Workers and the final `train --config best.yaml` may run from anywhere.
    return with_absolute_paths(base)


def _check_enqueued(item: dict[str, Any], params) -> dict[str, Any]:
    from torchwise.config import coerce_value

    keys = {p.key for p in params}
    for key, value in item.items():
        if key not in keys:
            raise ConfigError("An enqueued trial sets a key that is not in the search space.",
                              values={"key": key, "space keys": ", ".join(sorted(keys))},
                              fix="enqueue only keys of the space (fix the others in the run config)")
        coerce_value(key, value)
    return item


def _study_exists(url: str, name: str) -> bool:
    import optuna

    from torchwise.tune.study import open_storage

    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return False
    return any(s.study_name == name for s in optuna.get_all_study_summaries(storage=open_storage(url)))


def _run_workers(study, study_storage, study_dir: Path, url: str, name: str, *, trials: int, parallel: int,
                 pruner: str, seed: int, max_failures: int, log: Callable[[str], None]) -> None:
    """Start `parallel` worker processes, relay their lines to `log`, wait for all of them."""
    from torchwise.tune import study as st

    threads = max(1, (os.cpu_count() or 1) // parallel) if parallel > 1 else None
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs: list[subprocess.Popen] = []
    relays: list[threading.Thread] = []
    lock = threading.Lock()
    try:
        for index in range(parallel):
            job = {"study_dir": str(study_dir), "storage": url, "study_name": name, "n_trials": trials,
                   "parallel": parallel, "pruner": pruner, "seed": seed + 1000 * index,
                   "max_failures": max_failures, "threads": threads}
            proc = subprocess.Popen([sys.executable, "-m", "torchwise.tune.worker", json.dumps(job)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    cwd=str(study_dir))
            procs.append(proc)
            prefix = f"[w{index}] " if parallel > 1 else ""
            relay = threading.Thread(target=_relay, args=(proc, prefix, log, lock), daemon=True)
            relay.start()
            relays.append(relay)
        codes = [proc.wait() for proc in procs]
    except BaseException:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()
        st.recover_interrupted(study, study_storage, study_dir, log)
        log("tune: search interrupted; run the same command again to resume (finished trials are kept)")
        raise
    finally:
        for relay in relays:
            relay.join(timeout=5)
    st.recover_interrupted(study, study_storage, study_dir, log)  # a worker that crashed hard (segfault, OOM killer) left its trial
    stopped = [c for c in codes if c == 3]
    if stopped:
        from optuna.trial import TrialState

        reasons = [t.user_attrs.get("fail_reason", "?") for t in study.get_trials(states=(TrialState.FAIL,))
                   if not st.is_interrupted(t)][-max_failures:]
        raise TorchwiseError(f"The search stopped: the last {max_failures} trials failed.",
                             values={"reasons": sorted(set(reasons)), "trial runs": str(study_dir / "trials")},
                             fix="read error.txt in the failed trials' run directories; fix the run config or narrow "
                                 "the space, then run the same command again to resume")
    crashed = [c for c in codes if c not in (0, 3)]
    if crashed:
        log(f"tune: {len(crashed)} worker process(es) ended abnormally (exit codes {crashed}); "
            "run the same command again to finish the search")


def _relay(proc: subprocess.Popen, prefix: str, log: Callable[[str], None], lock: threading.Lock) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        with lock:
            log(prefix + line.rstrip("\n"))
