"""train_run: one run described by a resolved RunConfig, trained, evaluated and reported.

The run directory gets config.yaml, split.json, data_stats.json, meta.json (written once every
check has passed and the checkpoint, on resume, is loaded: before the first training step, so an
interrupted run can still be evaluated), and from the Trainer metrics.csv, tb/, checkpoints/ and
final/; then eval.json and report.html. A refused run changes nothing on disk: every check (the
run directory, the run already there, the settings, the model name, the data) runs first.
One writer per run folder: rank 0 holds the folder's lock (train/state/run_lock.py) from before the
run already there is checked to the end of the run; a second command on the folder is refused.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torchwise.errors import TorchwiseError
from torchwise.run.directory import (check_out_apart_from_data, check_out_dir, check_run_dir, publish,
                                     with_absolute_paths)
from torchwise.run.final_eval import evaluate, write_run_report
from torchwise.run.log_lines import log_data, log_loss, log_result
from torchwise.run.resume import check_same_data, plan_resume, resume_command
from torchwise.run.trainer_setup import make_trainer


def train_run(config, *, log=print, on_trainer=None) -> dict[str, Any]:
    """Train, evaluate and report one run described by a resolved RunConfig; returns a summary.

    `on_trainer(trainer)` is called before training starts (e.g. `torchwise tune` registers its
    evaluation callback there)."""
    from torchwise.train.distributed.process_group import decide_on_main

    if not config.output.dir:
        raise TorchwiseError("No run directory given.", values={"output.dir": None},
                             fix="pass --out RUNDIR (where checkpoints, metrics and the report go)")
    run_dir = Path(config.output.dir)
    # Under torchrun every rank runs this function; rank 0 alone checks, writes and reports, and the
    # others prepare their data after it (so they never read a half-written file).
    dist_env = _join_process_group(config)
    main = dist_env.is_main
    if not main:
        log = lambda *_args, **_kwargs: None  # noqa: E731
    # Rank 0 takes the run folder's lock for the whole run (one writer per run folder), then checks the
    # folder under it; a refusal ends every rank of the group with the same error.
    claim = decide_on_main(lambda: _claim_run_dir(config, run_dir), dist_env)
    try:
        return _train_claimed(config, run_dir, dist_env, log, on_trainer)
    finally:
        if claim is not None:  # also on errors and Ctrl-C (a killed process's lock ends with it)
            claim.release()


def _claim_run_dir(config, run_dir: Path):
    """Rank 0: --out checked, its lock taken, then the run there checked (under the lock, so that a second
    command cannot pass the same check meanwhile). Returns the claim to release."""
    from torchwise.train.state import run_lock

    check_out_apart_from_data(run_dir, config.data.path)
    check_out_dir(run_dir)
    claim = run_lock.claim(run_dir)
    try:
        check_run_dir(run_dir, config.train.resume)
    except BaseException:
        claim.release()
        raise
    return claim


def _train_claimed(config, run_dir: Path, dist_env, log, on_trainer) -> dict[str, Any]:
    """The run once the folder is this command's: settings planned, checked, trained."""
    from torchwise import files
    from torchwise.train.state import checkpoint as ckpt

    main = dist_env.is_main
    if config.train.resume:  # every rank, so that all train with the same settings (only reads files)
        checkpoint = ckpt.find_resume_checkpoint(True, run_dir, warn=None)  # the Trainer warns, once
        config = plan_resume(config, run_dir, checkpoint, log)
    _check_up_front(config)
    # The run's own files are prepared in a private folder and copied into the run directory only once
    # the Trainer has passed its checks too (fit_start): a refused command leaves the run as it was.
    staging = Path(tempfile.mkdtemp(prefix="torchwise-run-")) if main else None
    try:
        return _train_in(config, run_dir, staging, dist_env, log, on_trainer)
    except OSError as exc:  # a write into the run directory failed midway (disk full, file size limit)
        raise files.write_error("A file of the run could not be written or read.", Path(exc.filename or run_dir),
                               exc, "free disk space (or raise the file size limit) and continue the run with "
                               f"torchwise train --out {run_dir} --resume (from its newest checkpoint)") from exc
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _join_process_group(config):
    """The torchrun environment, with the process group joined early (before any file is written)."""
    from torchwise.train.distributed import process_group as distributed

    env = distributed.env_from_torchrun()
    if env.enabled:
        distributed.setup(config.train.device, timeout_s=300.0)
    return env


def _check_up_front(config) -> None:
    """What can be refused before the data are read (a scan of a large folder takes minutes)."""
    from torchwise import models
    from torchwise.data.tasks import is_csv, resolve_model_name
    from torchwise.train.step.precision import choose_device

    d = config.data
    if not d.path:
        raise TorchwiseError("No data given.", values={"data.path": None},
                             fix="pass --data FOLDER (class folders) or --data FILE.csv --target COLUMN")
    if not Path(d.path).exists():
        raise TorchwiseError("The data path does not exist.", values={"data": d.path},
                             fix="pass --data an image folder or a CSV file")
    name = resolve_model_name(config.model.name, "tabular" if is_csv(d.path) else "image")
    models.check_model_name(name)
    if config.model.weights and not config.train.resume and not Path(config.model.weights).is_file():
        raise TorchwiseError("The --weights file does not exist.", values={"weights": config.model.weights},
                             fix="pass the path of a local .safetensors or .pt state dict (nothing is downloaded)")
    choose_device(config.train.device)


def _train_in(config, run_dir: Path, staging: Path | None, dist_env, log, on_trainer) -> dict[str, Any]:
    """The run's stages in their one order: data and run files, model, Trainer, fit, evaluation, report."""
    import torch

    from torchwise.models import build_model
    from torchwise.train.state.reproducibility import seed_everything

    main = dist_env.is_main
    started = time.perf_counter()
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    config = with_absolute_paths(config)
    task, meta = _prepare_data(config, run_dir, staging, dist_env, log)
    # The weights are initialized here, before the Trainer seeds anything: seed now, or the same
    # --seed would give a different model on every run. A resumed run takes its checkpoint's weights,
    # so its starting weights file is not read (it may be gone by now).
    seed_everything(config.train.seed)
    model = build_model(**task.model_kwargs, weights=None if config.train.resume else config.model.weights)
    trainer = make_trainer(config, task, model, run_dir, meta)
    if main:
        trainer.events.on("fit_start", lambda **_: publish(staging, run_dir))
    if on_trainer is not None:
        on_trainer(trainer)
    result, timing = _fit(trainer, config, task)
    evaluation, worst = evaluate(trainer, task, meta, run_dir, config.output.worst_examples, write=main)
    if not main:
        return {"run_dir": str(run_dir), "evaluation": evaluation, "timing": timing, "report": None,
                "final": str(result.final_path)}
    return _finish(config, run_dir, task, result, evaluation, worst, timing, started, log)


def _prepare_data(config, run_dir: Path, staging: Path | None, dist_env, log) -> tuple[Any, dict[str, Any]]:
    """The task (data, split, preprocessing) and its metadata; on rank 0 also the run's own files, staged."""
    from torchwise.data.stats import STATS_FILE
    from torchwise.data.tasks import prepare_task
    from torchwise.train.distributed.process_group import barrier

    main = dist_env.is_main
    if main:
        if (run_dir / STATS_FILE).is_file():  # the cached normalization statistics: not computed again
            shutil.copyfile(run_dir / STATS_FILE, staging / STATS_FILE)
        task = prepare_task(config, staging, progress=_progress_enabled(config.output.progress), log=log)
    barrier(dist_env)
    if not main:
        task = prepare_task(config, None)
    log_data(task, log)
    log_loss(config, task, log)
    meta = {**task.meta(), "data_path": str(Path(config.data.path).resolve())}
    if main:
        _stage_run_files(config, run_dir, staging, meta)
    return task, meta


def _stage_run_files(config, run_dir: Path, staging: Path, meta: dict[str, Any]) -> None:
    """meta.json and config.yaml into the staging folder; a resumed run's data compared with its own."""
    from torchwise.data.tasks import SPLIT_FILE

    (staging / "meta.json").write_text(json.dumps(meta, indent=2))
    # `resume` is what this invocation does, not a property of the run: a saved `resume: true`
    # would make `--config RUN/config.yaml` fail for a new run.
    dataclasses.replace(config, train=dataclasses.replace(config.train, resume=False)).save(staging / "config.yaml")
    if config.train.resume:
        check_same_data(run_dir, {name: json.loads((staging / name).read_text())
                                  for name in (SPLIT_FILE, "meta.json") if (staging / name).is_file()},
                        config.data.path)


def _fit(trainer, config, task):
    """Train; (the Trainer's result, the timing of this session)."""
    # On Ctrl-C the Trainer saves a checkpoint and prints how to resume: the command, not the Python call.
    trainer.interrupt_hint = resume_command(config)
    fit_started = time.perf_counter()
    try:
        result = trainer.fit()
    except KeyboardInterrupt as exc:
        exc.resume_said = True  # type: ignore[attr-defined]  (the CLI then does not say it twice)
        raise
    return result, _timing(result, time.perf_counter() - fit_started, config, task, trainer)


def _earlier_sessions_s(timing: dict[str, Any]) -> float:
    """Seconds trained by the sessions before this one (a resumed run's): its run time counts them too."""
    return max(0.0, timing["train_time_s"] - timing["train_time_this_session_s"])


def _finish(config, run_dir: Path, task, result, evaluation, worst, timing: dict[str, Any], started: float,
            log) -> dict[str, Any]:
    """Rank 0: the report, the run's summary, and the lines that say how it went."""
    report_path = None
    earlier = _earlier_sessions_s(timing)
    if config.output.report:
        timing["run_time_s"] = round(time.perf_counter() - started + earlier, 2)
        report_path = write_run_report(run_dir, config, task, evaluation, worst, timing)
    timing["run_time_s"] = round(time.perf_counter() - started + earlier, 2)
    summary = {"run_dir": str(run_dir), "evaluation": evaluation, "timing": timing,
               "report": str(report_path) if report_path else None, "final": str(result.final_path)}
    log_result(summary, log)
    return summary


def _progress_enabled(setting: Any) -> bool:
    return sys.stderr.isatty() if setting == "auto" else bool(setting)


def _step_of(checkpoint: Path | None) -> int:
    if checkpoint is None:
        return 0
    digits = "".join(ch for ch in Path(checkpoint).name if ch.isdigit())
    return int(digits) if digits else 0


def _timing(result, session_time: float, config, task, trainer) -> dict[str, Any]:
    """The run's timing, all its sessions together (a resumed run continues the clock its checkpoint kept)."""
    import torch

    t = config.train
    steps_now = result.steps - _step_of(result.resumed_from)
    train_time = session_time + trainer.pos.earlier_sessions_s
    # Every batch is full except the last of each epoch, so this overcounts by less than one batch per epoch.
    samples = min(result.steps * t.batch_size * t.accumulate, max(1, result.epochs) * len(task.train))
    return {"train_time_s": round(train_time, 2), "train_time_this_session_s": round(session_time, 2),
            "steps": result.steps, "steps_this_session": steps_now, "epochs": result.epochs,
            "samples_per_s": round(samples / train_time, 1) if train_time > 0 else None,
            "steps_per_s": round(result.steps / train_time, 2) if train_time > 0 else None,
            "stopped_early": result.stopped_early, "skipped_steps": result.skipped_steps,
            "device": str(trainer.device), "threads": torch.get_num_threads()}
