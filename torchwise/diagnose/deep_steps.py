"""Which steps are deep (the expensive observations on) and the hunts for where a NaN is born.

Its own module because it is the watcher's cost model (see watch.py's docstring): the schedule of deep
steps, the per-module hooks it adds and removes, the driven mode's time budget, and the NaN hunts that keep
steps deep until the culprit is named. The hooks only ask w.deep.active; none of them decides it.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Protocol

import torch

from torchwise.diagnose.function_mode import FunctionMode
from torchwise.diagnose.tensors import all_finite
from torchwise.diagnose.user_code import user_where
from torchwise.diagnose.watch_parts import LossesView, ModelsView, StepsView


NONFINITE_HUNT_STEPS = 50
# check mode: every operation's output is looked at for NaN/inf in the first OP_HUNT_STEPS optimizer steps (a
# NaN from the start), and again from the first non-finite loss or module output on (the next forwards)
OP_HUNT_STEPS = 10  # deep steps after the first nan/inf loss, looking for the module that makes it
# check mode: after this many optimizer steps a deep step's model forwards are "light": inside them the function
# mode only hunts NaN-making operations and token encodings (its layers' hooks stay). What else it sees inside a
# forward (the loss and relu calls a model makes itself, the objective's tags) has been seen by then, and its
# per-operation analysis is most of a deep step's cost on a model of many small layers. Never while a NaN is hunted.
LIGHT_AFTER_STEPS = 20
# check mode: the deep window (deep_first steps) also ends once the function mode has analysed this many torch
# calls, after at least DEEP_MIN_STEPS steps: a step that is a whole episode or rollout (thousands of forwards and
# distribution calls: A2C collecting 2,048 transitions) holds as much evidence as a hundred plain steps, and costs
# as much; later steps are deep on the deep_every schedule as before
DEEP_CALL_BUDGET = 100_000
DEEP_MIN_STEPS = 3


class DeepWatcher(Protocol):
    """What DeepSteps reads of the Watcher (the hooks it adds and removes belong to the parts named here)."""
    models: ModelsView
    optim_steps: StepsView
    loss_watch: LossesView
    steps: int
    check_mode: bool
    driven: bool
    attached: bool
    phase_now: str | None
    function_mode: FunctionMode | None   # the TorchFunctionMode while one is entered

    def pause_function_mode(self, paused: bool) -> None: ...


class DeepSteps:
    """The Watcher's part (w.deep) that schedules deep steps (and, in driven mode, measures what they cost) and
    hunts for where a NaN is born. `active`: whether the step now running is a deep one."""

    def __init__(self, w: DeepWatcher, check_mode: bool, deep_first: int | None, deep_every: int | None,
                 deep_budget: float):
        self.w = w
        # driven mode: deep steps after the first deep_first cost at most this share of the run's time
        # (see _deep_affordable)
        self.deep_budget = deep_budget
        self.next_deep = 0
        self._step_times: dict[bool, list[float]] = {True: [], False: []}
        self._elapsed = self._deep_time = 0.0
        self._deep_count = 0
        self._last_end: float | None = None
        self.driven_handles: list = []
        self.deep_first = deep_first if deep_first is not None else (50 if check_mode else 5)
        self.deep_every = deep_every if deep_every is not None else (10 if check_mode else 50)
        self.active = True
        self._deep_handles: list = []
        self.nonfinite_culprit: dict | None = None
        self.first_nonfinite_loss_step: int | None = None
        self.nonfinite_op: dict | None = None
        self.op_hunt = check_mode  # check runs are short: look for the op that makes NaN from the start

    def end_step(self, stepped: bool = True, nonfinite_loss: bool = False, loss: float | None = None) -> None:
        """Driven mode: one training step is over. stepped=False: the loop skipped its optimizer step;
        nonfinite_loss=True: because the loss was nan/inf (the next steps look for the culprit); loss:
        the step's mean loss, for the loss curve (a float the loop has anyway: no tensor kept per step)."""
        now = time.perf_counter()
        was_deep = self.active
        if self._last_end is not None:
            dt = now - self._last_end
            times = self._step_times[was_deep]
            times.append(dt)
            del times[:-16]
            self._elapsed += dt
            if was_deep:
                self._deep_time += dt
                self._deep_count += 1
        if was_deep:  # the next one at least deep_every steps later, and only when the budget allows
            self.next_deep = self.w.steps + (1 if stepped else 0) + self.deep_every
        if nonfinite_loss and self.first_nonfinite_loss_step is None:
            self.first_nonfinite_loss_step = self.w.steps
        if loss is not None and len(self.w.loss_watch.losses) < 200_000:
            self.w.loss_watch.losses.append(loss)
            self.w.loss_watch.loss_steps.append(self.w.steps)
        if stepped:
            self.w.optim_steps.after_step()
        else:
            want = self.want_deep()
            if want != self.active:
                self.set_deep(want)
        self._last_end = time.perf_counter()  # the Watcher's own bookkeeping is not counted as step time

    def _deep_affordable(self) -> bool:
        """Driven mode: whether one more deep step keeps the deep steps' extra time within deep_budget of
        the time measured so far. A deep step's extra time is its duration less a plain step's (medians
        of the last 16 of each kind, so that an evaluation pass between two steps does not move them);
        it is about one plain step on a tiny model and a few percent of one on a large model."""
        plain, deep = self._step_times[False], self._step_times[True]
        if len(plain) < 3 or not deep:
            return False
        p, d = statistics.median_high(plain), statistics.median_high(deep)
        spent = self._deep_time - self._deep_count * p
        return spent + max(0.0, d - p) <= self.deep_budget * self._elapsed

    def set_deep(self, on: bool) -> None:
        self.active = on
        if on and not self._deep_handles and self.w.attached:
            if not self.w.driven:  # global hooks (see attach); local mode filters by the models' modules
                from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
                self._deep_handles.append(register_module_forward_pre_hook(self.w.models.mod_pre))
                self._deep_handles.append(register_module_forward_hook(self.w.models.mod_post))
            else:
                for info in self.w.models.roots.values():
                    for m in info.module.modules():
                        self._deep_handles.append(m.register_forward_pre_hook(self.w.models.mod_pre))
                        self._deep_handles.append(m.register_forward_hook(self.w.models.mod_post))
        elif not on and self._deep_handles:
            for h in self._deep_handles:
                h.remove()
            self._deep_handles.clear()
        self.w.models.reset_stack()
        if self.w.driven:
            self.sync_driven_hooks()
        elif self.w.function_mode is not None:
            self.w.pause_function_mode(not on)

    def sync_driven_hooks(self) -> None:
        """Driven mode: the model's root hook and the optimizer hooks exist in deep steps and evaluation
        passes only. The Trainer guarantees what they watch in between (zero_grad, train/eval mode),
        and a registered hook costs even when it returns at once."""
        want = self.w.attached and (self.active or self.w.phase_now == "eval")
        if want and not self.driven_handles:
            for info in self.w.models.roots.values():  # first, as when registered at attach time
                self.driven_handles.append(info.module.register_forward_pre_hook(self.w.models.root_pre, prepend=True))
            for opt in self.w.optim_steps.optimizers:
                if id(opt) in self.w.optim_steps.local_opts:
                    self.driven_handles.append(opt.register_step_pre_hook(self.w.optim_steps.on_step_pre))
                    self.driven_handles.append(opt.register_step_post_hook(self.w.optim_steps.on_step_post))
        elif not want and self.driven_handles:
            for h in self.driven_handles:
                h.remove()
            self.driven_handles.clear()

    def light(self) -> bool:
        """Whether model forwards of this (deep) step are light (see LIGHT_AFTER_STEPS)."""
        return (self.w.check_mode and self.w.steps >= LIGHT_AFTER_STEPS and not self.op_hunt
                and self.nonfinite_culprit is None and self.first_nonfinite_loss_step is None)

    def want_deep(self) -> bool:
        s = self.w.steps
        if (s < self.deep_first and not self._calls_spent(s)) or self._want_nonfinite_hunt():
            return True
        if self.w.driven:
            return s >= self.next_deep and self._deep_affordable()
        return s % self.deep_every == 0

    def _calls_spent(self, steps: int) -> bool:
        mode = self.w.function_mode
        return (self.w.check_mode and steps >= DEEP_MIN_STEPS and mode is not None
                and mode.analysed >= DEEP_CALL_BUDGET)

    def _want_nonfinite_hunt(self) -> bool:
        # bounded: a nan that no module makes (log(0) in the loss, one bad batch) must not leave every
        # later step deep
        first = self.first_nonfinite_loss_step
        return (first is not None and self.nonfinite_culprit is None and not self.w.check_mode
                and self.w.steps - first < NONFINITE_HUNT_STEPS)

    def hunt_op(self, func: Any, args: tuple, out: Any) -> None:
        """The first operation that turns finite inputs into NaN/inf (runs only after a non-finite loss)."""
        try:
            if not torch.is_grad_enabled() or getattr(func, "__name__", "") == "__get__":
                return  # optimizer internals and attribute reads (p.grad) are not where a NaN is born
            if not isinstance(out, torch.Tensor) or not out.is_floating_point() or all_finite(out):
                return
            ins = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
            if ins and all(all_finite(a) for a in ins):
                qual = getattr(func, "__qualname__", "") or ""
                name = getattr(func, "__name__", None) or repr(func)
                mod = getattr(func, "__module__", None) or ""
                if "Tensor" in qual:
                    label = f"Tensor.{name}"
                elif mod == "torch.nn.functional":
                    label = f"torch.nn.functional.{name}"
                else:
                    label = f"torch.{name}"
                stack = self.w.models.stack
                self.nonfinite_op = {"op": label, "where": user_where(),
                                     "module": self.w.models.module_name(stack[-1]) if stack else None}
                self.op_hunt = False
        except Exception:
            self.op_hunt = False
