"""The Trainer's evaluations during fit(): one metrics row per evaluation (metrics.csv, TensorBoard, the
progress line), the best weights, the plateau schedule and early stopping, all from the one monitor.
`EvalReporter` is a part the Trainer owns (trainer.reporter): it holds the step timing between two rows
and sees the Trainer only through `ReportView` (the set-up's parts through `RunParts`).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

import torch

from torchwise.errors import ConfigError, TorchwiseError
from torchwise.train.state import checkpoint as ckpt
from torchwise.train import input_checks as checks_
from torchwise.train.distributed.process_group import DistEnv, sum_across
from torchwise.train.evaluate.metrics_log import BASE_COLUMNS, MetricsLog
from torchwise.train.evaluate.monitor import BestMetric, Monitor
from torchwise.train.evaluate.validation import Evaluator, MetricFn
from torchwise.train.events import Events
from torchwise.train.progress import Progress
from torchwise.train.recipes.schedule import Schedule
from torchwise.train.settings import TrainerConfig
from torchwise.train.speed.fast import FastPlan
from torchwise.train.state.loaders import TrainLoader
from torchwise.train.state.loop_state import Position, no_timing
from torchwise.train.state.run_files import RunFiles, WeightAveraging
from torchwise.train.step.precision import Precision


class RunParts(Protocol):
    """What the reports read of the run's set-up (train/setup.py's RunSetup)."""
    done: bool
    device: torch.device | None
    precision: Precision | None
    determinism_note: str
    fast_plan: FastPlan
    optimizer: torch.optim.Optimizer | None
    train_loader: TrainLoader | None
    val_loader: TrainLoader | None
    evaluator: Evaluator | None
    schedule: Schedule | None


class ReportView(Protocol):
    """What EvalReporter reads of the Trainer (all public); the Trainer is also the events' `trainer=`."""
    config: TrainerConfig
    pos: Position
    events: Events
    judge: Monitor
    best: BestMetric
    files: RunFiles
    dist: DistEnv
    metrics: Mapping[str, MetricFn]
    val_data: Any          # whatever data the user gave
    setup: RunParts
    recipes: WeightAveraging


class EvalReporter:
    def __init__(self, run: ReportView):
        self.run = run

    @property
    def timing(self) -> dict[str, float]:
        """Since the last row: seconds waiting for data, seconds in the step, samples trained (the loop's
        position keeps them, so that they go into checkpoints and on across a resume)."""
        return self.run.pos.timing

    def evaluate_and_log(self, log: MetricsLog, progress: Progress, start_time: float) -> bool:
        """One evaluation row; True when early stopping says stop."""
        run, pos = self.run, self.run.pos
        run.events.emit("evaluation_start", trainer=run, step=pos.step)
        with run.recipes.ema_weights():  # with an EMA of the weights, the average is what is judged and kept
            row = self.evaluation_row(progress, start_time)
        pos.history.append(row)
        log.row(row)
        progress.epoch_line({k: v for k, v in row.items() if k not in ("grad_norm", "skipped_steps", "samples_per_s")})
        run.events.emit("evaluation_end", trainer=run, step=pos.step, metrics=row)
        monitor = run.judge.name
        if monitor not in row and (run.setup.val_loader is not None or not monitor.startswith("val_")):
            self.save_before_error(progress)
            raise ConfigError("The monitored metric is not among the metrics of this run.",
                              values={"monitor": monitor, "did you mean": checks_.did_you_mean(monitor, row),
                                      "metrics that exist": ", ".join(k for k in row if k.startswith(("val_", "train_")))},
                              fix="Monitor one of the metrics that exist (val_top5 needs more than 10 classes; "
                                  "val_acc needs class logits).")
        value = float(row.get(monitor, math.nan))
        if run.setup.schedule is not None:
            run.setup.schedule.after_evaluation(value)
        if run.best.update(value, pos.step):
            with run.recipes.ema_weights():
                run.files.keep_best()
        es = run.config.early_stopping
        if es is not None and es.update(value):
            progress.message(f"torchwise: early stopping at step {pos.step}: {monitor} did not improve for "
                             f"{es.patience} evaluations (best {run.best.value:.4g} at step {run.best.step})")
            return True
        return False

    def evaluation_row(self, progress: Progress, start_time: float) -> dict[str, Any]:
        run, parts, pos = self.run, self.run.setup, self.run.pos
        loss_sum, loss_count = sum_across([pos.loss_sum, pos.loss_count], run.dist, parts.device)
        row: dict[str, Any] = {"epoch": pos.epoch, "step": pos.step,
                               "train_loss": loss_sum / loss_count if loss_count else math.nan}
        if parts.val_loader is not None:
            try:
                row.update(parts.evaluator.evaluate(self.guarded(parts.val_loader, run.val_data, "val_data"),
                                                    num_batches=parts.val_loader.batches_per_epoch()))
            except TorchwiseError:
                self.save_before_error(progress)
                raise
        timing, busy = self.timing, self.timing["data_s"] + self.timing["compute_s"]
        # No step trained since the last row (a resume at an epoch's end from before the timing was kept):
        # the share and the speed are unknown, not 1 and 0.
        busy = busy if timing["compute_s"] > 0 else 0.0
        pos.elapsed_s = time.perf_counter() - start_time  # (start_time: the run's start, earlier sessions included)
        row.update(lr=parts.optimizer.param_groups[0]["lr"], grad_norm=pos.last_grad_norm,
                   skipped_steps=pos.skipped, elapsed_s=pos.elapsed_s,
                   # the share of step time spent waiting for data: high means the loader starves the model
                   data_wait=timing["data_s"] / busy if busy else None,
                   samples_per_s=timing["samples"] * run.dist.world_size / busy if busy else None)
        timing.update(no_timing())
        pos.loss_sum, pos.loss_count = 0.0, 0
        return row

    def save_before_error(self, progress: Progress) -> None:
        """A mistake found at an evaluation: the steps trained so far are kept (at an epoch's end this
        checkpoint resumes exactly: the resumed run evaluates again first)."""
        run = self.run
        out_dir = run.config.out_dir
        if out_dir is None or not run.setup.done or run.setup.train_loader is None \
                or run.dist.enabled:  # a rank-local error: a save (collective) would wait for the others
            return
        path = out_dir / "checkpoints" / ckpt.checkpoint_name(run.pos.step)
        if not ckpt.is_complete(path):
            run.files.save_checkpoint()
            progress.message(f"torchwise: the steps trained so far are kept in {path}; fix the error and resume "
                             "with resume=True.")

    def metrics_log(self, resumed: bool) -> MetricsLog:
        """The run's loggers (the `loggers` setting), started; the names are checked on every rank, the
        loggers run on the main one only."""
        from torchwise.train.loggers.choice import check_loggers, choose_loggers
        from torchwise.train.loggers.protocol import RunInfo

        cfg, pos = self.run.config, self.run.pos
        check_loggers(cfg.loggers, tensorboard=cfg.tensorboard)
        extra = [f"val_{k}" for k in self.run.metrics] + (["val_mae"] if cfg.task == "regression" else [])
        info = RunInfo(cfg.out_dir, cfg.to_dict(), resumed=resumed, resume_step=pos.step if resumed else None,
                       resume_rows=list(pos.history) if resumed else None,
                       columns=BASE_COLUMNS + [c for c in extra if c not in BASE_COLUMNS], metadata=dict(cfg.metadata))
        loggers = choose_loggers(cfg.loggers, tensorboard=cfg.tensorboard) if self.run.dist.is_main else []
        return MetricsLog(loggers, info)

    def start_message(self, resumed_from: Path | None) -> str:
        parts, dist, pos = self.run.setup, self.run.dist, self.run.pos
        plan = parts.train_loader.plan
        lines = [f"torchwise: device {parts.device}, precision {parts.precision.name}, {parts.determinism_note}"
                 + (f", {dist.world_size} processes (DDP)" if dist.enabled else ""),
                 f"torchwise: {parts.fast_plan.describe()}",
                 f"torchwise: data: batch {plan.batch_size}, workers {plan.num_workers}, pin_memory {plan.pin_memory}"
                 + (f", {plan.note}" if plan.note else "")]
        if resumed_from is not None:
            lines.append(f"torchwise: resumed from {resumed_from} (step {pos.step}, epoch {pos.epoch}, "
                         f"batch {pos.batch_in_epoch})")
        return "\n".join(lines)

    @staticmethod
    def guarded(loader: TrainLoader, data: Any, role: str) -> Iterator[Any]:
        """The loader's batches (one pass), checked as they come (input_checks.DataGuard)."""
        return checks_.DataGuard(loader, data, role).wrap(loader.epoch_iter(0), 0, 0)
