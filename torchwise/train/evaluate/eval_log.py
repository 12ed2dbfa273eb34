"""The Trainer's evaluations during fit(): one metrics row per evaluation (metrics.csv, TensorBoard, the
progress line), the best weights, the plateau schedule and early stopping, all from the one monitor.
`TrainerReporting` is a part of the Trainer (a mixin): its methods are the Trainer's own.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from torchwise.errors import ConfigError, TorchwiseError
from torchwise.train.state import checkpoint as ckpt
from torchwise.train import input_checks as checks_
from torchwise.train.distributed.process_group import sum_across


class TrainerReporting:
    def evaluate_and_log(self, log: Any, progress: Any, start_time: float) -> bool:
        """One evaluation row; True when early stopping says stop."""
        pos = self.pos
        self.events.emit("evaluation_start", trainer=self, step=pos.step)
        with self.ema_weights():  # with an EMA of the weights, the average is what is judged and kept
            row = self.evaluation_row(progress, start_time)
        pos.history.append(row)
        log.row(row)
        progress.epoch_line({k: v for k, v in row.items() if k not in ("grad_norm", "skipped_steps", "samples_per_s")})
        self.events.emit("evaluation_end", trainer=self, step=pos.step, metrics=row)
        monitor = self.judge.name
        if monitor not in row and (self.val_loader is not None or not monitor.startswith("val_")):
            self.save_before_error(progress)
            raise ConfigError("The monitored metric is not among the metrics of this run.",
                              values={"monitor": monitor, "did you mean": checks_.did_you_mean(monitor, row),
                                      "metrics that exist": ", ".join(k for k in row if k.startswith(("val_", "train_")))},
                              fix="Monitor one of the metrics that exist (val_top5 needs more than 5 classes; "
                                  "val_acc needs class logits).")
        value = float(row.get(monitor, math.nan))
        if self.schedule is not None:
            self.schedule.after_evaluation(value)
        if self.best.update(value, pos.step):
            with self.ema_weights():
                self.files.keep_best()
        es = self.config.early_stopping
        if es is not None and es.update(value):
            progress.message(f"torchwise: early stopping at step {pos.step}: {monitor} did not improve for "
                             f"{es.patience} evaluations (best {self.best.value:.4g} at step {self.best.step})")
            return True
        return False

    def evaluation_row(self, progress: Any, start_time: float) -> dict[str, Any]:
        pos = self.pos
        loss_sum, loss_count = sum_across([pos.loss_sum, pos.loss_count], self.dist, self.device)
        row: dict[str, Any] = {"epoch": pos.epoch, "step": pos.step,
                               "train_loss": loss_sum / loss_count if loss_count else math.nan}
        if self.val_loader is not None:
            try:
                row.update(self.evaluator.evaluate(self.guarded(self.val_loader, self.val_data, "val_data"),
                                                   num_batches=self.val_loader.batches_per_epoch()))
            except TorchwiseError:
                self.save_before_error(progress)
                raise
        timing, busy = self.timing, self.timing["data_s"] + self.timing["compute_s"]
        row.update(lr=self.optimizer.param_groups[0]["lr"], grad_norm=pos.last_grad_norm,
                   skipped_steps=pos.skipped, elapsed_s=time.perf_counter() - start_time,
                   # the share of step time spent waiting for data: high means the loader starves the model
                   data_wait=timing["data_s"] / busy if busy else None,
                   samples_per_s=timing["samples"] * self.dist.world_size / busy if busy else None)
        self.timing = dict.fromkeys(timing, 0.0)
        pos.loss_sum, pos.loss_count = 0.0, 0
        return row

    def save_before_error(self, progress: Any) -> None:
        """A mistake found at an evaluation: the steps trained so far are kept (at an epoch's end this
        checkpoint resumes exactly: the resumed run evaluates again first)."""
        out_dir = self.config.out_dir
        if out_dir is None or not self.setup_done or getattr(self, "train_loader", None) is None \
                or self.dist.enabled:  # a rank-local error: a save (collective) would wait for the others
            return
        path = out_dir / "checkpoints" / ckpt.checkpoint_name(self.pos.step)
        if not ckpt.is_complete(path):
            self.files.save_checkpoint()
            progress.message(f"torchwise: the steps trained so far are kept in {path}; fix the error and resume "
                             "with resume=True.")

    def metrics_log(self, resumed: bool):
        """The run's loggers (the `loggers` setting), started; the names are checked on every rank, the
        loggers run on the main one only."""
        from torchwise.train.loggers.choice import check_loggers, choose_loggers
        from torchwise.train.loggers.protocol import RunInfo
        from torchwise.train.evaluate.metrics_log import BASE_COLUMNS, MetricsLog

        cfg = self.config
        check_loggers(cfg.loggers, tensorboard=cfg.tensorboard)
        extra = [f"val_{k}" for k in self.metrics] + (["val_mae"] if cfg.task == "regression" else [])
        run = RunInfo(cfg.out_dir, cfg.to_dict(), resumed=resumed, resume_step=self.pos.step if resumed else None,
                      columns=BASE_COLUMNS + [c for c in extra if c not in BASE_COLUMNS], metadata=dict(cfg.metadata))
        loggers = choose_loggers(cfg.loggers, tensorboard=cfg.tensorboard) if self.dist.is_main else []
        return MetricsLog(loggers, run)

    def start_message(self, resumed_from: Path | None) -> str:
        plan = self.train_loader.plan
        lines = [f"torchwise: device {self.device}, precision {self.precision.name}, {self.determinism_note}"
                 + (f", {self.dist.world_size} processes (DDP)" if self.dist.enabled else ""),
                 f"torchwise: {self.fast_plan.describe()}",
                 f"torchwise: data: batch {plan.batch_size}, workers {plan.num_workers}, pin_memory {plan.pin_memory}"
                 + (f", {plan.note}" if plan.note else "")]
        if resumed_from is not None:
            lines.append(f"torchwise: resumed from {resumed_from} (step {self.pos.step}, epoch {self.pos.epoch}, "
                         f"batch {self.pos.batch_in_epoch})")
        return "\n".join(lines)

    @staticmethod
    def guarded(loader: Any, data: Any, role: str):
        return checks_.DataGuard(loader, data, role).wrap(loader.epoch_iter(0), 0, 0)
