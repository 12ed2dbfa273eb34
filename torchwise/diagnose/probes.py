"""Evidence from library calls that no module or optimizer hook sees: LR schedulers, gradient
clipping, the AMP GradScaler and distributed sampling. Installed by the Watcher in global mode
(`torchwise check`, `torchwise.watch()` with no model) as patches it removes on detach; the
decisions are in checks/calls.py.

Every wrapper records a few numbers and calls the original unchanged, so the script computes
exactly what it would without us.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from torchwise.diagnose.user_code import is_user_file, user_where

# Epoch-counting schedulers, and the number of their steps after which the schedule has done
# its work (one decay, the last milestone, half a cosine, a 100x decay): stepped per batch with a
# horizon shorter than an epoch, the whole schedule is spent inside the first epoch.
_EPOCH_SCHEDULERS = ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR")


def _horizon(sched: Any) -> float | None:
    kind = type(sched).__name__
    if kind == "StepLR":
        return float(sched.step_size)
    if kind == "MultiStepLR":
        return float(max(sched.milestones)) if sched.milestones else None
    if kind == "CosineAnnealingLR":
        return float(sched.T_max)
    if kind == "ExponentialLR" and 0 < sched.gamma < 1:
        return math.log(0.01) / math.log(sched.gamma)
    return None


@dataclass
class SchedulerCalls:
    kind: str
    horizon: float | None
    where: str | None = None
    per_pass: dict[int, int] = field(default_factory=dict)  # training pass index -> step() calls inside it
    pass_len: dict[int, int] = field(default_factory=dict)   # its number of batches (len(loader) when known)
    lr_first: float | None = None
    lr_last: float | None = None
    calls: int = 0                    # the script's step() calls in all
    collapse_at: int | None = None    # the call at which the LR first stood at 1/100 of its start or below
    ended_at_step: int | None = None  # optimizer steps when the last call came


@dataclass
class PlateauCalls:
    where: str | None = None
    calls: int = 0
    always_without_eval: bool = True  # no call so far had an evaluating forward since the previous one


class CallProbes:
    def __init__(self, watcher: Any):
        self.w = watcher
        self.schedulers: dict[int, SchedulerCalls] = {}
        self.plateaus: dict[int, PlateauCalls] = {}
        self._plateau_eval_mark: dict[int, int] = {}
        self.clip_scaled: dict[str, Any] | None = None     # first clipping of still-scaled gradients
        self.clip_useless: dict[str, Any] | None = None    # first clipping after step() / of no gradients
        self._scaled_pending: dict[int, Any] = {}          # GradScalers with scale() since their update()
        self.ddp_unsharded: dict[str, Any] | None = None
        self._loaders_checked: set[int] = set()

    # ------------------------------------------------------------------ install

    def install(self) -> None:
        """Patch the calls; each patch goes into the Watcher's list, which detach() undoes."""
        from torch.optim import lr_scheduler

        self._wrap(lr_scheduler.LRScheduler, "step", self._on_scheduler_step)
        self._wrap(lr_scheduler.ReduceLROnPlateau, "step", self._on_plateau_step)
        import torch.nn.utils as nn_utils
        import torch.nn.utils.clip_grad as clip_grad
        for owner in (nn_utils, clip_grad):
            for name in ("clip_grad_norm_", "clip_grad_value_"):
                if hasattr(owner, name):
                    self._wrap_function(owner, name)
        scaler_cls = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler_cls is not None:
            self._wrap(scaler_cls, "scale", self._on_scaler_scale)
            self._wrap(scaler_cls, "update", self._on_scaler_update)
        from torch.optim.optimizer import register_optimizer_step_post_hook
        self.w.handles.append(register_optimizer_step_post_hook(self._on_step))

    def _wrap(self, owner: Any, name: str, before: Any) -> None:
        original = owner.__dict__.get(name)
        if original is None:  # an older torch without this method on this class: nothing to watch
            return

        def wrapper(obj, *args, **kwargs):
            try:
                before(obj, args, kwargs)
            except Exception:  # a probe must never break the script it watches
                pass
            return original(obj, *args, **kwargs)

        wrapper.__wrapped__ = original
        self.w.patches.append((owner, name, original))
        setattr(owner, name, wrapper)

    def _wrap_function(self, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def wrapper(parameters, *args, **kwargs):
            if isinstance(parameters, torch.Tensor):
                params = [parameters]
            else:
                params = list(parameters)  # a generator can be read once: pass the list on
            try:
                self._on_clip(name, params)
            except Exception:
                pass
            return original(params, *args, **kwargs)

        wrapper.__wrapped__ = original
        self.w.patches.append((owner, name, original))
        setattr(owner, name, wrapper)

    # ------------------------------------------------------------------ schedulers

    def _on_scheduler_step(self, sched: Any, args: tuple, kwargs: dict) -> None:
        # the step() every scheduler makes in its own __init__, and steps that SequentialLR /
        # ChainedScheduler make on their children, are not the script's
        if getattr(sched, "_is_initial", False) or getattr(sched, "_step_count", 1) == 0:
            return
        if type(sched).__name__ not in _EPOCH_SCHEDULERS or not is_user_file(sys._getframe(2).f_code.co_filename):
            return
        rec = self.schedulers.get(id(sched))
        if rec is None:
            rec = self.schedulers[id(sched)] = SchedulerCalls(type(sched).__name__, _horizon(sched))
        lr = float(sched.optimizer.param_groups[0]["lr"])
        rec.lr_first = lr if rec.lr_first is None else rec.lr_first
        rec.lr_last = lr
        rec.calls += 1
        # (at or below: two decays by 0.1 reach exactly 1/100, give or take the float's last bit)
        if rec.collapse_at is None and rec.lr_first and lr <= rec.lr_first / 100 * (1 + 1e-6):
            rec.collapse_at = rec.calls
        rec.ended_at_step = self.w.steps
        p = self.w.loaders.cur_pass
        if p is None or p.ended or p.steps == 0:
            return  # between epochs: where an epoch scheduler belongs
        rec.per_pass[p.index] = rec.per_pass.get(p.index, 0) + 1
        try:
            rec.pass_len[p.index] = len(p.loader)
        except TypeError:
            rec.pass_len[p.index] = p.n_batches
        if rec.where is None and rec.per_pass[p.index] >= 2:
            rec.where = user_where(3)

    def _on_plateau_step(self, sched: Any, args: tuple, kwargs: dict) -> None:
        if not is_user_file(sys._getframe(2).f_code.co_filename):
            return
        rec = self.plateaus.setdefault(id(sched), PlateauCalls())
        evals = self.w.models.eval_forwards
        if evals == self._plateau_eval_mark.get(id(sched), 0):
            rec.where = rec.where or user_where(3)
        else:
            rec.always_without_eval = False
        self._plateau_eval_mark[id(sched)] = evals
        rec.calls += 1

    # ------------------------------------------------------------------ clipping and GradScaler

    def _on_scaler_scale(self, scaler: Any, args: tuple, kwargs: dict) -> None:
        if scaler.is_enabled():
            self._scaled_pending[id(scaler)] = scaler

    def _on_scaler_update(self, scaler: Any, args: tuple, kwargs: dict) -> None:
        self._scaled_pending.pop(id(scaler), None)

    def _on_clip(self, name: str, params: list) -> None:
        grads = [p.grad for p in params if isinstance(p, torch.Tensor) and p.grad is not None]
        if self.clip_useless is None:
            if params and not grads:
                self.clip_useless = {"call": name, "reason": "none of the parameters has a gradient (.grad is None)",
                                     "where": user_where(3), "step": self.w.steps}
            elif self.w.optim_steps.stepped_since_backward and self.w.loss_watch.backwards > 0:
                self.clip_useless = {"call": name, "reason": "after optimizer.step(), before the next backward()",
                                     "where": user_where(3), "step": self.w.steps}
        if self.clip_scaled is None and grads:
            for scaler in self._scaled_pending.values():
                from torch.amp.grad_scaler import OptState
                states = scaler._per_optimizer_states
                if not any(s.get("stage") is OptState.UNSCALED for s in states.values()):
                    self.clip_scaled = {"call": name, "scale": float(scaler.get_scale()), "where": user_where(3)}
                    break

    # ------------------------------------------------------------------ distributed sampling

    def _on_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        p = self.w.loaders.cur_pass
        if self.ddp_unsharded is not None or p is None or p.ended or id(p.loader) in self._loaders_checked:
            return
        self._loaders_checked.add(id(p.loader))
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler, Subset
        loader = p.loader
        if not isinstance(loader, DataLoader) or isinstance(loader.dataset, (IterableDataset, Subset)):
            return  # a stream or a hand-made per-rank subset may well be sharded already
        sampler = loader.sampler
        if type(sampler) in (RandomSampler, SequentialSampler):
            self.ddp_unsharded = {"world_size": dist.get_world_size(), "rank": dist.get_rank(),
                                  "sampler": type(sampler).__name__, "samples per rank": len(loader.dataset),
                                  "where": p.site or user_where(3)}
