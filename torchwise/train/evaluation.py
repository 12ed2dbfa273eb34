"""Validation: eval mode, inference_mode, metrics, and the model put back as it was."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import torch
from torch import nn

from torchwise.train import input_checks as checks
from torchwise.train.batches import batch_size_of, move_to, split_batch
from torchwise.train.distributed import DistEnv, gather_objects, max_across
from torchwise.train.precision import Precision
from torchwise.train.reproducibility import capture_rng_state, restore_rng_state

MetricFn = Callable[[torch.Tensor, torch.Tensor], float]


class Evaluator:
    def __init__(self, model: nn.Module, loss_fn: Callable[..., torch.Tensor], precision: Precision,
                 device: torch.device, task: str, metrics: dict[str, MetricFn] | None,
                 dist_env: DistEnv = DistEnv()):
        self.watcher: Any = None  # set by the Trainer when checks are on
        # `model` is the plain module, never the DDP wrapper: DDP's forward may broadcast buffers, a
        # collective that would hang when ranks hold different numbers of validation batches.
        self.model, self.loss_fn, self.precision, self.device = model, loss_fn, precision, device
        self.task, self.metrics, self.dist = task, dict(metrics or {}), dist_env
        self.prepare_inputs: Callable[[Any], Any] | None = None  # the Trainer's batch_eval, on the device

    def outputs(self, batches: Iterable[Any], num_batches: int | None = None) -> tuple[list[torch.Tensor], list[Any], float, int]:
        """Run the model over `batches` in eval mode; restores train mode and every RNG afterwards.

        A sharded (FSDP) model gathers its weights inside forward, a collective: every rank must run
        the same number of forwards, so ranks with a shorter shard repeat their last batch (and
        discard the result) until the longest shard is done."""
        lockstep = self.dist.enabled and hasattr(self.model, "set_requires_gradient_sync")
        extra = max_across(num_batches or 0, self.dist, self.device) - (num_batches or 0) if lockstep else 0
        was_training = self.model.training
        rng = capture_rng_state()  # so that validating never changes what training does next
        self.model.eval()
        if self.watcher is not None:
            self.watcher.phase("eval")
        outs, targets, loss_sum, count = [], [], 0.0, 0
        non_blocking = self.device.type == "cuda"
        try:
            with torch.inference_mode(), self.precision.autocast(self.device):
                for index, batch in enumerate(batches):
                    inputs, target = split_batch(move_to(batch, self.device, non_blocking))
                    if self.prepare_inputs is not None:
                        inputs = (self.prepare_inputs(inputs[0]), *inputs[1:])
                    out = self._forward(inputs, target, first=index == 0)
                    n = batch_size_of(target)
                    loss_sum += float(self._loss(out, target, first=index == 0)) * n
                    count += n
                    outs.append(out.detach().float().cpu())
                    targets.append(target.detach().cpu() if isinstance(target, torch.Tensor) else target)
                for _ in range(extra):
                    self.model(*inputs)
        finally:
            self.model.train(was_training)
            if self.watcher is not None:
                self.watcher.phase("train")
            restore_rng_state(rng)
        return outs, targets, loss_sum, count

    def _forward(self, inputs: tuple[Any, ...], target: Any, first: bool) -> Any:
        if not first:
            return self.model(*inputs)
        try:
            out = self.model(*inputs)
        except Exception as exc:  # noqa: BLE001 - told with the batch's shapes
            if isinstance(exc, checks.TorchwiseError) or _is_oom(exc):
                raise
            raise checks.forward_error(exc, inputs, self.model, "first validation batch") from exc
        checks.check_targets(out, target, self.loss_fn, self.task, "first validation batch",
                             strict=self.task == "classification" and checks.is_cross_entropy(self.loss_fn))
        return out

    def _loss(self, out: Any, target: Any, first: bool) -> torch.Tensor:
        try:
            return self.loss_fn(out, target)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, checks.TorchwiseError) or _is_oom(exc):
                raise
            checks.check_targets(out, target, self.loss_fn, self.task, "validation data", strict=False)
            if first:
                raise checks.loss_error(exc, out, target, "first validation batch") from exc
            raise

    def gathered_outputs(self, batches: Iterable[Any], num_batches: int | None = None
                         ) -> tuple[list[torch.Tensor], list[Any], float, int]:
        """outputs() of every rank's shard put together: metrics count each sample exactly once."""
        outs, targets, loss_sum, count = self.outputs(batches, num_batches)
        if not self.dist.enabled:
            return outs, targets, loss_sum, count
        parts = gather_objects((outs, targets, loss_sum, count), self.dist)
        return ([o for p in parts for o in p[0]], [t for p in parts for t in p[1]],
                sum(p[2] for p in parts), sum(p[3] for p in parts))

    def evaluate(self, batches: Iterable[Any], prefix: str = "val", num_batches: int | None = None) -> dict[str, float]:
        outs, targets, loss_sum, count = self.gathered_outputs(batches, num_batches)
        results = {f"{prefix}_loss": loss_sum / max(count, 1)}
        if not outs or not all(isinstance(t, torch.Tensor) for t in targets):
            return results
        output, target = torch.cat(outs), torch.cat(targets)
        if self.task == "classification":
            results.update({f"{prefix}_{k}": v for k, v in classification_metrics(output, target).items()})
        else:
            results[f"{prefix}_mae"] = float((output.reshape(target.shape) - target.float()).abs().mean()) \
                if output.numel() == target.numel() else math.nan
        for name, fn in self.metrics.items():
            try:
                value = fn(output, target)
            except Exception as exc:  # noqa: BLE001 - the metric is named, with its exception
                raise checks.metric_error(exc, name, output, target) from exc
            results[f"{prefix}_{name}"] = checks.check_number(value, name)
        return results


def _is_oom(exc: BaseException) -> bool:
    from torchwise.train.failures import is_oom

    return is_oom(exc)


def classification_metrics(output: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    if output.ndim == 2 and output.shape[1] > 1 and target.ndim == 1:
        pred = output.argmax(dim=1)
        metrics = {"acc": float((pred == target).float().mean())}
        if output.shape[1] > 5:
            top5 = output.topk(5, dim=1).indices
            metrics["top5"] = float((top5 == target[:, None]).any(dim=1).float().mean())
        return metrics
    if output.numel() == target.numel():  # binary with one logit per sample
        pred = (output.reshape(target.shape) > 0).to(target.dtype)
        return {"acc": float((pred == target).float().mean())}
    return {}
