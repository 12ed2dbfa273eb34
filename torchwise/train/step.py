"""One optimizer step: the seed articles' loop, in the right order, on one screen."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.train import input_checks as checks
from torchwise.train.distributed import DistEnv, sum_across
from torchwise.train.precision import Precision


@dataclass
class StepResult:
    loss: float                 # mean loss over the step's samples (nan when skipped for a non-finite loss)
    grad_norm: float | None     # global L2 norm before clipping (None when not measured)
    skipped: str | None         # why the optimizer step did not happen, or None
    samples: int

    @property
    def loss_not_finite(self) -> bool:  # this rank's loss (under DDP another rank's can be the one)
        return self.skipped is not None and not math.isfinite(self.loss)


class StepRunner:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable[..., torch.Tensor],
                 precision: Precision, device: torch.device, clip_grad_norm: float | None,
                 dist_env: DistEnv = DistEnv(), watcher: Any = None):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.dist = dist_env
        self.watcher = watcher if watcher is not None else _NoWatcher()  # torchwise check's detectors
        self.precision, self.device, self.clip = precision, device, clip_grad_norm
        self.scaler = precision.make_scaler(device)
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self._loss_checked = False
        # fn(output, target) on the first batch, before its loss: the Trainer's check of the labels
        self.check_first_batch: Callable[[Any, Any], None] | None = None
        self.sync_free = False  # fast "sync_free": run_on_device() instead of the step below
        self.graphed: Any = None  # fast "cuda_graph": a train.graphed_step.GraphedStep
        # Looked up once: a failed attribute lookup on nn.Module raises inside __getattr__, costly per step.
        self._has_no_sync = hasattr(model, "no_sync")
        self._fsdp = hasattr(model, "set_requires_gradient_sync")

    def run(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], measure_norm: bool) -> StepResult:
        """micro_batches: (inputs, target, n) already on the device; gradients are accumulated over all of them."""
        model, opt, scaler = self.model, self.optimizer, self.scaler
        if self.graphed is not None:  # fast "cuda_graph": replays the captured step where it can
            return self.graphed.run(micro_batches, measure_norm)
        if self.sync_free:
            return self.run_on_device(micro_batches, measure_norm)
        total = sum(n for _, _, n in micro_batches)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for i, (inputs, target, n) in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            with self._no_sync(last):
                with self.precision.autocast(self.device), self.watcher.loss_scope():
                    loss = self._loss(model, inputs, target)
                self._check_loss(loss)
                value = loss.item()
                if not self._all_finite(value):
                    reason = f"non-finite loss ({value})" if not math.isfinite(value) else "non-finite loss on another rank"
                    return StepResult(value, None, reason, total)
                # Weighting by sample count makes N accumulated micro-batches equal one batch N times larger,
                # also when the last micro-batch of an epoch is short (dividing by N would not).
                weighted = loss * (n / total) if n != total else loss
                self.watcher.observe_backward(loss)
                (scaler.scale(weighted) if scaler is not None else weighted).backward()
            loss_sum += value * n
        if scaler is not None:
            scaler.unscale_(opt)  # clip and measure true gradients, not scaled ones
        norm = None
        if self.clip is not None:
            norm = _to_float(nn.utils.clip_grad_norm_(self.params, self.clip))
        elif measure_norm:
            norm = grad_norm(self.params)
        if scaler is not None:
            scale_before = scaler.get_scale()
            scaler.step(opt)   # skips the update by itself when gradients hold inf/nan
            scaler.update()
            if scaler.get_scale() < scale_before:
                return StepResult(loss_sum / total, norm, "fp16 gradient overflow (loss scale lowered)", total)
        else:
            if norm is not None and not math.isfinite(norm):
                return StepResult(loss_sum / total, norm, f"non-finite gradient norm ({norm})", total)
            opt.step()
        return StepResult(loss_sum / total, norm, None, total)

    def run_on_device(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], measure_norm: bool, *,
                      cache_casts: bool = True) -> StepResult:
        """fast "sync_free": the same step, with one host sync at its end instead of one per micro-batch.
        A non-finite loss or gradient skips the update on the device (the fused optimizer's found_inf)."""
        loss, found, norm = self.device_body(micro_batches, cache_casts=cache_casts)
        loss_value, bad, norm_value = torch.stack([loss, found, norm]).tolist()  # the step's one sync
        return self.result(loss_value, bad, norm_value, sum(n for _, _, n in micro_batches),
                           measured=measure_norm or self.clip is not None)

    def device_body(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], *,
                    cache_casts: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward, backward, finiteness, clipping and update with no host sync, so that the host queues
        the whole step at once (and a CUDA graph can capture it). Returns device scalars: the mean loss,
        1.0 when the update was skipped, and the gradient norm before clipping."""
        model, opt = self.model, self.optimizer
        total = sum(n for _, _, n in micro_batches)
        # Inside a CUDA-graph capture the gradients are None here, so backward allocates them in the graph's pool
        opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device)
        for i, (inputs, target, n) in enumerate(micro_batches):
            with self._no_sync(i == len(micro_batches) - 1):
                with self.precision.autocast(self.device, cache_casts), self.watcher.loss_scope():
                    loss = self._loss(model, inputs, target)
                self._check_loss(loss)
                self.watcher.observe_backward(loss)
                (loss * (n / total) if n != total else loss).backward()
            loss_sum += loss.detach().float() * n
        norm = _device_norm([p.grad for p in self.params if p.grad is not None], self.device)
        found = (~torch.isfinite(loss_sum) | ~torch.isfinite(norm)).float()
        if self.dist.enabled:  # every rank skips together, or none does
            torch.distributed.all_reduce(found, op=torch.distributed.ReduceOp.MAX)
        if self.clip is not None:  # as clip_grad_norm_ does, without reading the norm on the host
            coef = torch.clamp(self.clip / (norm + 1e-6), max=1.0)
            torch._foreach_mul_([p.grad for p in self.params if p.grad is not None], coef)
        opt.found_inf = found  # read by fused optimizers: no update, no step count, when it is 1
        try:
            opt.step()
        finally:
            del opt.found_inf
        return loss_sum / total, found, norm

    def result(self, loss: float, bad: float, norm: float, total: int, measured: bool) -> StepResult:
        """The host's view of a device step."""
        if not bad:
            return StepResult(loss, norm if measured else None, None, total)
        if not math.isfinite(loss):
            return StepResult(loss, None, f"non-finite loss ({loss})", total)
        if not math.isfinite(norm):
            return StepResult(loss, norm, f"non-finite gradient norm ({norm})", total)
        return StepResult(loss, norm, "non-finite loss or gradient on another rank", total)

    def _all_finite(self, value: float) -> bool:
        """Under DDP the decision is taken by all ranks together: a rank that skipped backward alone
        would leave the others waiting in the gradient all-reduce forever."""
        bad = 0.0 if math.isfinite(value) else 1.0
        if self.dist.enabled:
            bad = sum_across([bad], self.dist, self.device)[0]
        return bad == 0.0

    def _no_sync(self, last_micro_batch: bool):
        # Under DDP, only the last micro-batch of an accumulated step needs the gradient all-reduce.
        if not last_micro_batch and self._has_no_sync:
            return self.model.no_sync()
        if self._fsdp:
            return _fsdp_gradient_sync(self.model, last_micro_batch)
        return contextlib.nullcontext()

    def _loss(self, model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
        """loss_fn(model(*inputs), target). Until the first loss passed its checks, a failure of the forward
        or the loss is told with the batch's shapes; later, a failing loss is explained when the labels
        are the cause (and re-raised as it is otherwise)."""
        first = not self._loss_checked
        if first:
            try:
                output = model(*inputs)
            except Exception as exc:  # noqa: BLE001 - re-raised, explained, unless torch must see it as it is
                if _passes_through(exc):
                    raise
                raise checks.forward_error(exc, inputs, model, "first training batch") from exc
            if self.check_first_batch is not None:
                self.check_first_batch(output, target)
        else:
            output = model(*inputs)
        try:
            return self.loss_fn(output, target)
        except Exception as exc:  # noqa: BLE001
            if _passes_through(exc):
                raise
            task = "classification" if isinstance(output, torch.Tensor) and output.ndim >= 2 else ""
            checks.check_targets(output, target, self.loss_fn, task, "training batch", strict=False)
            if first:
                raise checks.loss_error(exc, output, target, "first training batch") from exc
            raise

    def _check_loss(self, loss: Any) -> None:
        if self._loss_checked:
            return
        if not isinstance(loss, torch.Tensor):
            raise TorchwiseError("The loss function must return a tensor.", values={"returned": type(loss).__name__},
                                 fix="Return the loss tensor itself (not loss.item()), so it can be backpropagated.")
        if loss.ndim != 0:
            raise TorchwiseError("The loss function returned a tensor that is not a scalar.",
                                 values={"shape": tuple(loss.shape)},
                                 fix="Reduce it to one number, e.g. nn.CrossEntropyLoss(reduction='mean') or loss.mean().")
        if not loss.requires_grad:
            raise TorchwiseError("The loss does not depend on any trainable parameter (it has no gradient).",
                                 values={"loss": float(loss.detach())},
                                 fix="Compute the loss from the model's output without .detach(), .item() or "
                                     "torch.no_grad(), and make sure some parameters have requires_grad=True.")
        self._loss_checked = True


def _passes_through(exc: BaseException) -> bool:
    """Errors the step's callers act on by their type: out of memory (OOMGuard), compile failures (the
    eager fallback), torchwise's own."""
    from torchwise.toolbox.oom import is_oom
    from torchwise.train.fast import is_compile_failure

    return isinstance(exc, TorchwiseError) or is_oom(exc) or is_compile_failure(exc)


_NULL_SCOPE = contextlib.nullcontext()


class _NoWatcher:
    """Stands in for a Watcher when checks are off, so the step has no `if` for it."""

    def loss_scope(self):
        return _NULL_SCOPE

    def observe_backward(self, loss: torch.Tensor) -> None:
        pass

    def end_step(self, stepped: bool = True, nonfinite_loss: bool = False, loss: float | None = None) -> None:
        pass


def grad_norm(params: list[torch.Tensor]) -> float:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    if hasattr(nn.utils, "get_total_norm"):
        return _to_float(nn.utils.get_total_norm(grads))
    return _to_float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def _device_norm(grads: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    if not grads:
        return torch.zeros((), device=device)
    norms = torch._foreach_norm(grads)
    return torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))


def _to_float(norm: torch.Tensor) -> float:
    # Under FSDP the norm is a DTensor holding this rank's part; full_tensor() reduces it across ranks.
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


@contextlib.contextmanager
def _fsdp_gradient_sync(model: nn.Module, sync: bool):
    model.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
