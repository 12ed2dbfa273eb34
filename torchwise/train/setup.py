"""The run's set-up: what can only be decided once fit() starts.

Under torchrun the device is known only after this process joins the process group (its LOCAL_RANK);
FSDP shards the model in place, so the optimizer is built after it; the loaders need the rank; the
fast plan needs the device. Construction (trainer.py) checks and resolves everything else.
`RunSetup` is a part the Trainer owns (trainer.setup): it builds the run's parts and holds them (the
device, the precision, the loaders, the optimizer, the step, the schedule, the checker's watch); it sees
the Trainer only through `SetupView`.
"""
from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

import torch
from torch import nn

from torchwise.errors import ConfigError
from torchwise.files import write_text
from torchwise.train.state import checkpoint as ckpt
from torchwise.diagnose import shape_watch
from torchwise.train.distributed import process_group as distributed
from torchwise.train import input_checks as checks_
from torchwise.train.distributed.process_group import DistEnv
from torchwise.train.evaluate.validation import Evaluator, MetricFn
from torchwise.train.progress import Progress
from torchwise.train.recipes.trainer_recipes import TrainingRecipes
from torchwise.train.settings import TrainerConfig
from torchwise.train.speed.fast import FastPlan, apply_to_model, compile_model, device_step_blocker, plan_fast
from torchwise.train.state.loaders import LoaderState, TrainLoader, build_loader
from torchwise.train.state.loop_state import History, OptimizerState, Position
from torchwise.train.state.run_files import RunFiles
from torchwise.train.step.contract import StepContract
from torchwise.train.step.precision import Precision, choose_device, choose_precision
from torchwise.train.speed.prefetch import prefetch_allowed
from torchwise.train.state.reproducibility import (configure_determinism, seed_everything, torch_was_seeded,
                                                   unseeded_model_note)
from torchwise.train.recipes.schedule import Schedule, build_schedule
from torchwise.train.distributed.sharding import is_sharded
from torchwise.train.step.body import StepRunner
from torchwise.train.step.step_wrappers import CompileFallback, OOMGuard, compose_step

if TYPE_CHECKING:
    from torchwise.diagnose.watch import Watcher

class SetupView(Protocol):
    """What RunSetup reads of the Trainer (all public). `dist` and `device_arg` it also sets: they are
    known once this process has joined the process group."""
    config: TrainerConfig
    model: nn.Module
    optimizer_arg: checks_.OptimizerArg
    loss_fn: Callable[..., torch.Tensor]
    contract: StepContract
    metrics: Mapping[str, MetricFn]
    train_data: Any        # whatever data the user gave (checked by input_checks.as_data)
    val_data: Any
    dist: DistEnv
    device_arg: str | torch.device
    pos: Position
    files: RunFiles
    recipes: TrainingRecipes
    progress: Progress | None


def require(ok: bool, what: str, values: dict[str, Any], fix: str) -> None:
    if not ok:
        raise ConfigError(what, values=values, fix=fix)


class RunSetup:
    """The run's parts, built when fit() starts (None until then), and the rules that build them."""

    def __init__(self, run: SetupView):
        self.run = run
        self.done = False  # setup_run() has run: a later fit() is the next stage
        self.device: torch.device | None = None
        self.precision: Precision | None = None
        self.evaluator: Evaluator | None = None
        self.determinism_note = ""
        # Read when the Trainer is made, just after the model: were its initial weights drawn from a seeded torch?
        self.model_seeded = torch_was_seeded()
        self.fast_plan = FastPlan()  # the real plan is made in setup_run(), once the device is known
        self.shape_guard: shape_watch.ShapeWatch | None = None
        self.cudnn_benchmark_off: str | None = None  # why the run switched cudnn.benchmark off, if it did
        self.train_model: nn.Module | None = None  # the model as trained: wrapped (DDP), compiled
        self.eager_model: nn.Module | None = None  # the uncompiled train_model, while compile is on
        self.optimizer: torch.optim.Optimizer | None = None
        self.train_loader: TrainLoader | None = None
        self.val_loader: TrainLoader | None = None
        self.total_steps: int | None = None     # this stage's optimizer steps
        self.epochs_planned: int | None = None  # the epoch this stage ends at
        self.schedule: Schedule | None = None
        self.watcher: Watcher | None = None
        self.step_core: StepRunner | None = None
        self.step_runner: OOMGuard | CompileFallback | None = None  # step_core with its wrappers

    def setup_basics(self) -> None:
        """Device, precision, evaluator: enough for evaluate()/predict() without fit()."""
        if self.evaluator is not None:
            return
        run, cfg = self.run, self.run.config
        self.device = choose_device(run.device_arg)
        self.precision = choose_precision(cfg.precision, self.device)
        if self.precision.name == "fp16" and self.device.type == "cpu" and cfg.progress is not False:
            print("torchwise: precision fp16 on the CPU: autocast to float16 with loss scaling, as asked; CPUs "
                  "rarely compute float16 faster than float32 (bf16 is the CPU's fast half precision), so use "
                  "precision='fp32' or 'bf16' unless you are testing fp16 behaviour.", file=sys.stderr)
        run.model.to(self.device)
        if isinstance(run.loss_fn, nn.Module):  # its buffers (a CrossEntropyLoss weight) must sit with the outputs
            run.loss_fn.to(self.device)
        self.evaluator = Evaluator(run.model, run.contract, self.precision, self.device, cfg.task, dict(run.metrics),
                                   run.dist)
        batch_eval = cfg.batch_eval
        if batch_eval is not None:
            self.evaluator.prepare_inputs = lambda x: checks_.apply_batch_fn(batch_eval, x, "batch_eval")

    def setup_run(self) -> Path | None:
        """Everything fit() needs; returns the checkpoint resumed from, if any. Long because it is the
        one ordered list of the run's parts (each step needs the ones before it), said once."""
        run, cfg = self.run, self.run.config
        run.dist, device = distributed.setup(run.device_arg, cfg.dist_timeout_s)
        run.files.claim_out_dir()  # before anything is written into out_dir (the rank is known from here on)
        self.done = True  # (after the claim: a refused fit() may be called again, as the first stage)
        if run.dist.enabled:
            run.device_arg = device
        if not (self.model_seeded or cfg.resume) and run.dist.is_main and cfg.progress is not False:
            print(unseeded_model_note(cfg.seed), file=sys.stderr)  # a resumed run takes its checkpoint's weights
        # Each rank draws its own dropout masks; the data order does not depend on this seed.
        seed_everything(cfg.seed + run.dist.rank)
        self.setup_basics()
        self.determinism_note = configure_determinism(cfg.deterministic, cuda=self.device.type == "cuda",
                                                      cli=bool(cfg.run_config))
        # benchmark mode (on for speed) goes off again if the input shapes turn out to vary
        self.shape_guard = shape_watch.ShapeWatch() if shape_watch.wanted(run.model, self.device) else None
        self.fast_plan = plan_fast(cfg.fast, self.device, run.model)
        apply_to_model(self.fast_plan, run.model)
        run.recipes.setup(self.device)  # EMA, mixing, activation checkpointing: on the plain model, before any wrapper
        # Wrapped (DDP) or sharded in place (FSDP) before the optimizer exists: FSDP replaces the parameters.
        self.train_model = distributed.wrap_model(run.model, run.dist, self.device, cfg.strategy)
        self.optimizer = self.build_optimizer()
        if "compile" in self.fast_plan.on:  # compiled lazily at the first step; a failure falls back to eager
            self.eager_model = self.train_model
            self.train_model = compile_model(self.train_model, cfg.compile_options)
        shard = dict(rank=run.dist.rank, world_size=run.dist.world_size)
        self.train_loader = build_loader(run.train_data, role="train_data", train=True, device=self.device,
                                         batch_size=cfg.batch_size, seed=cfg.seed, num_workers=cfg.num_workers,
                                         **shard)
        self.val_loader = None if run.val_data is None else build_loader(
            run.val_data, role="val_data", train=False, device=self.device,
            batch_size=cfg.eval_batch_size or cfg.batch_size, seed=cfg.seed, num_workers=cfg.num_workers, **shard)
        require(self.val_loader is None or self.val_loader.batches_per_epoch() != 0 or run.dist.enabled,
                "val_data yields no batches.", {"val_data": type(run.val_data).__name__,
                                                "batches": 0 if self.val_loader is None else
                                                self.val_loader.batches_per_epoch()},
                "Give val_data samples, or drop_last=False in its DataLoader, or pass val_data=None.")
        self.build_stage_parts()
        if "prefetch" in self.fast_plan.on:
            allowed, why = prefetch_allowed(self.train_loader.loader, self.train_loader.plan.num_workers)
            if not allowed:
                self.fast_plan.on.discard("prefetch")
                self.fast_plan.why_off["prefetch"] = why
        run.model.train()
        self.register_state()
        return self.find_and_load_checkpoint()

    def setup_next_stage(self) -> None:
        """A stage after one that ran in this process (train/recipes/stages.py): its own optimizer, schedule,
        watch and step."""
        run, cfg = self.run, self.run.config
        if cfg.strategy == "fsdp" or is_sharded(run.model):
            raise ConfigError("fit() again (a new stage) does not work with strategy='fsdp'.",
                              values={"strategy": cfg.strategy},
                              fix="Use strategy='ddp', or a new Trainer for the next stage (initialised from this "
                                  "run's weights).")
        run.files.claim_out_dir()  # released when the previous fit() returned
        if run.dist.enabled:  # DDP knows the parameters that were trainable when it was built
            self.train_model = distributed.wrap_model(run.model, run.dist, self.device, cfg.strategy)
            if "compile" in self.fast_plan.on:
                self.eager_model, self.train_model = self.train_model, compile_model(self.train_model,
                                                                                     cfg.compile_options)
        self.optimizer = self.build_optimizer() if not isinstance(run.optimizer_arg, torch.optim.Optimizer) \
            else run.optimizer_arg
        if cfg.early_stopping is not None:
            cfg.early_stopping.bad_evaluations = 0  # patience counts within a stage
        self.build_stage_parts()
        run.model.train()
        self.register_state()

    def watch_shapes(self, micro: list[tuple[tuple[Any, ...], Any, int]], progress: Progress) -> None:
        """cudnn.benchmark off (fit() restores the process' own setting on return) once the input shapes vary."""
        for inputs, _, _ in micro:
            why = self.shape_guard.see(inputs)
            if why:
                torch.backends.cudnn.benchmark = False
                self.shape_guard, self.cudnn_benchmark_off = None, why
                progress.message(f"torchwise: {why}.")
                return

    def build_stage_parts(self) -> None:
        """What each stage of the run (each fit() call) has of its own: its length, the schedule over it,
        the checker's watch, and the step around the stage's optimizer."""
        cfg = self.run.config
        self.total_steps, self.epochs_planned = self.plan_length()
        self.schedule = build_schedule(cfg.scheduler, self.optimizer, total_steps=self.total_steps,
                                       max_epochs=self.epochs_planned, warmup_steps=cfg.warmup_steps, mode=cfg.mode,
                                       interval=cfg.scheduler_interval)
        self.watcher = self.attach_watcher()
        # The one step body, wrapped in one place (train/step/step_wrappers.py): the device-step path, the OOM guard
        # (remedies, or smaller micro-batches with on_oom="adapt"), and the fall-back from a failed compile.
        self.step_core = StepRunner(self.train_model, self.optimizer, self.run.contract, self.precision, self.device,
                                    cfg.clip_grad_norm, self.run.dist, self.watcher)
        self.step_core.check_first_batch = self.check_first_batch
        self.step_runner = compose_step(self.step_core, on_oom=cfg.on_oom, accumulate=cfg.accumulate,
                                        device_steps=self.plan_device_steps(), eager_model=self.eager_model,
                                        on_compile_fallback=self.on_compile_fallback)

    def plan_length(self) -> tuple[int, int]:
        """(optimizer steps, last epoch) of this stage: max_steps wins over epochs, both counted from where
        the stage began (the first stage: the start). A stream with no length (an IterableDataset) needs
        max_steps, and is iterated again, pass after pass, until they are done."""
        cfg, batches, pos = self.run.config, self.train_loader.batches_per_epoch(), self.run.pos
        if batches is None:
            require(cfg.max_steps is not None, "train_data has no length (an IterableDataset), so the run's length "
                    "cannot come from epochs.", {"train_data": type(self.run.train_data).__name__, "max_steps": None},
                    "Pass max_steps=N: the schedule, the checkpoints and the progress count optimizer steps (the "
                    "stream is iterated again when it runs out before them).")
            return cfg.max_steps, sys.maxsize
        steps_per_epoch = -(-batches // cfg.accumulate)
        require(steps_per_epoch > 0, "train_data yields no batches.",
                {"batches per epoch": batches, "batch_size": cfg.batch_size},
                "Lower batch_size or drop_last=False in your DataLoader.")
        if cfg.max_steps is None:  # a stage begun mid-epoch counts that epoch's rest as its first epoch
            return steps_per_epoch * cfg.epochs - pos.stage_start_batch // cfg.accumulate, \
                pos.stage_start_epoch + cfg.epochs
        return cfg.max_steps, pos.stage_start_epoch + max(cfg.epochs, -(-cfg.max_steps // steps_per_epoch))

    def register_state(self) -> None:
        """What every checkpoint holds, by name (the callbacks with state are registered at construction)."""
        files = self.run.files
        if self.train_loader.keeps_own_state:  # a StatefulDataLoader: its own position, restored by itself
            files.register("train_loader", LoaderState(self.train_loader))
        files.register("optimizer", OptimizerState(self.optimizer, is_sharded(self.run.model)))
        files.register("scheduler", self.schedule)  # (its torch scheduler's state; recipes/schedule.py)
        files.register("scaler", self.step_runner.scaler)
        files.register("early_stopping", self.run.config.early_stopping)
        files.register("position", self.run.pos)
        files.register("history", History(self.run.pos))
        files.register("ema", self.run.recipes.ema)

    def find_and_load_checkpoint(self) -> Path | None:
        """The newest checkpoint that loads, loaded (train/state/checkpoint.py's load_newest: one that does not
        is passed over with a warning, and left on disk); None for a fresh run."""
        cfg = self.run.config
        found, named = ckpt.resume_candidates(cfg.resume, cfg.out_dir)
        if cfg.out_dir is not None:
            if self.run.dist.is_main:  # one process removes leftovers; the others only read complete checkpoints
                ckpt.clean_stale(cfg.out_dir / "checkpoints")
            existing = ckpt.all_checkpoints(cfg.out_dir / "checkpoints")
            # A fresh run would interleave its checkpoints with the old run's and prune the wrong ones.
            require(bool(found) or not existing, "out_dir already holds checkpoints of another run.",
                    {"out_dir": str(cfg.out_dir), "latest": existing[-1].name if existing else "-"},
                    "Pass resume=True to continue that run, or use a new out_dir (or delete the old one).")
        loaded = ckpt.load_newest(found, self.run.files.load_checkpoint, named=named,
                                  warn=ckpt.print_warning if self.run.dist.is_main else None)
        if loaded is not None:
            self.say_how_the_data_resumes()
        return loaded

    def say_how_the_data_resumes(self) -> None:
        """Where the data's position cannot be restored exactly, the run says so (once, on the main rank)."""
        loader, pos = self.train_loader, self.run.pos
        if loader.sampler is not None or loader.keeps_own_state or not pos.batch_in_epoch or not self.run.dist.is_main:
            return
        print(f"torchwise: {type(self.run.train_data).__name__} keeps no position of its own: resumed by reading "
              f"again the {pos.batch_in_epoch} batches of epoch {pos.epoch} already trained on (exact when it "
              "yields the same samples in the same order on every pass; a torchdata StatefulDataLoader resumes "
              "exactly).", file=sys.stderr)

    def check_first_batch(self, output: Any, target: Any) -> None:
        """The first training batch's targets against the model's outputs, and, for data held in memory as
        tensors, every label of the data set (a label out of range on the GPU is a device-side assert)."""
        task = self.run.config.task
        strict = task == "classification" and checks_.is_cross_entropy(self.run.loss_fn)
        checks_.check_targets(output, target, self.run.loss_fn, task, "first training batch", strict=strict)
        if not strict or not isinstance(output, torch.Tensor) or output.ndim < 2:
            return
        for role, data in (("train_data", self.run.train_data), ("val_data", self.run.val_data)):
            tensors = getattr(data.dataset if hasattr(data, "batch_sampler") else data, "tensors", None)
            if type(getattr(data, "dataset", data)) is torch.utils.data.TensorDataset and tensors:
                labels = tensors[-1]
                if not labels.is_floating_point() and labels.ndim == 1:
                    ignore = getattr(self.run.loss_fn, "ignore_index", -100)
                    checks_.check_label_range(labels, int(output.shape[1]), ignore, role)

    def optimizer_as_given(self) -> None:
        if "fused_optimizer" in self.fast_plan.on:
            self.fast_plan.on.discard("fused_optimizer")
            self.fast_plan.why_off["fused_optimizer"] = "your optimizer is used as given (pass fused=True to it)"

    def plan_device_steps(self) -> str:
        """fast "sync_free" / "cuda_graph": the step path compose_step builds; each is switched off, with the
        reason, where it cannot run."""
        plan = self.fast_plan
        wanted = [p for p in ("sync_free", "cuda_graph") if p in plan.on]
        blocker = device_step_blocker(self.optimizer, self.step_core.scaler, self.run.model) if wanted else None
        for part in wanted if blocker is not None else ():
            plan.on.discard(part)
            plan.why_off[part] = blocker
        if "cuda_graph" in plan.on:
            from torchwise.train.speed.graphed_step import graph_blocker

            why = graph_blocker(self.device, self.run.dist, self.run.config.accumulate, self.optimizer,
                                self.run.config.compile_options if "compile" in plan.on else None)
            if why is None:
                return "cuda_graph"
            plan.on.discard("cuda_graph")
            plan.why_off["cuda_graph"] = why
        return "sync_free" if "sync_free" in plan.on else "eager"

    def on_compile_fallback(self, exc: BaseException, reason: str) -> None:
        """torch.compile failed inside its own machinery: the step already runs the eager model again."""
        self.run.progress.message(f"torchwise: torch.compile failed, training continues in eager mode "
                                  f"({type(exc).__name__} - {reason})")
        self.fast_plan.on.discard("compile")
        self.fast_plan.why_off["compile"] = f"failed: {type(exc).__name__}"
        self.train_model, self.eager_model = self.step_core.model, None

    def attach_watcher(self) -> Watcher | None:
        """The same detectors as `torchwise check`, on this run (deep checks on a few steps only)."""
        if not self.run.config.checks or is_sharded(self.run.model):
            return None
        from torchwise.diagnose.watch import Watcher

        # two deep steps at the start (most mistakes show in the first batch), then as a budget of 0.5% of
        # the training time allows (bench/bench_trainer.py: the detectors cost ~1% of a tiny MLP's run in all)
        watcher = Watcher(deep_every=50, deep_first=2, deep_budget=0.005).attach(self.run.model, self.optimizer,
                                                                                 driven=True)
        watcher.attach_loaders(train=self.train_loader.loader,
                               val=self.val_loader.loader if self.val_loader is not None else None)
        names = (self.run.config.metadata or {}).get("class_names")  # torchwise train's folder / label names
        watcher.class_names = [str(n) for n in names] if isinstance(names, (list, tuple)) else None
        counts = (self.run.config.metadata or {}).get("train_class_counts")  # its training split's class counts
        watcher.class_counts = [int(k) for k in counts] if isinstance(counts, (list, tuple)) else None
        self.evaluator.watcher = watcher
        return watcher

    def report_findings(self) -> list[dict[str, Any]]:
        if self.watcher is None:
            return []
        found = self.watcher.findings()
        self.watcher.detach()
        self.evaluator.watcher = None
        if self.run.dist.is_main:
            # Findings are warnings, not progress: progress=False (--quiet) hides the bar, never these.
            if found:
                print(self.watcher.render(found), file=sys.stderr)
            out_dir = self.run.config.out_dir
            if out_dir is not None:  # clean runs too: the report says what was watched
                write_text(out_dir / "checks.json", json.dumps(self.watcher.report(found), indent=2, default=str),
                           root=out_dir)
        return [f.to_dict() for f in found]

    def build_optimizer(self) -> torch.optim.Optimizer:
        arg = self.run.optimizer_arg
        # sync-free steps and graphs skip non-finite updates through a fused optimizer's found_inf
        fused = bool({"fused_optimizer", "sync_free", "cuda_graph"} & self.fast_plan.on)
        if arg is None:
            opt = torch.optim.AdamW(self.run.recipes.optimizer_params(1e-3), lr=1e-3, fused=fused)
        elif isinstance(arg, torch.optim.Optimizer):
            require(self.run.config.backbone_lr_scale == 1, "backbone_lr_scale needs an optimizer the Trainer builds.",
                    {"optimizer": type(arg).__name__, "backbone_lr_scale": self.run.config.backbone_lr_scale},
                    "Pass a factory, optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3): it gets the head "
                    "and backbone parameter groups (or build the groups yourself: torchwise.models.param_groups).")
            opt = arg
            self.optimizer_as_given()
        elif callable(arg) and takes_keyword(arg, "fused"):  # a factory that lets the fast plan choose
            opt = arg(self.factory_params(arg), fused=fused)
        elif callable(arg):
            opt = arg(self.factory_params(arg))
            self.optimizer_as_given()
            require(isinstance(opt, torch.optim.Optimizer), "The optimizer factory did not return an optimizer.",
                    {"returned": type(opt).__name__},
                    "Pass e.g. optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4).")
        else:
            raise ConfigError("optimizer must be an Optimizer, a factory taking the parameters, or None.",
                              values={"optimizer": type(arg).__name__},
                              fix="Pass torch.optim.AdamW(model.parameters(), lr=1e-3) or "
                                  "lambda params: torch.optim.AdamW(params, lr=1e-3).")
        checks_.check_optimizer_holds(opt, self.run.model)
        return opt

    def factory_params(self, factory: Callable[..., torch.optim.Optimizer]
                       ) -> Iterable[nn.Parameter] | list[dict[str, Any]]:
        """The parameters (or head/backbone groups) an optimizer factory is called with. For the groups the
        factory's own learning rate is read from one optimizer it builds over the plain parameters."""
        if self.run.config.backbone_lr_scale == 1:
            return self.run.model.parameters()
        return self.run.recipes.optimizer_params(float(factory(list(self.run.model.parameters())).defaults["lr"]))

    def eval_loader(self, data: Any) -> TrainLoader:
        cfg = self.run.config
        data = self.run.val_data if data is None else data
        require(data is not None, "No data to evaluate.", {"data": None, "val_data": None},
                "Pass the data: trainer.evaluate(dataset).")
        return build_loader(data, role="data", train=False, device=self.device,
                            batch_size=cfg.eval_batch_size or cfg.batch_size, seed=cfg.seed,
                            num_workers=cfg.num_workers, rank=self.run.dist.rank,
                            world_size=self.run.dist.world_size)


def takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a readable signature
        return False
