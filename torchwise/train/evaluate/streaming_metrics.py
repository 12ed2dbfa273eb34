"""Validation metrics accumulated batch by batch: the evaluation keeps a few numbers, never the outputs.

`RunningMetrics` holds the built-in ones (classification: val_acc, val_top5; regression: val_mae) as
sums on the device, read once at the end and summed over the ranks: validating 50,000 samples of
1,000 classes needs as much memory as validating 50. A metric object of the user's with update() /
compute() / reset() (a torchmetrics Metric) is streamed the same way: reset before each evaluation,
updated per batch on the device, computed (and synced over the ranks, by torchmetrics) at the end.
Only a plain function metric, fn(outputs, targets) -> float, needs every output at once: the
evaluation keeps the outputs then, and only then.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from torchwise.train.distributed.process_group import DistEnv, sum_across


def is_streaming(metric: Any) -> bool:
    """A metric object that accumulates itself (torchmetrics' Metric, or anything with the same three methods)."""
    return all(callable(getattr(metric, name, None)) for name in ("update", "compute", "reset"))


def argmax_hits(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """How many rows of class scores (N, C) have their largest score at the target class (a 0-d tensor)."""
    return (output.argmax(dim=1) == target).sum()


# Top-5 accuracy is counted (val_top5, eval.json's top5_accuracy, the report's curve) only with more than 10
# classes: five guesses must be under half the classes to say something. With 6 classes a model that has learned
# nothing already scores 5/6 (the newcomer's 6-class report showed val_top5 ~1.0 from the first evaluation); the
# metrics.csv column stays, empty, as for any run without the metric.
TOP5_MIN_CLASSES = 11


def shows_top5(classes: int) -> bool:
    return classes >= TOP5_MIN_CLASSES


def top5_hits(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """How many rows have the target class among their five largest scores (a 0-d tensor)."""
    return (output.topk(5, dim=1).indices == target[:, None]).any(dim=1).sum()


class RunningMetrics:
    """The built-in metrics of one evaluation, as running sums on the device."""

    def __init__(self, task: str, device: torch.device):
        self.task, self.device = task, device
        self.sums: dict[str, torch.Tensor] = {}
        self.n = 0  # samples (or values) counted: a host number, no tensor per batch
        self.counted = True  # False once a batch had outputs the built-in metrics cannot read

    def _add(self, name: str, value: torch.Tensor) -> None:
        value = value.detach().to(torch.float32 if self.device.type == "mps" else torch.float64)
        self.sums[name] = self.sums[name] + value if name in self.sums else value

    def update(self, output: Any, target: Any) -> None:
        if not (isinstance(output, torch.Tensor) and isinstance(target, torch.Tensor)) or not self.counted:
            self.counted = False
            return
        output = output.detach()
        if self.task == "classification":
            self._classification(output, target)
        elif output.numel() == target.numel():
            self._add("abs_err", (output.reshape(target.shape).float() - target.float()).abs().sum())
            self.n += target.numel()
        else:
            self.counted = False

    def _classification(self, output: torch.Tensor, target: torch.Tensor) -> None:
        if output.ndim == 2 and output.shape[1] > 1 and target.ndim == 1:
            self._add("correct", argmax_hits(output, target))
            if shows_top5(output.shape[1]):
                self._add("top5", top5_hits(output, target))
            self.n += target.shape[0]
        elif output.numel() == target.numel():  # binary with one logit per sample
            pred = (output.reshape(target.shape) > 0).to(target.dtype)
            self._add("correct", (pred == target).sum())
            self.n += target.numel()
        else:  # e.g. a language model's (batch, time, vocabulary) logits: no built-in accuracy
            self.counted = False

    def compute(self, dist: DistEnv, prefix: str) -> dict[str, float]:
        """The metrics over every rank's batches. Every rank must call it (one collective)."""
        names = ("correct", "top5", "abs_err")
        local = [float(self.sums[k]) if k in self.sums else 0.0 for k in names]  # one read per sum, at the end
        flags = [float(not self.counted), float("top5" in self.sums)]
        correct, top5, abs_err, n, uncounted, has_top5 = sum_across([*local, float(self.n), *flags], dist,
                                                                    self.device)
        if self.task != "classification":  # nan when outputs and targets do not pair up
            if uncounted:
                return {f"{prefix}_mae": math.nan}
            return {f"{prefix}_mae": _as_float32(abs_err / n)} if n else {}
        if uncounted or not n:
            return {}
        out = {f"{prefix}_acc": _ratio(correct, n)}
        if has_top5:
            out[f"{prefix}_top5"] = _ratio(top5, n)
        return out


def _ratio(count: float, total: float) -> float:
    # the float32 quotient, as the mean of a float32 0/1 tensor gives it (the numbers do not move)
    return float(torch.tensor(count, dtype=torch.float32) / torch.tensor(total, dtype=torch.float32))


def _as_float32(value: float) -> float:
    return float(torch.tensor(value, dtype=torch.float32)) if math.isfinite(value) else value


def streaming_value(metric: Any) -> Any:
    """compute() of a metric object, its tensor as a number."""
    value = metric.compute()
    return value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
