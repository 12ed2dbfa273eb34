"""Watch a training run and find its silent mistakes, using PyTorch's own hooks.

One implementation serves three doors:

* `torchwise check script.py` runs an unmodified script under a `Watcher` in *global* mode:
  global module forward (pre-)hooks, global optimizer step pre/post hooks, a TorchFunctionMode
  that sees functional losses (F.cross_entropy, ...), relu and loss bookkeeping, a patched
  `torch.autograd.backward` (which `Tensor.backward` calls) and patched `DataLoader.__init__` /
  `__iter__`. Nothing is known in advance: models are found as the top-level modules with
  parameters that get called, optimizers at their first step, loaders when iterated.
* `torchwise.watch(model=None, optimizer=None)` is a context manager around a user's own loop
  (global mode, or local hooks on the given model/optimizer).
* The Trainer attaches a Watcher to its own model/optimizer in *driven* mode: it tells the Watcher
  what it already knows (phase, loss, the end of each step) instead of being watched by hooks.

Cost model. Cheap observations run every step (a local forward pre-hook on each model, the
optimizer step hooks, a detached copy of the loss). Expensive ones (per-module hooks, loss
inspection, gradient/weight norms, parameter snapshots for the update size) run only in *deep*
steps: the first `deep_first` optimizer steps and then every `deep_every`-th step (check mode: 50, then every
10th; a verdict needs enough evidence, not every step), and in check mode the first evaluation passes over a loader
that no step was taken on, wherever they fall (loader_passes.DEEP_EVAL_PASSES).
Driven mode goes further, because the Trainer itself guarantees what the cheap hooks watch for
(zero_grad, train/eval mode): between deep steps no hook is registered at all, and after the first
`deep_first` steps a deep step runs only while the deep steps' extra time stays within
`deep_budget` (1% by default; the Trainer passes 0.5%) of the training time, measured as it runs.

API for the Trainer (and anyone driving the loop themselves)::

    w = Watcher(deep_every=50, deep_first=5)     # check_mode=False: no script-only machinery
    w.attach(model, optimizer)                   # local hooks only; call once, before training
    w.attach_loaders(train=train_loader, val=val_loader)   # optional: enables the loader checks
                                                 #   (patches DataLoader.__iter__ until detach())
    w.phase("train")  /  w.phase("eval")         # what the loop is doing now
    with w.loss_scope():                         # around the loss computation only:
        loss = loss_fn(outputs, targets)         #   sees F.cross_entropy & co. with their inputs
    w.observe_backward(loss)                     # just before loss.backward()
    ...optimizer.step()  # the step hooks do the rest
    # driven mode (attach(model, optimizer, driven=True)): the loop calls, after every step,
    w.end_step(stepped=True)                     #   stepped=False for a skipped step
    findings = w.findings()                      # list[catalog.Finding]; cheap to call repeatedly
    w.detach()                                   # removes every hook; the Watcher stays readable

`Finding.to_dict()` gives {"id", "severity", "title", "message", "where", "evidence", "why",
"fix", "detected_by"}; `w.report()` the whole JSON report; `w.render()` the text a person reads.
The overfit-one-batch sanity test is `torchwise.script_check.sanity.overfit_one_batch(model, inputs,
targets, loss_fn)` (works on a copy). Measured cost of the Trainer path: bench/bench_check_overhead.py.

The Watcher is composed of parts, each an object in a module of its own that owns its state and sees the
Watcher through a Protocol of what it reads (the detectors in checks/ read the evidence as w.<part>.<name>):
w.health (health.py: its own failures, stopping a checked script), w.deep (deep_steps.py: which steps are
deep, NaN hunts), w.models (model_hooks.py: the models' forwards), w.inputs (model_inputs.py: what the
models are fed), w.optim_steps (step_hooks.py: optimizer steps), w.loss_watch (backward_hooks.py: losses and
backward()) and w.loaders (loader_passes.py: DataLoader passes); function_mode.py (the TorchFunctionMode and
the warnings raised inside torch calls) and output_tap.py (what a checked script prints) are its helpers.
The Watcher itself holds the run's clock (steps) and mode, creates the parts, attaches and detaches their
hooks, and holds the loop-facing API and the results.
"""
from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any

import torch
from torch import nn

from torchwise.diagnose.backward_hooks import LossAndBackward
from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks import followed
from torchwise.diagnose.deep_steps import NONFINITE_HUNT_STEPS, OP_HUNT_STEPS, DeepSteps
from torchwise.diagnose.function_mode import FunctionMode
from torchwise.diagnose.health import IDLE_FORWARDS, STRICT_ENV, SWALLOWED_STOPS, CheckerHealth, StopScript
from torchwise.diagnose.loader_passes import LoaderPasses
from torchwise.diagnose.model_hooks import ModelHooks
from torchwise.diagnose.model_inputs import TRAIN_REPEAT_PROBE, ModelInputs
from torchwise.diagnose.objective import Objectives
from torchwise.diagnose.output_tap import OutputTap
from torchwise.diagnose.step_hooks import StepHooks
from torchwise.diagnose.user_code import user_where
from torchwise.diagnose.watch_parts import PassInfo, RootInfo

# the names this module has always offered (the runner, the Trainer, follow and the tests import them here)
__all__ = ["IDLE_FORWARDS", "NONFINITE_HUNT_STEPS", "OP_HUNT_STEPS", "STRICT_ENV", "SWALLOWED_STOPS",
           "TRAIN_REPEAT_PROBE", "OutputTap", "PassInfo", "RootInfo", "StopScript", "Watcher", "watch"]

_NULL_SCOPE = contextlib.nullcontext()  # reusable: entering it twice is fine


class Watcher:
    """Collects evidence from a training run and turns it into findings (see the module doc)."""

    def __init__(self, *, check_mode: bool = False, max_steps: int | None = None,
                 deep_first: int | None = None, deep_every: int | None = None,
                 hash_rows: bool | None = None, deep_budget: float = 0.01):
        self.check_mode = check_mode
        self.health = CheckerHealth(check_mode)  # its own failures and the stop of a checked script
        self.deep = DeepSteps(self, check_mode, deep_first, deep_every, deep_budget)  # which steps are deep
        self.loaders = LoaderPasses(self)        # the passes over DataLoaders: the run's epochs and evaluations
        self.inputs = ModelInputs(self, check_mode if hash_rows is None else hash_rows)  # what the models are fed
        self.loss_watch = LossAndBackward(self)  # the losses and backward() calls
        self.models = ModelHooks(self)           # which modules are models, and their forwards
        self.optim_steps = StepHooks(self)       # the optimizer steps (and hand-written updates)
        self.driven = False
        # the names of the class indices, when the run knows them (torchwise train: the folder names); findings
        # about classes say "class 3 ('dog')" instead of an index the user has to look up
        self.class_names: list[str] | None = None
        # the training split's count per class index, when the run knows it (torchwise train): label-imbalance
        # then judges and quotes the counts of the run's data table, not the sample of batches it checked
        self.class_counts: list[int] | None = None
        self.max_steps = max_steps or None
        self.steps = 0  # optimizer steps so far (counted by optim_steps): the clock every part and detector reads
        self.phase_now: str | None = None  # what phase() last said the loop does ('train', 'eval'), or None
        self._loss_scope = False
        self.attached = False
        self.global_mode = False
        self.handles: list = []
        self.patches: list[tuple[Any, str, Any]] = []
        self.function_mode: FunctionMode | None = None
        self.hits: dict[str, int] = {}
        self.hit_where: dict[str, str | None] = {}
        self.hit_info: dict[str, dict] = {}
        self.calls: Any = None  # probes.CallProbes in global mode: schedulers, clipping, GradScaler, DDP
        self._findings: list[Finding] | None = None
        self._init_detectors_evidence()

    def _init_detectors_evidence(self) -> None:
        # evidence of symmetric-init, compare-values-not-indices, eval-without-no-grad, accumulation-unscaled
        # (gathered and decided in checks/model.py, losses.py, optim.py)
        self.followed: dict[int, tuple[weakref.ref, str]] = {}  # model outputs and max/topk values of them
        self.loss_outs: dict[int, tuple[weakref.ref, str]] = {}  # tensors returned by loss functions
        self.last_layer: dict[int, int] = {}                    # root id -> last Linear/Conv its forward ran
        self.param_init_where: dict[int, str | None] = {}
        self.graph_uses: list[dict] = []
        self.symmetry: dict[str, Any] = {"scanned": set(), "done": set(), "cands": {}}
        self.tokens_rows = followed.TokensAndRows()  # the task's evidence: token ids encoded, outputs indexed by rows
        self.judgement: dict | None = None  # the optimizer steps' shared record (checks/step_record.jstate)
        self.accum: dict[int, dict] | None = None               # per optimizer; only with the backward patch
        self.objective = Objectives()  # what each optimizer is trained on (diagnose/objective.py)

    def hit(self, id: str, *, info: dict | None = None, where: str | None = None) -> None:
        """Count one sighting of mistake `id` (the first one's line and what it carried are kept)."""
        self.hits[id] = self.hits.get(id, 0) + 1
        if id not in self.hit_where:
            self.hit_where[id] = where or user_where()
        if info:
            self.hit_info.setdefault(id, {}).update(info)

    # ------------------------------------------------------------------ attach / detach

    def attach(self, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
               *, global_hooks: bool | None = None, driven: bool = False) -> "Watcher":
        """Start watching. With no model, or global_hooks=True, every model/optimizer/loader in the
        process is watched (what `torchwise check` does); otherwise only the given ones.
        driven=True (local mode only): the loop calls end_step() after each step, and the per-step
        hooks exist only in deep steps and evaluation passes."""
        if self.attached:
            return self
        self.attached = True
        self.global_mode = (model is None) if global_hooks is None else global_hooks
        self.driven = driven and not self.global_mode
        self.deep.next_deep = self.deep.deep_every
        if model is not None:
            self.models.add_root(model)
        if optimizer is not None:
            self.optim_steps.add_optimizer(optimizer)
            if not self.global_mode:
                self.optim_steps.local_opts.add(id(optimizer))
                if not self.driven:
                    self.handles.append(optimizer.register_step_pre_hook(self.optim_steps.on_step_pre))
                    self.handles.append(optimizer.register_step_post_hook(self.optim_steps.on_step_post))
        if not self.driven:
            # The models' own hook dicts stay untouched: a hook stored in a module is pickled by
            # torch.save(model), copied by deepcopy and compiled by torch.jit.script.
            from torch.nn.modules.module import register_module_forward_pre_hook
            self.handles.append(register_module_forward_pre_hook(self.models.global_root_pre))
        if self.global_mode:
            from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
            self.handles.append(register_optimizer_step_pre_hook(self.optim_steps.on_step_pre))
            self.handles.append(register_optimizer_step_post_hook(self.optim_steps.on_step_post))
            self.loss_watch.patch_backward()
            self.loaders.patch_dataloader()
            from torchwise.diagnose.probes import CallProbes
            self.calls = CallProbes(self)
            self.calls.install()
            self.enter_function_mode()
        self.deep.set_deep(True)
        return self

    def enter_function_mode(self) -> None:
        """Enter the TorchFunctionMode that sees functional losses, relu and accumulation (global mode, or a
        user's own loop under watch(model)); detach() leaves it."""
        self.function_mode = FunctionMode(self)
        self._mode_paused = False
        self.function_mode.__enter__()

    def pause_function_mode(self, paused: bool) -> None:
        """Between deep steps the function mode sees nothing it keeps, yet every torch call would pass through
        it: it leaves the mode stack after a deep step and comes back before the next one. Only while it is the
        top of the stack (a mode the script entered later stays where it is, and ours waits until the stack
        is empty again), and not before the first optimizer step (a hand-written update is found through it)."""
        mode = self.function_mode
        if mode is None or self.driven or not self.optim_steps.optimizers or self.optim_steps.manual_watch:
            return
        from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode
        stack = _get_current_function_mode_stack()
        if paused and not self._mode_paused and stack and stack[-1] is mode:
            _pop_mode()
            self._mode_paused = True
        elif not paused and self._mode_paused and not stack:
            _push_mode(mode)
            self._mode_paused = False

    def detach(self) -> None:
        """Remove every hook and patch. Findings stay available."""
        if not self.attached:
            return
        self.deep.set_deep(False)
        if self.function_mode is not None:
            self.function_mode.active = False
            try:
                from torch.overrides import _get_current_function_mode_stack
                stack = _get_current_function_mode_stack()
                if stack and stack[-1] is self.function_mode:
                    self.function_mode.__exit__(None, None, None)
                # else: the user entered a mode of their own on top and has not left it; ours stays
                # underneath, inert, rather than popping theirs
            except Exception:
                pass
            self.function_mode = None
        for h in list(self.handles) + list(self.optim_steps.grad_hooks.values()) + self.deep.driven_handles:
            h.remove()
        self.handles.clear()
        self.deep.driven_handles.clear()
        self.optim_steps.grad_hooks.clear()
        for info in self.models.roots.values():
            for h in info.handles:
                h.remove()
            info.handles.clear()
        for owner, name, original in reversed(self.patches):
            setattr(owner, name, original)
        self.patches.clear()
        self.attached = False

    # ------------------------------------------------------------------ trainer-facing API

    def attach_loaders(self, train: Any = None, val: Any = None) -> None:
        """Tell the Watcher which loaders are which (Trainer); their passes are then tracked."""
        self.loaders.attach(train, val)

    def phase(self, name: str) -> None:
        """'train' or 'eval': what the loop does from now on (for loops the Watcher cannot infer)."""
        self.phase_now = name
        if self.driven:
            self.deep.sync_driven_hooks()

    def end_step(self, stepped: bool = True, nonfinite_loss: bool = False, loss: float | None = None) -> None:
        """Driven mode: one training step is over (see DeepSteps.end_step)."""
        self.deep.end_step(stepped, nonfinite_loss, loss)

    @property
    def is_deep(self) -> bool:
        """Whether the step now running is a deep one (expensive observations on)."""
        return self.deep.active

    @property
    def in_loss_scope(self) -> bool:
        """Whether the loop is inside loss_scope() now (functional losses are inspected there)."""
        return self._loss_scope

    def loss_scope(self):
        """Wrap the loss computation: functional losses inside are inspected in deep steps."""
        if not self.deep.active or self.function_mode is not None:
            return _NULL_SCOPE  # most steps: no generator-based context manager to build
        return self._deep_loss_scope()

    @contextlib.contextmanager
    def _deep_loss_scope(self):
        self._loss_scope = True
        mode = FunctionMode(self)
        try:
            with mode:
                yield
        finally:
            self._loss_scope = False

    def observe_backward(self, loss: torch.Tensor) -> None:
        """Call just before loss.backward() when the Watcher is not in global mode."""
        if self.global_mode:
            return
        if self.driven and not self.deep.active:
            self.loss_watch.backwards += 1  # the loss value comes with end_step()
            return
        if self.deep.active and isinstance(loss, torch.Tensor):
            self.objective.on_backward(loss)
        self.loss_watch.on_backward(loss)

    # ------------------------------------------------------------------ results

    def findings(self) -> list[Finding]:
        """Decide on everything observed so far. Cheap; safe to call more than once."""
        for p in self.loaders.passes:
            if not p.closed and p is not self.loaders.cur_pass:
                self.loaders.end_pass(p)
        from torchwise.diagnose import checks
        return checks.decide_all(self)

    def loss_values(self) -> list[float]:
        if not self.loss_watch.losses:
            return []
        if self.driven:  # end_step() brought floats
            return [float(v) for v in self.loss_watch.losses]
        return [float(v) for v in torch.stack([v.reshape(()).float().cpu() for v in self.loss_watch.losses]).tolist()]

    def report(self, findings: list[Finding] | None = None) -> dict[str, Any]:
        found = self.findings() if findings is None else findings
        return {"findings": [f.to_dict() for f in found], "steps": self.steps,
                "backward_calls": self.loss_watch.backwards,
                "models": [r.label for r in self.models.roots.values()],
                "optimizers": [type(o).__name__ for o in self.optim_steps.optimizers],
                "data_loader_passes": len(self.loaders.passes)}

    def render(self, findings: list[Finding] | None = None) -> str:
        found = self.findings() if findings is None else findings
        if not found:
            return f"torchwise: no silent mistakes found ({self.steps} optimizer steps watched)."
        parts = [f.render() for f in found]
        counted = {s: sum(f.severity == s for f in found) for s in ("error", "warning", "info")}
        hints = f", {counted['info']} hint(s) that may be by design" if counted["info"] else ""
        parts.append(f"torchwise: {len(found)} finding(s) ({counted['error']} error(s), {counted['warning']} "
                     f"warning(s){hints}) in {self.steps} optimizer steps.")
        return "\n\n".join(parts)


@contextlib.contextmanager
def watch(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
          print_findings: bool = True, deep_every: int | None = None):
    """Watch the training code run inside the block and report its silent mistakes at the end.

        with torchwise.watch() as w:           # or torchwise.watch(model, optimizer)
            for epoch in range(3):
                train_one_epoch(...)
        w.findings()                            # list of Finding; printed at exit by default

    With no model, every model, optimizer and DataLoader used in the block is watched (the same
    instrumentation as `torchwise check`).
    """
    w = Watcher(check_mode=model is None, deep_every=deep_every)
    w.attach(model, optimizer, global_hooks=model is None)
    if model is not None:
        # a user's own loop: losses and backward are only visible through the global patches
        w.loss_watch.patch_backward()
        w.loaders.patch_dataloader()
        w.enter_function_mode()
    try:
        yield w
    finally:
        w.detach()
        if print_findings:
            print(w.render(), file=sys.stderr)
