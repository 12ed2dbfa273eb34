"""A search worker: claims trials from the study and runs each as a real `torchwise train` run.

Started by the coordinator (search.py) as `python -m torchwise.tune.worker JSON`, one process per
`--parallel` slot, so that trials are isolated (a crash or an out-of-memory error takes down one
trial, not the search) and SQLite sees ordinary separate clients. A worker dies with its
coordinator, so a killed search leaves no orphans still training.
"""
from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

EXIT_STOPPED_BY_FAILURES = 3


def _die_with_parent() -> None:
    parent = os.getppid()
    try:  # Linux: the kernel delivers SIGKILL to us when the coordinator dies, however it dies
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:  # elsewhere (and as a backstop): notice being re-parented
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="torchwise-parent-watch").start()
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def run_training(config, on_evaluation: Callable[..., Any], log: Callable[[str], None]) -> dict[str, Any]:
    """One `torchwise train` run of `config`, calling on_evaluation(trainer=, step=, metrics=) after
    each validation."""
    from torchwise.run.train_run import train_run

    return train_run(config, log=log, on_trainer=lambda trainer: trainer.on("evaluation_end", on_evaluation))


class _Reporter:
    """The evaluation_end callback of one trial: reports the metric to Optuna, prunes."""

    def __init__(self, trial, metric: str, direction: str):
        self.trial, self.metric, self.direction = trial, metric, direction
        self.values: list[float] = []
        self.pruned_at: int | None = None
        self.missing: list[str] | None = None

    def __call__(self, trainer, step: int, metrics: dict[str, Any]) -> None:
        if self.pruned_at is not None or self.missing is not None:
            return
        if self.metric not in metrics:
            self.missing = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
            trainer.request_stop()
            return
        value = float(metrics[self.metric])
        index = len(self.values) + 1  # evaluation index: comparable across batch sizes and epochs
        self.values.append(value)
        if not math.isfinite(value):
            return
        self.trial.report(value, index)
        self.trial.set_user_attr("last_step", int(step))
        if self.trial.should_prune():
            self.pruned_at = index
            trainer.request_stop()

    def best(self) -> float:
        finite = [v for v in self.values if math.isfinite(v)]
        if not finite:
            return math.nan
        return min(finite) if self.direction == "minimize" else max(finite)


def trial_config(base: dict[str, Any], params: dict[str, Any], run_dir: Path, threads: int | None):
    from torchwise import config as cfg

    config = cfg.apply_overrides(cfg.from_dict(base), params)
    overrides: dict[str, Any] = {"output.dir": str(run_dir), "output.progress": False, "output.report": False,
                                 "train.resume": False}
    if threads and config.train.threads is None:
        overrides["train.threads"] = threads
    return cfg.apply_overrides(config, overrides)


def _describe_error(exc: BaseException) -> str:
    from torchwise.errors import TorchwiseError

    if isinstance(exc, TorchwiseError):  # one line: what, then the values (the fix is in error.txt)
        values = "; ".join(f"{k}: {v}" for k, v in exc.values.items())
        return (f"{type(exc).__name__}: {exc.what}" + (f" ({values})" if values else ""))[:500]
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "out of memory" in str(exc).lower():
        name = f"out of memory ({name})"
    return f"{name}: {text}"[:500]


def claim_trial(study):
    """A new RUNNING trial (a queued one first), marked with the processes that own it."""
    trial = study.ask()
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("worker_pid", os.getpid())
    trial.set_user_attr("coordinator_pid", os.getppid())
    return trial


def run_trial(study, trial, settings: dict[str, Any], study_dir: Path, threads: int | None, say) -> None:
    """Train one claimed trial in STUDY/trials/trial-NNNN/ (its lines in train.log) and tell the study how it went."""
    from torchwise.tune.space import Param

    run_dir = study_dir / "trials" / f"trial-{trial.number:04d}"
    trial.set_user_attr("run_dir", str(run_dir))
    params = {key: Param(key=key, **_spec_fields(spec)).suggest(trial) for key, spec in settings["space"].items()}
    shown = ", ".join(f"{k}={_short(v)}" for k, v in params.items())
    say(f"trial {trial.number}: start  {shown}")
    reporter = _Reporter(trial, settings["metric"], settings["direction"])
    started = time.perf_counter()
    from torchwise import files

    # the trial's run folder: its log opened without following a link (nor written through one out of it)
    log_file = files.open_nofollow(run_dir / "train.log", "w", root=run_dir, newline=None)

    def log(*parts: Any) -> None:
        print(*parts, file=log_file, flush=True)

    error = None
    try:
        config = trial_config(settings["base_config"], params, run_dir, threads)
        summary = run_training(config, reporter, log)
    except Exception as exc:  # noqa: BLE001 - any failure of one trial is recorded and the search goes on
        error = _describe_error(exc)
        files.write_text(run_dir / "error.txt", f"{exc}\n\n{traceback.format_exc()}", root=run_dir)
    finally:
        log_file.close()
    if error is not None:
        _release_memory()  # here, once the exception and the tensors its frames held are gone
        trial.set_user_attr("duration_s", round(time.perf_counter() - started, 2))
        _fail(study, trial, error, say)
        return
    _tell_outcome(study, trial, reporter, summary, config, settings["metric"],
                  round(time.perf_counter() - started, 2), say)


def _tell_outcome(study, trial, reporter: _Reporter, summary: dict[str, Any], config, metric: str, duration: float,
                  say) -> None:
    """A trial whose run ended: complete with its best value, pruned, or failed (no metric, never finite)."""
    from optuna.trial import TrialState

    trial.set_user_attr("duration_s", duration)
    trial.set_user_attr("evaluations", len(reporter.values))
    if reporter.missing is not None:
        _fail(study, trial, f"metric {metric!r} is not among this run's validation metrics "
                            f"({', '.join(reporter.missing)})", say)
        return
    if reporter.pruned_at is not None and _ran_to_the_end(summary, config):
        reporter.pruned_at = None  # flagged at its last evaluation: it saved nothing, the result is real
    if reporter.pruned_at is not None:
        study.tell(trial, state=TrialState.PRUNED)
        say(f"trial {trial.number}: pruned after evaluation {reporter.pruned_at} "
            f"({metric} {reporter.values[-1]:.4g}, {duration:.1f} s)")
        return
    value = reporter.best()
    if not math.isfinite(value):
        _fail(study, trial, f"{metric} was never finite ({reporter.values[-3:]})" if reporter.values else
              f"no validation ran, so there is no {metric} (is there validation data?)", say)
        return
    study.tell(trial, value)
    say(f"trial {trial.number}: done   {metric} {value:.4g} ({len(reporter.values)} evaluations, {duration:.1f} s)")


def _fail(study, trial, reason: str, say) -> None:
    from optuna.trial import TrialState

    trial.set_user_attr("fail_reason", reason)
    study.tell(trial, state=TrialState.FAIL)
    say(f"trial {trial.number}: FAILED {reason}")


def _ran_to_the_end(summary: dict[str, Any], config) -> bool:
    timing = summary.get("timing") or {}
    steps, epochs = timing.get("steps"), timing.get("epochs")
    if config.train.max_steps is not None and steps is not None and steps >= config.train.max_steps:
        return True
    return epochs is not None and epochs >= config.train.epochs


def _release_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort after a failed trial
        pass


def _spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    fields = {"kind": spec["type"]}
    if spec["type"] == "categorical":
        fields["choices"] = tuple(spec["choices"])
    else:
        fields.update(low=spec["low"], high=spec["high"], step=spec.get("step"), log=bool(spec.get("log", False)))
    return fields


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str]) -> int:
    import warnings

    import optuna

    from torchwise.tune import study as st

    job = json.loads(argv[0])
    _die_with_parent()
    # Ctrl-C reaches the whole process group; the coordinator alone handles it (it ends the workers
    # and marks their trials interrupted), so a worker does not print a traceback per trial.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study_dir = Path(job["study_dir"])
    study = optuna.load_study(study_name=job["study_name"], storage=st.open_storage(job["storage"]),
                              sampler=st.make_sampler(job["seed"], job["n_trials"], job["parallel"]),
                              pruner=st.make_pruner(job["pruner"], job["n_trials"]))
    settings = study.user_attrs["settings"]

    def say(text: str) -> None:
        print(text, flush=True)

    while True:
        with st.claim_lock(study_dir):
            if st.counted(study) >= job["n_trials"]:
                return 0
            if st.failures_in_a_row(study) >= job["max_failures"]:
                say(f"stopping: the last {job['max_failures']} trials failed")
                return EXIT_STOPPED_BY_FAILURES
            # Asked under the lock: the new RUNNING trial is counted before another worker looks.
            trial = claim_trial(study)
        run_trial(study, trial, settings, study_dir, job.get("threads"), say)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
