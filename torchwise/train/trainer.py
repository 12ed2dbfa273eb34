"""The Trainer: the seed articles' whole training loop, done right, with exact resume.

The loop itself is `fit()`; one optimizer step is `StepRunner.run` (step.py); validation is
`Evaluator` (evaluation.py); checkpoints are checkpoint.py. This module wires them together and
keeps the bookkeeping that a resumed run needs (step, epoch, position in the epoch, best metric).
"""
from __future__ import annotations

import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from torchwise.errors import ConfigError, TorchwiseError, TrainingStopped
from torchwise.train import checkpoint as ckpt
from torchwise.train import distributed, shape_watch
from torchwise.train.batches import batch_size_of, move_to, split_batch
from torchwise.train.distributed import DistEnv, barrier, gather_objects, sum_across
from torchwise.train.early_stop import EarlyStopping
from torchwise.train.evaluation import Evaluator, MetricFn
from torchwise.train.events import Events, Handle
from torchwise.train.fast import (FastPlan, apply_to_model, compile_model, device_step_blocker, is_compile_failure,
                                  plan_fast, to_channels_last)
from torchwise.train import input_checks as checks_
from torchwise.train.interrupt import InterruptGuard
from torchwise.train.precision import PRECISIONS, choose_device, choose_precision
from torchwise.train.prefetch import Prefetcher, prefetch_allowed
from torchwise.train.progress import Progress
from torchwise.train.process_switches import ProcessSwitches
from torchwise.train.reproducibility import configure_determinism, derive_seed, seed_everything
from torchwise.train.run_files import RunFiles
from torchwise.train.schedule import build_schedule
from torchwise.train.sharding import is_sharded
from torchwise.train.step import StepRunner


TASKS = ("classification", "regression")


@dataclass
class FitResult:
    history: list[dict[str, Any]]      # one entry per evaluation (the rows of metrics.csv)
    best_metric: float | None
    best_step: int | None
    monitor: str
    steps: int                         # optimizer steps attempted (skipped ones included)
    epochs: int                        # completed epochs
    skipped_steps: int
    stopped_early: bool
    final_path: Path | None
    resumed_from: Path | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)  # torchwise check's findings on this run


@dataclass
class _Position:
    """Where the run is; everything here goes into every checkpoint."""
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    skipped: int = 0
    consecutive_skipped: int = 0
    loss_sum: float = 0.0          # train loss since the last evaluation
    loss_count: int = 0
    best_value: float = math.nan
    best_step: int = -1
    last_grad_norm: float | None = None  # logged every log_every steps, shown in each metrics row
    history: list = field(default_factory=list)


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        loss: Callable[..., torch.Tensor] | None = None,
        train_data: Any = None,
        val_data: Any = None,
        *,
        task: str = "classification",
        max_epochs: int = 1,
        max_steps: int | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        accumulate: int = 1,
        clip_grad_norm: float | None = None,
        precision: str = "auto",
        device: str | torch.device = "auto",
        seed: int = 0,
        deterministic: bool | None = None,
        out_dir: str | Path | None = None,
        checkpoint_every: int | None = None,
        keep_last: int = 2,
        resume: bool | str | Path = False,
        progress: bool | str = "auto",
        scheduler: Any = None,
        scheduler_interval: str | None = None,
        warmup_steps: int = 0,
        eval_every: int | None = None,
        early_stopping: EarlyStopping | None = None,
        monitor: str | None = None,    # None: the EarlyStopping's, else "val_loss"
        mode: str | None = None,       # None: the EarlyStopping's, else from the metric's name (loss: min, acc: max)
        metrics: Mapping[str, MetricFn] | Iterable[MetricFn] | None = None,
        num_workers: int | str = "auto",
        max_consecutive_skips: int = 10,
        log_every: int = 10,
        tensorboard: bool = True,
        dist_timeout_s: float = 300.0,
        strategy: str = "auto",
        on_oom: str = "raise",
        checks: bool = True,
        profile: bool | int = False,
        fast: str | Iterable[str] = "auto",
        compile_options: Mapping[str, Any] | None = None,
        batch_augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
        batch_eval: Callable[[torch.Tensor], torch.Tensor] | None = None,
        config: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        _require(isinstance(model, nn.Module), "model must be a torch.nn.Module.", {"model": type(model).__name__},
                 "Pass the network itself, e.g. Trainer(model=MyNet(), ...).")
        checks_.check_model(model)
        train_data = checks_.as_data(train_data, "train_data")
        val_data = checks_.as_data(val_data, "val_data", required=False)
        _require(task in TASKS, "Unknown task.", {"task": task, "allowed": ", ".join(TASKS),
                                                  "did you mean": checks_.did_you_mean(str(task).lower(), TASKS)},
                 "Pick one of the allowed.")
        checks_.check_optimizer_arg(optimizer, model)
        for name, value, low in (("max_epochs", max_epochs, 1), ("batch_size", batch_size, 1),
                                 ("accumulate", accumulate, 1), ("keep_last", keep_last, 1),
                                 ("max_consecutive_skips", max_consecutive_skips, 1), ("log_every", log_every, 1),
                                 ("warmup_steps", warmup_steps, 0), ("seed", seed, 0)):
            _require(checks_.is_int(value) and value >= low, f"{name} must be an integer >= {low}.",
                     {name: value}, f"Pass e.g. {name}={max(low, 1)}.")
        for name, value in (("max_steps", max_steps), ("checkpoint_every", checkpoint_every), ("eval_every", eval_every)):
            _require(value is None or (checks_.is_int(value) and value >= 1), f"{name} must be None or an integer >= 1.",
                     {name: value}, f"Pass {name}=None or a positive number of optimizer steps.")
        _require(precision in PRECISIONS, "Unknown precision.",
                 {"precision": precision, "allowed": ", ".join(PRECISIONS),
                  "did you mean": checks_.did_you_mean(str(precision), PRECISIONS)},
                 "Use one of the allowed values ('auto' picks the best for the device).")
        _require(isinstance(device, (str, torch.device)), "device must be a string or a torch.device.",
                 {"device": repr(device)}, "Pass device='auto', 'cpu', 'cuda' or 'cuda:1'.")
        _require(out_dir is None or isinstance(out_dir, (str, Path)), "out_dir must be a folder path.",
                 {"out_dir": repr(out_dir)[:100]}, "Pass out_dir='runs/my-run' (or None to write nothing).")
        _require(isinstance(resume, (bool, str, Path)), "resume must be True, False or a checkpoint path.",
                 {"resume": repr(resume)[:100]}, "Pass resume=True to continue the run in out_dir.")
        _require(progress in ("auto", True, False), "progress must be 'auto', True or False.", {"progress": progress},
                 "'auto' shows a bar on a terminal and one line per epoch elsewhere.")
        _require(num_workers in ("auto", "tune") or (checks_.is_int(num_workers) and num_workers >= 0),
                 "num_workers must be 'auto', 'tune' or an integer >= 0.", {"num_workers": num_workers},
                 "Pass num_workers='auto' (0 on the CPU) or e.g. num_workers=4.")
        _require(early_stopping is None or isinstance(early_stopping, EarlyStopping),
                 "early_stopping must be a torchwise.EarlyStopping or None.",
                 {"early_stopping": repr(early_stopping)[:100]},
                 "Pass early_stopping=torchwise.EarlyStopping(patience=5).")
        for name, value in (("config", config), ("metadata", metadata), ("compile_options", compile_options)):
            _require(value is None or isinstance(value, Mapping), f"{name} must be a dict or None.",
                     {name: type(value).__name__}, f"Pass {name}={{...}} or leave it out.")
        _require(eval_batch_size is None or (type(eval_batch_size) is int and eval_batch_size >= 1),
                 "eval_batch_size must be None or an integer >= 1.", {"eval_batch_size": eval_batch_size},
                 "Pass e.g. eval_batch_size=256 (validation keeps no gradients, so it fits larger batches), "
                 "or None to validate with batch_size.")
        _require(clip_grad_norm is None or (isinstance(clip_grad_norm, (int, float)) and clip_grad_norm > 0),
                 "clip_grad_norm must be None or a positive number.", {"clip_grad_norm": clip_grad_norm},
                 "A typical value is 1.0.")
        _require(deterministic in (None, True, False), "deterministic must be None, True or False.",
                 {"deterministic": deterministic},
                 "True: reproducible kernels; False: fast ones; None (default): as this process already has it.")
        _require(loss is None or callable(loss), "loss must be callable(output, target) -> tensor.",
                 {"loss": type(loss).__name__}, "Pass e.g. nn.CrossEntropyLoss() or F.mse_loss.")
        self.model = model
        self.task = task
        self.loss_fn = loss if loss is not None else (nn.CrossEntropyLoss() if task == "classification" else _mse)
        self._optimizer_arg = optimizer
        self.train_data, self.val_data = train_data, val_data
        self.max_epochs, self.max_steps = max_epochs, max_steps
        self.batch_size, self.accumulate, self.clip_grad_norm = batch_size, accumulate, clip_grad_norm
        self.eval_batch_size = eval_batch_size  # validate/evaluate/predict; None: batch_size
        self.precision_arg, self.device_arg = precision, device
        self.seed, self.deterministic = seed, deterministic
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.checkpoint_every, self.keep_last, self.resume = checkpoint_every, keep_last, resume
        self.progress_mode = progress
        self.scheduler_spec, self.scheduler_interval, self.warmup_steps = scheduler, scheduler_interval, warmup_steps
        self.eval_every = eval_every
        self.early_stopping = early_stopping
        self.metrics = checks_.check_metrics(metrics)
        if early_stopping is not None:
            _require(val_data is not None or (early_stopping.monitor or monitor or "val_loss") == "train_loss",
                     "Early stopping needs validation data.",
                     {"monitor": early_stopping.monitor or monitor or "val_loss", "val_data": None},
                     "Pass val_data=..., or drop early_stopping.")
        # One monitored metric for the best weights, early stopping and the plateau schedule
        self.monitor, self.mode = checks_.resolve_monitor(monitor, mode, early_stopping, task, self.metrics,
                                                          has_val=val_data is not None)
        if early_stopping is not None:
            early_stopping.monitor, early_stopping.mode = self.monitor, self.mode
        self._interrupt = InterruptGuard(enabled=False)
        self.interrupt_hint: str | None = None  # printed on Ctrl-C instead of the Python resume hint (the CLI's)
        self.interrupted_checkpoint: Path | None = None  # the checkpoint written when fit() was interrupted
        self.num_workers = num_workers
        self.max_consecutive_skips, self.log_every, self.tensorboard = max_consecutive_skips, log_every, tensorboard
        self.dist_timeout_s = dist_timeout_s
        _require(strategy in distributed.STRATEGIES, "Unknown strategy.",
                 {"strategy": strategy, "allowed": ", ".join(distributed.STRATEGIES)},
                 "'ddp' replicates the model on every rank; 'fsdp' shards it (for models too big for one device).")
        _require(strategy != "fsdp" or not isinstance(optimizer, torch.optim.Optimizer),
                 "With strategy='fsdp' the optimizer must be built after the model is sharded.",
                 {"optimizer": type(optimizer).__name__},
                 "Pass a factory: optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3).")
        self.strategy = strategy
        _require(on_oom in ("raise", "adapt"), "on_oom must be 'raise' or 'adapt'.", {"on_oom": on_oom},
                 "'adapt' halves the micro-batch and doubles accumulation on out-of-memory (same results); "
                 "'raise' stops with the remedies.")
        self.on_oom = on_oom
        self.checks = checks
        _require(isinstance(profile, (bool, int)) and profile >= 0, "profile must be False, True or a number of steps.",
                 {"profile": profile}, "Pass profile=True (5 steps after a warm-up) or e.g. profile=10.")
        self.profile_steps = 5 if profile is True else int(profile)
        self.fast, self.compile_options = fast, dict(compile_options or {})
        for name, fn in (("batch_augment", batch_augment), ("batch_eval", batch_eval)):
            _require(fn is None or callable(fn), f"{name} must be a callable.", {name: type(fn).__name__},
                     "Pass e.g. torchwise.data.device_augment.BatchAugment(size=32) (and BatchEval for batch_eval).")
        # Augmentation of whole batches on the device, after the copy (torchwise.data.device_augment)
        self.batch_augment, self.batch_eval = batch_augment, batch_eval
        self.fast_plan = FastPlan()  # the real plan is made in fit(), once the device is known
        self.profiler = None
        self.watcher = None
        self.dist = DistEnv()
        self.config = dict(config or {})
        self.metadata = dict(metadata or {})
        self.events = Events()
        self.pos = _Position()
        self._setup_done = False
        self.files = RunFiles(self)  # checkpoints, best and final weights
        self._stop_requested = False
        self._timing = {"data_s": 0.0, "compute_s": 0.0, "samples": 0.0}
        self._shape_watch: shape_watch.ShapeWatch | None = None
        self.cudnn_benchmark_off: str | None = None  # why the run switched cudnn.benchmark off, if it did

    # ------------------------------------------------------------------ public API
    def on(self, event: str, fn: Callable[..., Any]) -> Handle:
        """Call `fn(**payload)` at `event`; returns a handle whose .remove() unregisters it."""
        return self.events.on(event, fn)

    def lr_find(self, **kwargs: Any):
        """Learning-rate sweep with this Trainer's model, optimizer, data and precision; restores everything
        afterwards. See torchwise.diagnose.lr_find.run_lr_find for the options and the result."""
        from torchwise.diagnose.lr_find import run_lr_find

        return run_lr_find(self, **kwargs)

    def request_stop(self) -> None:
        """Ask fit() to stop after the current step (from a callback)."""
        self._stop_requested = True

    def fit(self) -> FitResult:
        """Train; the process-wide torch switches the run turns are put back when it returns or raises."""
        switches = ProcessSwitches.capture()
        self._interrupt = InterruptGuard(enabled=not distributed.env_from_torchrun().enabled)
        try:
            with self._interrupt:
                return self._fit()
        except KeyboardInterrupt:
            if not self._interrupt.handled:  # stopped at once: no checkpoint of this moment
                self._say_interrupted(None)
            raise
        finally:
            switches.restore()

    def _fit(self) -> FitResult:
        resumed_from = self._setup()
        pos = self.pos
        progress = Progress(self.progress_mode if self.dist.is_main else False, self._total_steps)
        log = self._metrics_log(resumed_from is not None)
        progress.message(self._start_message(resumed_from))
        progress.start(pos.step)
        self.events.emit("fit_start", trainer=self)
        if self.profile_steps and self.dist.is_main:
            from torchwise.train.profiling import StepProfiler

            self.profiler = StepProfiler(self.profile_steps, self.device, self.out_dir)
        start_time = time.perf_counter()
        stopped_early = False
        self._interrupt.deferring = self._interrupt.active
        try:
            while not self._finished():
                self._safe_point()
                self.events.emit("epoch_start", trainer=self, epoch=pos.epoch)
                batches = self._epoch_batches(pos.epoch, pos.batch_in_epoch)
                while not self._finished(within_epoch=True):
                    self._safe_point()  # between optimizer steps: where a checkpoint is whole
                    micro = self._next_micro_batches(batches)
                    if not micro:
                        break
                    self._one_step(micro, progress, log)
                    if self.eval_every and pos.step % self.eval_every == 0:
                        stopped_early |= self._evaluate_and_log(log, progress, start_time)
                    if self.checkpoint_every and pos.step % self.checkpoint_every == 0:
                        self.files.save_checkpoint()
                    if stopped_early or self._stop_requested:
                        break
                if pos.batch_in_epoch >= self.train_loader.batches_per_epoch():
                    stopped_early |= self._end_epoch(log, progress, start_time)
                if stopped_early or self._stop_requested:
                    break
            self._safe_point()
            if self.val_data is not None and (not pos.history or pos.history[-1]["step"] != pos.step):
                self._evaluate_and_log(log, progress, start_time)  # the final weights are always evaluated
        except BaseException:
            if self.watcher is not None:  # its patches (DataLoader.__iter__) must not outlive the run
                self.watcher.detach()
            raise
        finally:
            if self.profiler is not None:
                self.profiler.close()
            progress.close()
            log.close()
        final_path = self.files.finish()
        self._interrupt.deferring = False
        if self._interrupt.pending:  # Ctrl-C during the final evaluation or while the final weights were written
            self._interrupt.handled = True
            if self.watcher is not None:
                self.watcher.detach()
            if self.dist.is_main:
                print(f"torchwise: interrupted after training finished (step {pos.step}); the final weights are "
                      + (f"in {final_path}" if final_path else "in the model (no out_dir)"), file=sys.stderr, flush=True)
            raise KeyboardInterrupt
        findings = self._report_findings(progress)
        barrier(self.dist)
        result = FitResult(
            history=list(pos.history), best_metric=None if math.isnan(pos.best_value) else pos.best_value,
            best_step=None if pos.best_step < 0 else pos.best_step, monitor=self.monitor, steps=pos.step,
            epochs=pos.epoch, skipped_steps=pos.skipped, stopped_early=stopped_early, final_path=final_path,
            resumed_from=resumed_from, findings=findings)
        self.events.emit("fit_end", trainer=self, result=result)
        return result

    def evaluate(self, data: Any = None) -> dict[str, float]:
        """Metrics on `data` (default: val_data), in eval mode under inference_mode."""
        self._setup_basics()
        data = self.val_data if data is None else checks_.as_data(data, "data")
        loader = self._eval_loader(data)
        return self.evaluator.evaluate(self._guarded(loader, data, "data"), num_batches=loader.batches_per_epoch())

    def predict(self, data: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Model outputs and targets for `data`, concatenated on the CPU, in data order."""
        self._setup_basics()
        data = self.val_data if data is None else checks_.as_data(data, "data")
        loader = self._eval_loader(data)
        outs, targets, _, _ = self.evaluator.outputs(self._guarded(loader, data, "data"), loader.batches_per_epoch())
        output = torch.cat(outs) if outs else torch.empty(0)
        target = torch.cat(targets) if targets and all(isinstance(t, torch.Tensor) for t in targets) else None
        if self.dist.enabled:  # rank r holds samples r, r + world, ...: interleave them back into data order
            parts = gather_objects((output, target), self.dist)
            output = _interleave([p[0] for p in parts])
            target = None if any(p[1] is None for p in parts) else _interleave([p[1] for p in parts])
        return output, target

    # ------------------------------------------------------------------ the loop's pieces
    def _epoch_batches(self, epoch: int, start_batch: int) -> Iterator[tuple[tuple[Any, ...], Any, int]]:
        """The epoch's batches from start_batch on, on the device, as (inputs, target, size)."""
        guard = checks_.DataGuard(self.train_loader, self.train_data, "train_data")
        raw = zip(itertools.count(start_batch), guard.wrap(self.train_loader.epoch_iter(epoch, start_batch), epoch,
                                                           start_batch))

        def prepare(item: tuple[int, Any]) -> tuple[tuple[Any, ...], Any, int]:
            return self._prepare_batch(item[1], epoch, item[0])

        if "prefetch" in self.fast_plan.on:  # the copy (and a batch_augment) overlap the step before
            return Prefetcher(raw, self.device, prepare)
        return map(prepare, raw)

    def _prepare_batch(self, batch: Any, epoch: int, index: int) -> tuple[tuple[Any, ...], Any, int]:
        inputs, target = split_batch(move_to(batch, self.device, self.device.type == "cuda"))
        if self.batch_augment is not None:
            # Seeded from (seed, rank, epoch, batch): a resumed run draws the same crops and flips.
            self._augment_gen.manual_seed(derive_seed(self.seed, self.dist.rank, epoch, index, 0xA6))
            inputs = (_apply_batch_fn(self.batch_augment, inputs[0], "batch_augment", self._augment_gen),
                      *inputs[1:])
        if "channels_last" in self.fast_plan.on:
            inputs = to_channels_last(inputs)
        return inputs, target, batch_size_of(target)

    def _next_micro_batches(self, batches: Iterator[Any]) -> list[tuple[tuple[Any, ...], Any, int]]:
        micro = []
        start = time.perf_counter()
        at = self.pos.batch_in_epoch
        for _ in range(self.accumulate):
            try:
                micro.append(next(batches))
            except StopIteration:
                break
            except Exception:
                if self._interrupt.pending:  # e.g. the loader's workers got the Ctrl-C too and died
                    self.pos.batch_in_epoch = at  # nothing of this step has happened: the last safe point
                    self._stop_for_interrupt()
                raise
            self.pos.batch_in_epoch += 1
        self._timing["data_s"] += time.perf_counter() - start
        return micro

    def _one_step(self, micro: list, progress: Progress, log: Any) -> None:
        pos = self.pos
        measure_norm = (pos.step + 1) % self.log_every == 0
        if self._shape_watch is not None:
            self._watch_shapes(micro, progress)
        start = time.perf_counter()
        # loss.item() inside: the device is done when this returns
        result = self._step_with_compile_fallback(micro, measure_norm, progress)
        self._timing["compute_s"] += time.perf_counter() - start
        self._timing["samples"] += result.samples
        if self.profiler is not None and self.profiler.step():
            where = f" (trace: {self.profiler.trace})" if self.profiler.trace else ""
            progress.message(f"torchwise: profile of {self.profile_steps} steps after warm-up{where}\n"
                             f"{self.profiler.table}")
            self.profiler = None
        pos.step += 1
        self._step_core.watcher.end_step(stepped=result.skipped is None, nonfinite_loss=result.loss_not_finite,
                                         loss=result.loss)
        lr = self.optimizer.param_groups[0]["lr"]
        if result.skipped:
            pos.skipped += 1
            pos.consecutive_skipped += 1
            progress.message(f"torchwise: step {pos.step}: {result.skipped}; optimizer step skipped "
                             f"({pos.skipped} skipped so far)")
            if pos.consecutive_skipped >= self.max_consecutive_skips:
                raise TrainingStopped(
                    f"Training stopped: {pos.consecutive_skipped} optimizer steps in a row were skipped.",
                    values={"step": pos.step, "last reason": result.skipped, "learning rate": lr,
                            "last checkpoint": self.files.latest_checkpoint_name()},
                    fix="Lower the learning rate (try 10x lower), set clip_grad_norm=1.0, check the inputs for "
                        "nan/inf, or use precision='bf16'/'fp32' instead of fp16. `torchwise check` finds the "
                        "first layer whose output goes non-finite.")
        else:
            pos.consecutive_skipped = 0
            pos.loss_sum += result.loss * result.samples
            pos.loss_count += result.samples
            if self.schedule is not None:
                self.schedule.after_optimizer_step()  # never after a skipped step
        progress.step(result.loss, lr)
        if measure_norm:
            scalars = {"loss": result.loss, "lr": lr}
            if result.grad_norm is not None:
                scalars["grad_norm"] = result.grad_norm
                pos.last_grad_norm = result.grad_norm
            log.scalars(pos.step, scalars, "train")
        elif result.grad_norm is not None:
            pos.last_grad_norm = result.grad_norm
        self.events.emit("step_end", trainer=self, step=pos.step, loss=result.loss, lr=lr,
                         grad_norm=result.grad_norm, skipped=result.skipped)

    @staticmethod
    def _guarded(loader: Any, data: Any, role: str) -> Iterator[Any]:
        return checks_.DataGuard(loader, data, role).wrap(loader.epoch_iter(0), 0, 0)

    def _save_before_error(self, progress: Progress) -> None:
        """A mistake found at an evaluation: the steps trained so far are kept (at an epoch's end this
        checkpoint resumes exactly: the resumed run evaluates again first)."""
        if self.out_dir is None or not self._setup_done or getattr(self, "train_loader", None) is None \
                or self.dist.enabled:  # a rank-local error: a save (collective) would wait for the others
            return
        path = self.out_dir / "checkpoints" / ckpt.checkpoint_name(self.pos.step)
        if not ckpt.is_complete(path):
            self.files.save_checkpoint()
            progress.message(f"torchwise: the steps trained so far are kept in {path}; fix the error and resume "
                             "with resume=True.")

    def _safe_point(self) -> None:
        """Between optimizer steps, after the step's evaluation and checkpoint: the state a checkpoint
        taken now holds is exactly the state a resumed run continues from."""
        if self._interrupt.pending:
            self._stop_for_interrupt()

    def _stop_for_interrupt(self) -> None:
        path = None
        if self.out_dir is not None:
            path = self.out_dir / "checkpoints" / ckpt.checkpoint_name(self.pos.step)
            if not ckpt.is_complete(path):  # not saved at this step already (checkpoint_every, epoch end)
                print(f"torchwise: saving a checkpoint at step {self.pos.step} ...", file=sys.stderr, flush=True)
                self.files.save_checkpoint()
        self.interrupted_checkpoint = path
        self._say_interrupted(path)
        self._interrupt.deferring = False
        raise KeyboardInterrupt

    def _say_interrupted(self, path: Path | None) -> None:
        self._interrupt.handled = True
        if not self.dist.is_main:
            return
        step = self.pos.step
        if path is not None:
            hint = self.interrupt_hint or (f"Trainer(..., out_dir={str(self.out_dir)!r}, resume=True).fit() with the "
                                           "same arguments continues exactly where it stopped")
            print(f"torchwise: interrupted at step {step}; checkpoint saved: {path}\n"
                  f"torchwise: to resume: {hint}", file=sys.stderr, flush=True)
        elif self.out_dir is None:
            print(f"torchwise: interrupted at step {step}; nothing was saved (no out_dir). Pass out_dir=... to make "
                  "an interrupted run resumable.", file=sys.stderr, flush=True)
        else:
            latest = ckpt.list_checkpoints(self.out_dir / "checkpoints")
            where = f"the latest complete checkpoint is {latest[-1]}" if latest else "no checkpoint was written yet"
            hint = self.interrupt_hint or f"Trainer(..., out_dir={str(self.out_dir)!r}, resume=True).fit()"
            print(f"torchwise: interrupted at step {step} before a checkpoint of it could be written; {where}"
                  + (f"\ntorchwise: to resume from it: {hint}" if latest else ""), file=sys.stderr, flush=True)

    def _watch_shapes(self, micro: list, progress: Progress) -> None:
        for inputs, _, _ in micro:
            why = self._shape_watch.see(inputs)
            if why:
                torch.backends.cudnn.benchmark = False  # fit() restores the process' own setting on return
                self._shape_watch, self.cudnn_benchmark_off = None, why
                progress.message(f"torchwise: {why}.")
                return

    def _end_epoch(self, log: Any, progress: Progress, start_time: float) -> bool:
        stop = False
        if not self.eval_every:
            stop = self._evaluate_and_log(log, progress, start_time)
        if self.schedule is not None:
            self.schedule.after_epoch()
        self.events.emit("epoch_end", trainer=self, epoch=self.pos.epoch)
        self.pos.epoch += 1
        self.pos.batch_in_epoch = 0
        if self.out_dir is not None and not self.checkpoint_every:
            self.files.save_checkpoint()
        return stop

    def _evaluate_and_log(self, log: Any, progress: Progress, start_time: float) -> bool:
        pos = self.pos
        loss_sum, loss_count = sum_across([pos.loss_sum, pos.loss_count], self.dist, self.device)
        row: dict[str, Any] = {"epoch": pos.epoch, "step": pos.step,
                               "train_loss": loss_sum / loss_count if loss_count else math.nan}
        if self.val_loader is not None:
            try:
                row.update(self.evaluator.evaluate(self._guarded(self.val_loader, self.val_data, "val_data"),
                                                   num_batches=self.val_loader.batches_per_epoch()))
            except TorchwiseError:
                self._save_before_error(progress)
                raise
        timing, busy = self._timing, self._timing["data_s"] + self._timing["compute_s"]
        row.update(lr=self.optimizer.param_groups[0]["lr"], grad_norm=pos.last_grad_norm,
                   skipped_steps=pos.skipped, elapsed_s=time.perf_counter() - start_time,
                   # the share of step time spent waiting for data: high means the loader starves the model
                   data_wait=timing["data_s"] / busy if busy else None,
                   samples_per_s=timing["samples"] * self.dist.world_size / busy if busy else None)
        self._timing = dict.fromkeys(timing, 0.0)
        pos.loss_sum, pos.loss_count = 0.0, 0
        pos.history.append(row)
        log.row(row)
        progress.epoch_line({k: v for k, v in row.items() if k not in ("grad_norm", "skipped_steps", "samples_per_s")})
        self.events.emit("evaluation_end", trainer=self, step=pos.step, metrics=row)
        if self.monitor not in row and (self.val_loader is not None or not self.monitor.startswith("val_")):
            self._save_before_error(progress)
            raise ConfigError("The monitored metric is not among the metrics of this run.",
                              values={"monitor": self.monitor,
                                      "did you mean": checks_.did_you_mean(self.monitor, row),
                                      "metrics that exist": ", ".join(k for k in row if k.startswith(("val_", "train_")))},
                              fix="Monitor one of the metrics that exist (val_top5 needs more than 5 classes; "
                                  "val_acc needs class logits).")
        value = float(row.get(self.monitor, math.nan))
        if self.schedule is not None:
            self.schedule.after_evaluation(value)
        if self._improved(value):
            pos.best_value, pos.best_step = value, pos.step
            self.files.keep_best()
        if self.early_stopping is not None and self.early_stopping.update(value):
            progress.message(f"torchwise: early stopping at step {pos.step}: {self.monitor} did not improve for "
                             f"{self.early_stopping.patience} evaluations (best {pos.best_value:.4g} at step "
                             f"{pos.best_step})")
            return True
        return False

    def _improved(self, value: float) -> bool:
        if math.isnan(value):
            return False
        best = self.pos.best_value
        return math.isnan(best) or (value < best if self.mode == "min" else value > best)

    def _finished(self, within_epoch: bool = False) -> bool:
        if self.max_steps is not None and self.pos.step >= self.max_steps:
            return True
        if within_epoch:
            return False
        return self.pos.epoch >= self.max_epochs

    # ------------------------------------------------------------------ set-up
    def _setup_basics(self) -> None:
        """Device, precision, evaluator: enough for evaluate()/predict() without fit()."""
        if getattr(self, "evaluator", None) is not None:
            return
        self.device = choose_device(self.device_arg)
        self.precision = choose_precision(self.precision_arg, self.device)
        if self.precision.name == "fp16" and self.device.type == "cpu" and self.progress_mode is not False:
            print("torchwise: precision fp16 on the CPU: autocast to float16 with loss scaling, as asked; CPUs "
                  "rarely compute float16 faster than float32 (bf16 is the CPU's fast half precision), so use "
                  "precision='fp32' or 'bf16' unless you are testing fp16 behaviour.", file=sys.stderr)
        self.model.to(self.device)
        if isinstance(self.loss_fn, nn.Module):  # its buffers (a CrossEntropyLoss weight) must sit with the outputs
            self.loss_fn.to(self.device)
        self.evaluator = Evaluator(self.model, self.loss_fn, self.precision, self.device, self.task, self.metrics,
                                   self.dist)
        if self.batch_eval is not None:
            self.evaluator.prepare_inputs = lambda x: _apply_batch_fn(self.batch_eval, x, "batch_eval")
        self._augment_gen = torch.Generator(device=self.device)

    def _setup(self) -> Path | None:
        from torchwise.data.loaders import build_loader

        if self._setup_done:
            raise TorchwiseError("fit() was already called on this Trainer.", fix="Create a new Trainer to train again.")
        self._setup_done = True
        self.dist, device = distributed.setup(self.device_arg, self.dist_timeout_s)
        if self.dist.enabled:
            self.device_arg = device
        # Each rank draws its own dropout masks; the data order does not depend on this seed.
        seed_everything(self.seed + self.dist.rank)
        self._setup_basics()
        self._determinism_note = configure_determinism(self.deterministic, cuda=self.device.type == "cuda")
        # benchmark mode (on for speed) goes off again if the input shapes turn out to vary
        self._shape_watch = shape_watch.ShapeWatch() if shape_watch.wanted(self.model, self.device) else None
        self.fast_plan = plan_fast(self.fast, self.device, self.model)
        apply_to_model(self.fast_plan, self.model)
        # Wrapped (DDP) or sharded in place (FSDP) before the optimizer exists: FSDP replaces the parameters.
        self.train_model = distributed.wrap_model(self.model, self.dist, self.device, self.strategy)
        self.optimizer = self._build_optimizer()
        if "compile" in self.fast_plan.on:  # compiled lazily at the first step; a failure falls back to eager
            self._eager_train_model = self.train_model
            self.train_model = compile_model(self.train_model, self.compile_options)
        shard = dict(rank=self.dist.rank, world_size=self.dist.world_size)
        self.train_loader = build_loader(self.train_data, role="train_data", train=True, device=self.device,
                                         batch_size=self.batch_size, seed=self.seed, num_workers=self.num_workers,
                                         **shard)
        self.val_loader = None if self.val_data is None else build_loader(
            self.val_data, role="val_data", train=False, device=self.device,
            batch_size=self.eval_batch_size or self.batch_size, seed=self.seed, num_workers=self.num_workers, **shard)
        _require(self.val_loader is None or self.val_loader.batches_per_epoch() > 0 or self.dist.enabled,
                 "val_data yields no batches.", {"val_data": type(self.val_data).__name__,
                                                 "batches": 0 if self.val_loader is None else
                                                 self.val_loader.batches_per_epoch()},
                 "Give val_data samples, or drop_last=False in its DataLoader, or pass val_data=None.")
        steps_per_epoch = -(-self.train_loader.batches_per_epoch() // self.accumulate)
        _require(steps_per_epoch > 0, "train_data yields no batches.",
                 {"batches per epoch": self.train_loader.batches_per_epoch(), "batch_size": self.batch_size},
                 "Lower batch_size or drop_last=False in your DataLoader.")
        self._total_steps = self.max_steps or steps_per_epoch * self.max_epochs
        if self.max_steps is not None:  # max_steps wins over max_epochs
            self.max_epochs = max(self.max_epochs, -(-self.max_steps // steps_per_epoch))
        self.schedule = build_schedule(self.scheduler_spec, self.optimizer, total_steps=self._total_steps,
                                       max_epochs=self.max_epochs, warmup_steps=self.warmup_steps, mode=self.mode,
                                       interval=self.scheduler_interval)
        from torchwise.toolbox.oom import OOMGuard

        self.watcher = self._attach_watcher()

        # OOMGuard turns an out-of-memory error into the remedies, or (on_oom="adapt") into smaller micro-batches
        self._step_core = StepRunner(self.train_model, self.optimizer, self.loss_fn, self.precision, self.device,
                                     self.clip_grad_norm, self.dist, self.watcher)
        self._step_core.check_first_batch = self._check_first_batch
        self._plan_device_steps()
        self.step_runner = OOMGuard(self._step_core, mode=self.on_oom, accumulate=self.accumulate)
        if "prefetch" in self.fast_plan.on:
            allowed, why = prefetch_allowed(self.train_loader.loader, self.train_loader.plan.num_workers)
            if not allowed:
                self.fast_plan.on.discard("prefetch")
                self.fast_plan.why_off["prefetch"] = why
        self.model.train()
        found = ckpt.find_resume_checkpoint(self.resume, self.out_dir)
        if self.out_dir is not None:
            if self.dist.is_main:  # one process removes leftovers; the others only read complete checkpoints
                ckpt.clean_stale(self.out_dir / "checkpoints")
            existing = ckpt.list_checkpoints(self.out_dir / "checkpoints")
            # A fresh run would interleave its checkpoints with the old run's and prune the wrong ones.
            _require(found is not None or not existing, "out_dir already holds checkpoints of another run.",
                     {"out_dir": str(self.out_dir), "latest": existing[-1].name if existing else "-"},
                     "Pass resume=True to continue that run, or use a new out_dir (or delete the old one).")
        if found is not None:
            self.files.load_checkpoint(found)
        return found

    def _check_first_batch(self, output: Any, target: Any) -> None:
        """The first training batch's targets against the model's outputs, and, for data held in memory as
        tensors, every label of the data set (a label out of range on the GPU is a device-side assert)."""
        strict = self.task == "classification" and checks_.is_cross_entropy(self.loss_fn)
        checks_.check_targets(output, target, self.loss_fn, self.task, "first training batch", strict=strict)
        if not strict or not isinstance(output, torch.Tensor) or output.ndim < 2:
            return
        for role, data in (("train_data", self.train_data), ("val_data", self.val_data)):
            tensors = getattr(data.dataset if hasattr(data, "batch_sampler") else data, "tensors", None)
            if type(getattr(data, "dataset", data)) is torch.utils.data.TensorDataset and tensors:
                labels = tensors[-1]
                if not labels.is_floating_point() and labels.ndim == 1:
                    checks_.check_label_range(labels, int(output.shape[1]), getattr(self.loss_fn, "ignore_index", -100),
                                              role)

    def _optimizer_as_given(self) -> None:
        if "fused_optimizer" in self.fast_plan.on:
            self.fast_plan.on.discard("fused_optimizer")
            self.fast_plan.why_off["fused_optimizer"] = "your optimizer is used as given (pass fused=True to it)"

    def _step_with_compile_fallback(self, micro: list, measure_norm: bool, progress: Progress):
        try:
            return self.step_runner.run(micro, measure_norm=measure_norm)
        except Exception as exc:
            if getattr(self, "_eager_train_model", None) is None or not is_compile_failure(exc):
                raise
            # BackendCompilerFailed wraps the backend's own error, which is the one that explains
            inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc
            reason = f"{type(inner).__name__}: {(str(inner).strip().splitlines() or [''])[0][:300]}"
            progress.message(f"torchwise: torch.compile failed, training continues in eager mode "
                             f"({type(exc).__name__} - {reason})")
            self.fast_plan.on.discard("compile")
            self.fast_plan.why_off["compile"] = f"failed: {type(exc).__name__}"
            self.train_model = self._step_core.model = self._eager_train_model
            self._eager_train_model = None
            return self.step_runner.run(micro, measure_norm=measure_norm)

    def _plan_device_steps(self) -> None:
        """fast "sync_free" / "cuda_graph": switch them off, with the reason, where they cannot run."""
        plan, core = self.fast_plan, self._step_core
        wanted = [p for p in ("sync_free", "cuda_graph") if p in plan.on]
        blocker = device_step_blocker(self.optimizer, core.scaler, self.model) if wanted else None
        if "cuda_graph" in plan.on and blocker is None:
            from torchwise.train.graphed_step import GraphedStep, graph_blocker

            graph_why = graph_blocker(self.device, self.dist, self.accumulate, self.optimizer, self.compile_options
                                      if "compile" in plan.on else None)
            if graph_why is None:
                core.graphed = GraphedStep(core)
            else:
                plan.on.discard("cuda_graph")
                plan.why_off["cuda_graph"] = graph_why
        for part in wanted:
            if blocker is not None:
                plan.on.discard(part)
                plan.why_off[part] = blocker
        core.sync_free = "sync_free" in plan.on or "cuda_graph" in plan.on

    def _attach_watcher(self):
        """The same detectors as `torchwise check`, on this run (deep checks on a few steps only)."""
        if not self.checks or is_sharded(self.model):
            return None
        from torchwise.diagnose.watch import Watcher

        # two deep steps at the start (most mistakes show in the first batch), then as a budget of 0.5% of
        # the training time allows (bench/bench_trainer.py: the detectors cost ~1% of a tiny MLP's run in all)
        watcher = Watcher(deep_every=50, deep_first=2, deep_budget=0.005).attach(self.model, self.optimizer,
                                                                               driven=True)
        watcher.attach_loaders(train=self.train_loader.loader,
                               val=self.val_loader.loader if self.val_loader is not None else None)
        self.evaluator.watcher = watcher
        return watcher

    def _report_findings(self, progress: Progress) -> list[dict[str, Any]]:
        if self.watcher is None:
            return []
        found = self.watcher.findings()
        self.watcher.detach()
        self.evaluator.watcher = None
        if self.dist.is_main:
            # Findings are warnings, not progress: progress=False (--quiet) hides the bar, never these.
            if found:
                print(self.watcher.render(found), file=sys.stderr)
            if self.out_dir is not None:  # clean runs too: the report says what was watched
                (self.out_dir / "checks.json").write_text(json.dumps(self.watcher.report(found), indent=2, default=str))
        return [f.to_dict() for f in found]

    def _build_optimizer(self) -> torch.optim.Optimizer:
        arg = self._optimizer_arg
        # sync-free steps and graphs skip non-finite updates through a fused optimizer's found_inf
        fused = bool({"fused_optimizer", "sync_free", "cuda_graph"} & self.fast_plan.on)
        if arg is None:
            opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, fused=fused)
        elif isinstance(arg, torch.optim.Optimizer):
            opt = arg
            self._optimizer_as_given()
        elif callable(arg) and _takes_keyword(arg, "fused"):  # a factory that lets the fast plan choose
            opt = arg(self.model.parameters(), fused=fused)
        elif callable(arg):
            opt = arg(self.model.parameters())
            self._optimizer_as_given()
            _require(isinstance(opt, torch.optim.Optimizer), "The optimizer factory did not return an optimizer.",
                     {"returned": type(opt).__name__},
                     "Pass e.g. optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4).")
        else:
            raise ConfigError("optimizer must be an Optimizer, a factory taking the parameters, or None.",
                              values={"optimizer": type(arg).__name__},
                              fix="Pass torch.optim.AdamW(model.parameters(), lr=1e-3) or "
                                  "lambda params: torch.optim.AdamW(params, lr=1e-3).")
        checks_.check_optimizer_holds(opt, self.model)
        return opt

    def _eval_loader(self, data: Any):
        from torchwise.data.loaders import build_loader

        data = self.val_data if data is None else data
        _require(data is not None, "No data to evaluate.", {"data": None, "val_data": None},
                 "Pass the data: trainer.evaluate(dataset).")
        return build_loader(data, role="data", train=False, device=self.device,
                            batch_size=self.eval_batch_size or self.batch_size,
                            seed=self.seed, num_workers=self.num_workers, rank=self.dist.rank,
                            world_size=self.dist.world_size)

    def _metrics_log(self, resumed: bool):
        from torchwise.report.metrics import MetricsLog

        return MetricsLog(self.out_dir if self.dist.is_main else None, [f"val_{k}" for k in self.metrics] + (["val_mae"] if self.task == "regression" else []),
                          resume_step=self.pos.step if resumed else None, tensorboard=self.tensorboard)

    def _start_message(self, resumed_from: Path | None) -> str:
        plan = self.train_loader.plan
        lines = [f"torchwise: device {self.device}, precision {self.precision.name}, {self._determinism_note}"
                 + (f", {self.dist.world_size} processes (DDP)" if self.dist.enabled else ""),
                 f"torchwise: {self.fast_plan.describe()}",
                 f"torchwise: data: batch {plan.batch_size}, workers {plan.num_workers}, pin_memory {plan.pin_memory}"
                 + (f", {plan.note}" if plan.note else "")]
        if resumed_from is not None:
            lines.append(f"torchwise: resumed from {resumed_from} (step {self.pos.step}, epoch {self.pos.epoch}, "
                         f"batch {self.pos.batch_in_epoch})")
        return "\n".join(lines)


def _require(ok: bool, what: str, values: dict[str, Any], fix: str) -> None:
    if not ok:
        raise ConfigError(what, values=values, fix=fix)


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # Regression targets usually come as [N] while a one-output model gives [N, 1]; without the reshape
    # mse_loss broadcasts to [N, N] and trains on nonsense (a classic silent bug).
    if output.shape != target.shape and output.numel() == target.numel():
        output = output.reshape(target.shape)
    if output.shape != target.shape:  # mse_loss would broadcast the two and train on nonsense
        raise TorchwiseError("The regression targets do not have the shape of the model's outputs.",
                             values={"outputs": checks_.describe(output), "targets": checks_.describe(target)},
                             fix="Give the model one output per target value (e.g. nn.Linear(..., 1) for one target "
                                 "per sample), or reshape the targets to the outputs' shape.")
    return nn.functional.mse_loss(output, target.to(output.dtype))


def _takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a readable signature
        return False


def _apply_batch_fn(fn: Callable[..., Any], x: Any, name: str, *args: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TorchwiseError(f"{name} needs the batch's first input to be a tensor.", values={"input": type(x).__name__},
                             fix=f"Make the data set return (image tensor, label), or drop {name}.")
    out = fn(x, *args)
    if not isinstance(out, torch.Tensor) or out.shape[:1] != x.shape[:1]:
        raise TorchwiseError(f"{name} must return a tensor with one row per sample.",
                             values={"input shape": tuple(x.shape),
                                     "returned": tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__},
                             fix="Return the transformed batch, e.g. BatchAugment(size=...)(images, generator).")
    return out


def _interleave(shards: list[torch.Tensor]) -> torch.Tensor:
    total = sum(len(s) for s in shards)
    out = torch.empty((total, *shards[0].shape[1:]), dtype=shards[0].dtype)
    for rank, shard in enumerate(shards):
        out[rank::len(shards)] = shard
    return out



