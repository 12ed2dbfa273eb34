"""The Trainer: the seed articles' whole training loop, done right, with exact resume.

The loop itself is `fit()`; one optimizer step is `StepRunner.run` (step/body.py); validation is
`Evaluator` (evaluate/validation.py), its rows and the best weights evaluate/eval_log.py; the settings are
one typed tree (settings.py); the set-up that waits for fit() is setup.py; checkpoints are
state/run_files.py (what) and state/checkpoint.py (how); Ctrl-C is state/interrupt.py. The Trainer owns
those parts as objects (composition: it has no base classes) and wires them together here
(docs/ARCHITECTURE.md maps the rooms).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from torchwise.errors import ConfigError, TrainingStopped
from torchwise.train.distributed import process_group as distributed
from torchwise.train import input_checks as checks_
from torchwise.train.step.batches import move_to
from torchwise.train.step.contract import StepContract, regression_loss
from torchwise.train.step.precision import Precision
from torchwise.train.step.step_wrappers import CompileFallback, OOMGuard
from torchwise.train.distributed.process_group import DistEnv, barrier, gather_objects, interleave
from torchwise.train.evaluate.eval_log import EvalReporter
from torchwise.train.evaluate.metrics_log import MetricsLog
from torchwise.train.evaluate.validation import MetricFn
from torchwise.train.events import EVENTS, Events, Handle
from torchwise.train.recipes.ema import EMA
from torchwise.train.recipes.schedule import Schedule
from torchwise.train.speed.fast import FastPlan, to_channels_last
from torchwise.train.speed.profiling import StepProfiler
from torchwise.train.state.interrupt import InterruptHandler
from torchwise.train.state.loaders import TrainLoader
from torchwise.train.state.loop_state import Position
from torchwise.train.evaluate.monitor import BestMetric
from torchwise.train.speed.prefetch import Prefetcher
from torchwise.train.speed.process_switches import ProcessSwitches
from torchwise.train.progress import Progress
from torchwise.train.state.run_files import RunFiles, has_state
from torchwise.train.settings import ALIASES, FLAT, TrainerConfig, build_config
from torchwise.train.recipes.trainer_recipes import TrainingRecipes
from torchwise.train.setup import RunSetup
from torchwise.train.recipes.stages import Stages


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


class Trainer:
    """Trainer(model, optimizer, loss, train_data, val_data, *, config=None, metrics=None, callbacks=(),
    compute_loss=None, **settings): `settings` are the fields of TrainerConfig by name (epochs=3, ...).

    How a batch becomes a loss (train/step/contract.py): loss(model(*inputs), target) for (x, y) batches; a
    dict batch the model takes by keyword (a Hugging Face batch) is model(**batch), with the model's own
    loss unless loss= is given; compute_loss(model, batch) -> loss or (loss, outputs, targets) for anything
    else. Metrics may be functions fn(outputs, targets) or streaming objects (a torchmetrics Metric).

    A callback is an object with methods named on_<event> (on_step_end(trainer=..., step=..., ...));
    one that also has state_dict()/load_state_dict() is saved in every checkpoint and restored on resume.

    The parts it owns, each seeing it through a Protocol of what it reads: `setup` (RunSetup: the run's
    parts, built when fit() starts), `recipes` (TrainingRecipes), `reporter` (EvalReporter: the rows of
    the evaluations), `stages` (Stages: fit() called again), `interrupts` (InterruptHandler: Ctrl-C) and
    `files` (RunFiles: checkpoints). The parts' attributes the public API names are properties below.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: checks_.OptimizerArg = None,
        loss: Callable[..., torch.Tensor] | None = None,
        train_data: Any = None,
        val_data: Any = None,
        *,
        config: TrainerConfig | Mapping[str, Any] | None = None,
        metrics: Mapping[str, MetricFn] | Iterable[MetricFn] | None = None,
        callbacks: Iterable[Any] = (),
        compute_loss: Callable[[nn.Module, Any], Any] | None = None,
        **settings: Any,
    ):
        _require(isinstance(model, nn.Module), "model must be a torch.nn.Module.", {"model": type(model).__name__},
                 "Pass the network itself, e.g. Trainer(model=MyNet(), ...).")
        checks_.check_model(model)
        train_data = checks_.as_data(train_data, "train_data")
        val_data = checks_.as_data(val_data, "val_data", required=False)
        self.config = cfg = build_config(config, settings)
        checks_.check_step_arguments(model, optimizer, loss, compute_loss, cfg.strategy)
        self.model, self.optimizer_arg = model, optimizer
        self.loss_fn = loss if loss is not None else (
            nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing) if cfg.task == "classification" else regression_loss)
        # how a batch becomes a loss: loss_fn(model(*inputs), target), a model's own loss, or compute_loss
        self.contract = StepContract(self.loss_fn, loss_given=loss is not None, compute_loss=compute_loss)
        self.contract.model_for_keys = model
        self.train_data, self.val_data = train_data, val_data
        self.metrics = checks_.check_metrics(metrics)
        es = cfg.early_stopping
        if es is not None:
            _require(val_data is not None or (es.monitor or cfg.monitor or "val_loss") == "train_loss",
                     "Early stopping needs validation data.",
                     {"monitor": es.monitor or cfg.monitor or "val_loss", "val_data": None},
                     "Pass val_data=..., or drop early_stopping.")
        # One judge (metric, direction, min_delta) for the best weights, early stopping and the plateau schedule
        self.judge = checks_.resolve_judge(cfg.monitor, cfg.mode, cfg.min_delta, es, cfg.task, self.metrics,
                                           has_val=val_data is not None)
        cfg.eval.monitor, cfg.eval.mode, cfg.eval.min_delta = self.judge.name, self.judge.mode, self.judge.min_delta
        if es is not None:
            es.follow(self.judge)
        self.best = BestMetric(self.judge)
        self.pos = Position(best=self.best)
        self.events = Events()
        self.device_arg: str | torch.device = cfg.device  # under torchrun: the rank's own device, known in fit()
        self.dist = DistEnv()  # joined in fit(): see setup.py for what must wait for it
        self.profile_steps = 5 if cfg.profile is True else int(cfg.profile)
        self.profiler: StepProfiler | None = None
        self.progress: Progress | None = None  # the progress line of the fit() call running
        self.stop_requested = self.stream_ended = False
        self.files = RunFiles(self)  # checkpoints, best and final weights; the components come in setup_run
        self.recipes = TrainingRecipes(self)
        self.setup = RunSetup(self)
        self.reporter = EvalReporter(self)
        self.stages = Stages(self)
        self.interrupts = InterruptHandler(self)
        for callback in checks_.callback_list(callbacks):
            self.add_callback(callback)

    def __getattr__(self, name: str) -> Any:
        """A setting by its flat name (trainer.batch_size, trainer.max_epochs): read from self.config."""
        config = self.__dict__.get("config")
        if config is not None and ALIASES.get(name, name) in FLAT:
            return getattr(config, name)
        raise AttributeError(f"'Trainer' object has no attribute {name!r}")

    # ------------------------------------------------------------------ the parts' attributes the API names
    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self.setup.optimizer

    @property
    def train_model(self) -> nn.Module | None:
        """The model as trained: wrapped for DDP, compiled (None until fit())."""
        return self.setup.train_model

    @property
    def fast_plan(self) -> FastPlan:
        return self.setup.fast_plan

    @property
    def device(self) -> torch.device | str:
        """The run's device once chosen (by fit, evaluate, predict or lr_find); before that, the setting."""
        return self.setup.device if self.setup.device is not None else self.config.device

    @property
    def precision(self) -> Precision | str:
        """The run's precision once chosen (as the device); before that, the setting."""
        return self.setup.precision if self.setup.precision is not None else self.config.precision

    @property
    def train_loader(self) -> TrainLoader | None:
        return self.setup.train_loader

    @property
    def schedule(self) -> Schedule | None:
        return self.setup.schedule

    @property
    def step_runner(self) -> OOMGuard | CompileFallback | None:
        return self.setup.step_runner

    @step_runner.setter
    def step_runner(self, step: OOMGuard | CompileFallback) -> None:  # toolbox.oom.install may wrap it
        self.setup.step_runner = step

    @property
    def total_steps(self) -> int | None:
        return self.setup.total_steps

    @property
    def epochs_planned(self) -> int | None:
        return self.setup.epochs_planned

    @property
    def determinism_note(self) -> str:
        return self.setup.determinism_note

    @property
    def cudnn_benchmark_off(self) -> str | None:
        return self.setup.cudnn_benchmark_off

    @property
    def ema(self) -> EMA | None:
        return self.recipes.ema

    @property
    def interrupted_checkpoint(self) -> Path | None:
        return self.interrupts.checkpoint

    @property
    def interrupt_hint(self) -> str | None:
        return self.interrupts.hint

    @interrupt_hint.setter
    def interrupt_hint(self, hint: str | None) -> None:
        self.interrupts.hint = hint

    # ------------------------------------------------------------------ public API
    def on(self, event: str, fn: Callable[..., Any]) -> Handle:
        """Call `fn(**payload)` at `event`; returns a handle whose .remove() unregisters it."""
        return self.events.on(event, fn)

    def add_callback(self, callback: Any) -> None:
        """Register each on_<event> method of `callback`; one with state_dict/load_state_dict is also saved
        in every checkpoint (and restored on resume)."""
        hooks = {event: getattr(callback, f"on_{event}") for event in EVENTS
                 if callable(getattr(callback, f"on_{event}", None))}
        _require(hooks or has_state(callback), "A callback must have on_<event> methods or state_dict/load_state_dict.",
                 {"callback": type(callback).__name__, "events": ", ".join(f"on_{e}" for e in EVENTS)},
                 "Give it e.g. def on_step_end(self, trainer, **_): ..., or register a function with "
                 "trainer.on('step_end', fn).")
        for event, fn in hooks.items():
            self.events.on(event, fn)
        if has_state(callback):
            self.files.register_callback(callback)

    def lr_find(self, **kwargs: Any):
        """Learning-rate sweep with this Trainer's model, optimizer, data and precision; restores everything
        afterwards. See torchwise.train.recipes.lr_find.run_lr_find for the options and the result."""
        from torchwise.train.recipes.lr_find import run_lr_find

        return run_lr_find(self, **kwargs)

    def request_stop(self) -> None:
        """Ask fit() to stop after the current step (from a callback)."""
        self.stop_requested = True

    def fit(self, *, optimizer: checks_.OptimizerArg = None, **settings: Any) -> FitResult:
        """Train; the process-wide torch switches the run turns are put back when it returns or raises.
        Called again, fit() is the run's next stage (train/recipes/stages.py): `settings` (epochs=, max_steps=, ...)
        and `optimizer` apply from it on, and the step count, logs and checkpoints go on."""
        stage = self.stages.begin(optimizer, settings)
        done = self.stages.done_before(stage)
        if done is not None:  # resuming a staged script: this stage ended before the checkpoint was made
            return FitResult([], None, None, self.judge.name, 0, 0, 0, False, None, resumed_from=done)
        switches = ProcessSwitches.capture()
        guard = self.interrupts.arm(enabled=not distributed.env_from_torchrun().enabled)
        try:
            with guard:
                return self._fit(stage)
        except KeyboardInterrupt as stop:  # every Ctrl-C ends as torchwise.errors.Interrupted: no traceback
            raise self.interrupts.ended(stop) from None
        finally:
            switches.restore()
            self.files.release_out_dir()  # the run folder's lock, taken by the set-up (train/state/run_lock.py)

    def _fit(self, stage: int) -> FitResult:
        # The loop on one screen: the order of steps, evaluations and saves reads at once
        self.stages.place(stage)
        resumed_from = self.setup.setup_next_stage() if self.setup.done else self.setup.setup_run()
        pos, guard, reporter = self.pos, self.interrupts.guard, self.reporter
        self.progress = progress = Progress(self.config.progress if self.dist.is_main else False,
                                            pos.stage_start_step + self.total_steps)
        log = reporter.metrics_log(resumed_from is not None or stage > 0)
        progress.message(reporter.start_message(resumed_from))
        progress.start(pos.step)
        self.files.write_config()
        self.events.emit("fit_start", trainer=self)
        self._start_profiler()
        start_time = pos.start_clock()  # the run's start on this clock: its earlier sessions' time counts
        stopped_early = False
        eval_every = self.config.eval_every
        guard.deferring = guard.active
        try:
            while not self._finished():
                self.interrupts.safe_point()
                self.events.emit("epoch_start", trainer=self, epoch=pos.epoch)
                batches = self._epoch_batches(pos.epoch, pos.batch_in_epoch)
                while not self._finished(within_epoch=True):
                    self.interrupts.safe_point()  # between optimizer steps: where a checkpoint is whole
                    micro = self._next_micro_batches(batches)
                    if not micro:
                        break
                    self._one_step(micro, progress, log)
                    if eval_every and pos.step % eval_every == 0:
                        stopped_early |= reporter.evaluate_and_log(log, progress, start_time)
                    self.files.save_if_due()
                    if stopped_early or self.stop_requested:
                        break
                if self._epoch_done():
                    stopped_early |= self._end_epoch(log, progress, start_time)
                if stopped_early or self.stop_requested:
                    break
            self.interrupts.safe_point()
            if self.val_data is not None and (not pos.history or pos.history[-1]["step"] != pos.step):
                reporter.evaluate_and_log(log, progress, start_time)  # the final weights are always evaluated
        except BaseException:
            if self.setup.watcher is not None:  # its patches (DataLoader.__iter__) must not outlive the run
                self.setup.watcher.detach()
            raise
        finally:
            if self.profiler is not None:
                self.profiler.close()
            progress.close()
            log.close()
        return self._finish_fit(stopped_early, resumed_from)

    def _start_profiler(self) -> None:
        if self.profile_steps and self.dist.is_main:
            self.profiler = StepProfiler(self.profile_steps, self.device, self.config.out_dir)

    def _finish_fit(self, stopped_early: bool, resumed_from: Path | None) -> FitResult:
        """After the loop: the final weights, a Ctrl-C that came meanwhile, the checker's findings, the result."""
        pos = self.pos
        final_path = self.files.finish()
        if self.interrupts.guard.pending and self.setup.watcher is not None:
            self.setup.watcher.detach()
        self.interrupts.after_finish(final_path)  # raises Interrupted on a Ctrl-C meanwhile
        findings = self.setup.report_findings()
        barrier(self.dist)
        result = FitResult(
            history=list(pos.history), best_metric=None if math.isnan(self.best.value) else self.best.value,
            best_step=None if self.best.step < 0 else self.best.step, monitor=self.judge.name, steps=pos.step,
            epochs=pos.epoch, skipped_steps=pos.skipped, stopped_early=stopped_early, final_path=final_path,
            resumed_from=resumed_from, findings=findings)
        self.events.emit("fit_end", trainer=self, result=result)
        return result

    def evaluate(self, data: Any = None) -> dict[str, float]:
        """Metrics on `data` (default: val_data), in eval mode under inference_mode."""
        self.setup.setup_basics()
        data = self.val_data if data is None else checks_.as_data(data, "data")
        loader = self.setup.eval_loader(data)
        return self.setup.evaluator.evaluate(self.reporter.guarded(loader, data, "data"),
                                             num_batches=loader.batches_per_epoch())

    def predict(self, data: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Model outputs and targets for `data`, concatenated on the CPU, in data order. Batches may carry
        no labels (a tensor, or (x,)): the targets are None then."""
        self.setup.setup_basics()
        data = self.val_data if data is None else checks_.as_data(data, "data")
        loader = self.setup.eval_loader(data)
        outs, targets, _, _ = self.setup.evaluator.outputs(self.reporter.guarded(loader, data, "data"),
                                                           loader.batches_per_epoch(), labels_optional=True)
        output = torch.cat(outs) if outs else torch.empty(0)
        target = torch.cat(targets) if targets and all(isinstance(t, torch.Tensor) for t in targets) else None
        if self.dist.enabled:  # rank r holds samples r, r + world, ...: interleave them back into data order
            parts = gather_objects((output, target), self.dist)
            output = interleave([p[0] for p in parts])
            target = None if any(p[1] is None for p in parts) else interleave([p[1] for p in parts])
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

    def _prepare_batch(self, batch: Any, epoch: int, index: int) -> tuple[Any, Any, int]:
        contract = self.contract
        inputs, target = contract.parts(move_to(batch, self.device, self.device.type == "cuda"))
        n = contract.size(inputs, target)
        augment = self.config.batch_augment
        if contract.positional(inputs):  # batch_augment, then MixUp / CutMix: training batches only
            if augment is not None:
                inputs = self.recipes.augment_batch(augment, inputs, epoch, index)
            inputs, target = self.recipes.mix_batch(inputs, target, epoch, index)
            if "channels_last" in self.fast_plan.on:
                inputs = to_channels_last(inputs)
        return inputs, target, n

    def _epoch_done(self) -> bool:
        batches = self.train_loader.batches_per_epoch()
        return self.stream_ended or (batches is not None and self.pos.batch_in_epoch >= batches)

    def _next_micro_batches(self, batches: Iterator[Any]) -> list[tuple[tuple[Any, ...], Any, int]]:
        self.stream_ended = False
        micro = []
        start = time.perf_counter()
        at = self.pos.batch_in_epoch
        for _ in range(self.config.accumulate):
            try:
                micro.append(next(batches))
            except StopIteration:  # the epoch's end (for a stream with no length, the only sign of it)
                self.stream_ended = True
                break
            except Exception:
                if self.interrupts.guard.pending:  # e.g. the loader's workers got the Ctrl-C too and died
                    self.pos.batch_in_epoch = at  # nothing of this step has happened: the last safe point
                    self.interrupts.stop()
                raise
            self.pos.batch_in_epoch += 1
        self.reporter.timing["data_s"] += time.perf_counter() - start
        return micro

    def _one_step(self, micro: list, progress: Progress, log: MetricsLog) -> None:
        pos, timing = self.pos, self.reporter.timing
        measure_norm = (pos.step + 1) % self.config.log_every == 0
        if self.setup.shape_guard is not None:
            self.setup.watch_shapes(micro, progress)
        start = time.perf_counter()
        # loss.item() inside: the device is done when this returns
        result = self.step_runner.run(micro, measure_norm=measure_norm)
        timing["compute_s"] += time.perf_counter() - start
        timing["samples"] += result.samples
        if self.profiler is not None and self.profiler.step():
            where = f" (trace: {self.profiler.trace})" if self.profiler.trace else ""
            progress.message(f"torchwise: profile of {self.profile_steps} steps after warm-up{where}\n"
                             f"{self.profiler.table}")
            self.profiler = None
        pos.step += 1
        self.setup.step_core.watcher.end_step(stepped=result.skipped is None, nonfinite_loss=result.loss_not_finite,
                                        loss=result.loss)
        lr = self.optimizer.param_groups[0]["lr"]
        if result.skipped:
            self._skipped_step(result, lr, progress)
        else:
            pos.consecutive_skipped = 0
            pos.loss_sum += result.loss * result.samples
            pos.loss_count += result.samples
            self.recipes.after_optimizer_step()  # the EMA of the weights, when on
            if self.schedule is not None:
                self.schedule.after_optimizer_step()  # never after a skipped step
        progress.step(result.loss, lr)
        if result.grad_norm is not None:
            pos.last_grad_norm = result.grad_norm
        if measure_norm:
            scalars = {"loss": result.loss, "lr": lr}
            if result.grad_norm is not None:
                scalars["grad_norm"] = result.grad_norm
            log.scalars(pos.step, scalars, "train")
        self.events.emit("step_end", trainer=self, step=pos.step, loss=result.loss, lr=lr,
                         grad_norm=result.grad_norm, skipped=result.skipped)

    def _skipped_step(self, result: Any, lr: float, progress: Progress) -> None:
        pos = self.pos
        pos.skipped += 1
        pos.consecutive_skipped += 1
        progress.message(f"torchwise: step {pos.step}: {result.skipped}; optimizer step skipped "
                         f"({pos.skipped} skipped so far)")
        if pos.consecutive_skipped >= self.config.max_consecutive_skips:
            raise TrainingStopped(
                f"Training stopped: {pos.consecutive_skipped} optimizer steps in a row were skipped.",
                values={"step": pos.step, "last reason": result.skipped, "learning rate": lr,
                        "last checkpoint": self.files.latest_checkpoint_name()},
                fix="Lower the learning rate (try 10x lower), set clip_grad_norm=1.0, check the inputs for "
                    "nan/inf, or use precision='bf16'/'fp32' instead of fp16. `torchwise check` finds the "
                    "first layer whose output goes non-finite.")

    def _end_epoch(self, log: MetricsLog, progress: Progress, start_time: float) -> bool:
        stop = False
        if not self.config.eval_every:
            stop = self.reporter.evaluate_and_log(log, progress, start_time)
        if self.schedule is not None:
            self.schedule.after_epoch()
        self.events.emit("epoch_end", trainer=self, epoch=self.pos.epoch)
        self.pos.epoch += 1
        self.pos.batch_in_epoch = 0
        self.files.save_if_due(epoch_end=True)
        return stop

    def _finished(self, within_epoch: bool = False) -> bool:
        max_steps = self.config.max_steps
        if max_steps is not None and self.pos.step >= self.pos.stage_start_step + max_steps:
            return True
        if within_epoch:
            return False
        return self.pos.epoch >= self.epochs_planned


def _require(ok: bool, what: str, values: dict[str, Any], fix: str) -> None:
    if not ok:
        raise ConfigError(what, values=values, fix=fix)
