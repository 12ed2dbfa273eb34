"""The training step: ONE body (`StepRunner.body`) that every path runs, in the right order, on one screen.

The eager step, the sync-free step, the CUDA-graph capture (train/speed/graphed_step.py), lr-find, the
memory measurement (toolbox/memory.py) and the overfit check (script_check/sanity.py) all run `body`;
only how its one finite check is read differs: on the host (one sync per step, every optimizer),
or on the device (a fused optimizer's found_inf: no sync, capturable). The wrappers around it
(out-of-memory adaptation, the compile fallback, the choice of those paths) are put together in
one place: train/step/step_wrappers.py's `compose_step`.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.train import input_checks as checks
from torchwise.train.step.contract import StepContract, WholeBatch
from torchwise.train.distributed.process_group import DistEnv, sum_across
from torchwise.train.step.failures import is_compile_failure, is_oom
from torchwise.train.step.precision import Precision
from torchwise.train.distributed.sharding import is_sharded

OVERFLOW = "fp16 gradient overflow (loss scale lowered)"


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
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 loss_fn: Callable[..., torch.Tensor] | StepContract,
                 precision: Precision, device: torch.device, clip_grad_norm: float | None,
                 dist_env: DistEnv = DistEnv(), watcher: Any = None):
        self.model, self.optimizer = model, optimizer
        # how a micro-batch becomes a loss (train/step/contract.py); a plain loss_fn is the positional form
        self.contract = loss_fn if isinstance(loss_fn, StepContract) else StepContract(loss_fn, loss_given=True)
        self.loss_fn = self.contract.loss_fn
        self.dist = dist_env
        self.watcher = watcher if watcher is not None else NoWatcher()  # torchwise check's detectors
        self.precision, self.device, self.clip = precision, device, clip_grad_norm
        # Always a GradScaler: a disabled one (fp32, bf16) passes scale/unscale_/step/update through, so the
        # body has no `if scaler`. `scaler` (checkpoints, the fast plan) stays None when no loss scaling runs.
        self.amp = precision.grad_scaler(device)
        self.scaler = self.amp if self.amp.is_enabled() else None
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self._loss_checked = False
        # fn(output, target) on the first batch, before its loss: the Trainer's check of the labels
        self.check_first_batch: Callable[[Any, Any], None] | None = None
        self.sync_free = False  # fast "sync_free": run_on_device() instead of run_eager()
        self.graphed: Any = None  # fast "cuda_graph": a train/speed/graphed_step.py GraphedStep
        # Looked up once: a failed attribute lookup on nn.Module raises inside __getattr__, costly per step.
        self._has_no_sync = hasattr(model, "no_sync")
        self._fsdp = is_sharded(model)

    def run(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], measure_norm: bool) -> StepResult:
        """micro_batches: (inputs, target, n) already on the device; gradients are accumulated over all of them.
        The path is chosen by `compose_step` (train/step/step_wrappers.py): graph replay, sync-free or eager."""
        if self.graphed is not None:  # fast "cuda_graph": replays the captured body where it can
            return self.graphed.run(micro_batches, measure_norm)
        if self.sync_free:
            return self.run_on_device(micro_batches, measure_norm)
        return self.run_eager(micro_batches, measure_norm)

    def body(self, micro: list[tuple[tuple[Any, ...], Any, int]], *, on_device: bool = False,
             cache_casts: bool = True) -> _HostCheck | _DeviceCheck:
        """THE training step. on_device: the finite check stays on the device (no host sync: the host
        queues the whole step at once, and a CUDA graph can capture it; needs a fused optimizer)."""
        opt, scaler = self.optimizer, self.amp
        total = sum(n for _, _, n in micro)
        # Inside a CUDA-graph capture the gradients are None here, so backward allocates them in the graph's pool
        opt.zero_grad(set_to_none=True)
        losses = []
        for i, (inputs, target, n) in enumerate(micro):
            with self._no_sync(i == len(micro) - 1):
                with self.precision.autocast(self.device, cache_casts), self.watcher.loss_scope():
                    loss = self._loss(self.model, inputs, target)
                self._check_loss(loss)
                self.watcher.observe_backward(loss)
                # Weighting by sample count makes N accumulated micro-batches equal one batch N times larger,
                # also when the last micro-batch of an epoch is short (dividing by N would not).
                scaler.scale(loss * (n / total) if n != total else loss).backward()
            losses.append((loss.detach(), n))
        scaler.unscale_(opt)  # clip and measure true gradients, not scaled ones
        norm = total_norm(self.params, self.device)
        if self.clip is not None:
            clip_with_norm(self.params, self.clip, norm)
        check = (_DeviceCheck if on_device else _HostCheck)(self, losses, total, norm)  # the one finite check
        with check.optimizer_told(opt):  # on the device: a fused optimizer skips by itself on check.found
            if check.step:
                scaler.step(opt)
        scaler.update(check.keep_scale)  # lowers the fp16 loss scale after an overflow
        return check

    def run_eager(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], measure_norm: bool) -> StepResult:
        """The step with its finite check read on the host: any optimizer, fp16's GradScaler included."""
        return self.body(micro_batches).result(measure_norm or self.clip is not None)

    def run_on_device(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], measure_norm: bool, *,
                      cache_casts: bool = True) -> StepResult:
        """fast "sync_free": the same body, with its one host sync after the update instead of before it.
        A non-finite loss or gradient skips the update on the device (the fused optimizer's found_inf)."""
        loss, found, norm = self.device_body(micro_batches, cache_casts=cache_casts)
        loss_value, bad, norm_value = torch.stack([loss, found, norm]).tolist()  # the step's one sync
        return self.result(loss_value, bad, norm_value, sum(n for _, _, n in micro_batches),
                           measured=measure_norm or self.clip is not None)

    def device_body(self, micro_batches: list[tuple[tuple[Any, ...], Any, int]], *,
                    cache_casts: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`body` with no host sync (what a CUDA graph captures). Returns device scalars: the mean loss,
        1.0 when the update was skipped, and the gradient norm before clipping."""
        check = self.body(micro_batches, on_device=True, cache_casts=cache_casts)
        return check.loss, check.found, check.norm

    def result(self, loss: float, bad: float, norm: float, total: int, measured: bool) -> StepResult:
        """The host's view of a device step."""
        if not bad:
            return StepResult(loss, norm if measured else None, None, total)
        if not math.isfinite(loss):
            return StepResult(loss, None, f"non-finite loss ({loss})", total)
        if not math.isfinite(norm):
            return StepResult(loss, norm, f"non-finite gradient norm ({norm})", total)
        return StepResult(loss, norm, "non-finite loss or gradient on another rank", total)

    def across_ranks(self, *bad: float) -> list[float]:
        """Under DDP the decision is taken by all ranks together: a rank that skipped its update alone
        would train on other weights than the others. Returns each flag summed over the ranks."""
        return sum_across(list(bad), self.dist, self.device)

    def _no_sync(self, last_micro_batch: bool):
        # Under DDP, only the last micro-batch of an accumulated step needs the gradient all-reduce.
        if not last_micro_batch and self._has_no_sync:
            return self.model.no_sync()
        if self._fsdp:
            return _fsdp_gradient_sync(self.model, last_micro_batch)
        return contextlib.nullcontext()

    def _loss(self, model: nn.Module, inputs: Any, target: Any) -> torch.Tensor:
        """The micro-batch's loss as the contract computes it (loss_fn(model(*inputs), target) by default).
        Until the first loss passed its checks, a failure of the forward or the loss is told with the
        batch's shapes; later, a failing loss is explained when the labels are the cause (and re-raised
        as it is otherwise)."""
        contract, first = self.contract, not self._loss_checked
        if isinstance(inputs, WholeBatch):  # the user's compute_loss runs the model and the loss itself
            return contract.loss_and_output(model, inputs, target)[0]
        if first:
            try:
                output = contract.forward(model, inputs)
            except Exception as exc:  # noqa: BLE001 - re-raised, explained, unless torch must see it as it is
                if _passes_through(exc):
                    raise
                raise checks.forward_error(exc, inputs, model, "first training batch") from exc
            if self.check_first_batch is not None and contract.checks_targets:
                self.check_first_batch(*contract.for_metrics(output, target))
        else:
            output = contract.forward(model, inputs)
        try:
            return contract.loss_of(output, target)
        except Exception as exc:  # noqa: BLE001
            if _passes_through(exc):
                raise
            logits = contract.for_metrics(output, target)[0]
            task = "classification" if isinstance(logits, torch.Tensor) and logits.ndim >= 2 else ""
            checks.check_targets(logits, target, self.loss_fn, task, "training batch", strict=False)
            if first:
                raise checks.loss_error(exc, logits, target, "first training batch") from exc
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



class _HostCheck:
    """The finite check read on the host: every loss and the gradient norm in one sync, then one
    collective under DDP (every rank skips together, or none does)."""

    def __init__(self, runner: StepRunner, losses: list[tuple[torch.Tensor, int]], total: int, norm: torch.Tensor):
        norm = _full(norm)
        *values, self.norm = torch.stack([*(loss.to(norm.device) for loss, _ in losses), norm]).tolist()
        loss_sum = 0.0
        for value, (_, n) in zip(values, losses):
            loss_sum += value * n
        self.mean, self.total, self.overflow_possible = loss_sum / total, total, runner.amp.is_enabled()
        self.bad_loss = next((v for v in values if not math.isfinite(v)), None)
        bad_losses, bad_norms = runner.across_ranks(float(self.bad_loss is not None), float(not math.isfinite(self.norm)))
        self.loss_elsewhere, self.step = bool(bad_losses), not (bad_losses or bad_norms)
        # A non-finite loss is the forward's, not an fp16 overflow of backward: the loss scale stays as it was.
        self.keep_scale = runner.amp.get_scale() if bad_losses else None

    def optimizer_told(self, optimizer: torch.optim.Optimizer):
        return _NULL_SCOPE

    def result(self, measured: bool) -> StepResult:
        norm = self.norm if measured else None
        if self.step:
            return StepResult(self.mean, norm, None, self.total)
        if self.bad_loss is not None:
            return StepResult(self.bad_loss, None, f"non-finite loss ({self.bad_loss})", self.total)
        if self.loss_elsewhere:
            return StepResult(self.mean, None, "non-finite loss on another rank", self.total)
        if self.overflow_possible:  # the GradScaler's update just lowered the scale
            return StepResult(self.mean, norm, OVERFLOW, self.total)
        return StepResult(self.mean, self.norm, f"non-finite gradient norm ({self.norm})", self.total)


class _DeviceCheck:
    """The finite check kept on the device: a 0/1 flag (max over the ranks) that a fused optimizer
    reads as found_inf, skipping the update and its step count on the device."""

    step, keep_scale = True, None

    def __init__(self, runner: StepRunner, losses: list[tuple[torch.Tensor, int]], total: int, norm: torch.Tensor):
        loss_sum = torch.zeros((), device=runner.device)
        for loss, n in losses:
            loss_sum += loss.float() * n
        self.loss, self.norm = loss_sum / total, norm
        self.found = (~torch.isfinite(loss_sum) | ~torch.isfinite(norm)).float()
        if runner.dist.enabled:  # every rank skips together, or none does
            torch.distributed.all_reduce(self.found, op=torch.distributed.ReduceOp.MAX)

    @contextlib.contextmanager
    def optimizer_told(self, optimizer: torch.optim.Optimizer):
        optimizer.found_inf = self.found
        try:
            yield
        finally:
            del optimizer.found_inf


def _passes_through(exc: BaseException) -> bool:
    """Errors the step's callers act on by their type: out of memory (OOMGuard), compile failures (the
    eager fallback), torchwise's own."""
    return isinstance(exc, TorchwiseError) or is_oom(exc) or is_compile_failure(exc)


_NULL_SCOPE = contextlib.nullcontext()


class NoWatcher:
    """Stands in for a Watcher when checks are off, so the step has no `if` for it."""

    def loss_scope(self):
        return _NULL_SCOPE

    def observe_backward(self, loss: torch.Tensor) -> None:
        pass

    def end_step(self, stepped: bool = True, nonfinite_loss: bool = False, loss: float | None = None) -> None:
        pass


def total_norm(params: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The global L2 norm of the gradients, as a device scalar (no host sync): what clip_grad_norm_ computes."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), device=device)
    if hasattr(nn.utils, "get_total_norm"):  # torch >= 2.6
        return nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(grads)]))


def clip_with_norm(params: list[torch.Tensor], max_norm: float, norm: torch.Tensor) -> None:
    """clip_grad_norm_'s scaling, from a norm already computed (no host sync)."""
    if hasattr(nn.utils, "clip_grads_with_norm_"):  # torch >= 2.6
        nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        return
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))


def grad_norm(params: list[torch.Tensor]) -> float:
    return _to_float(total_norm(list(params), torch.device("cpu")))


def _full(norm: torch.Tensor) -> torch.Tensor:
    # Under FSDP the norm is a DTensor holding this rank's part; full_tensor() reduces it across ranks.
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def _to_float(norm: torch.Tensor) -> float:
    return float(_full(norm))


@contextlib.contextmanager
def _fsdp_gradient_sync(model: nn.Module, sync: bool):
    model.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
