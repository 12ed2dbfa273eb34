"""Batch-size finder: the largest batch whose training step fits.

Search: powers of two upwards until one does not fit, then bisection between the last that fit
and the first that did not. What "fits" means depends on the device:

- CUDA: two real training steps (forward, backward, optimizer step, so the optimizer state exists)
  on a copy of the model; an out-of-memory error means no. With `budget` the measured peak must
  also stay under it (to leave room for another process, or to plan for a smaller GPU).
- CPU: running out of RAM does not fail cleanly (the machine swaps, or the kernel kills the
  process), so a batch fits when the estimated peak of `memory_estimate` (activations measured by
  one forward/backward at that batch) is at most `budget` (default: 80% of the available memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.toolbox.summary import format_bytes


@dataclass
class BatchSizeResult:
    batch_size: int                         # 0: not even the smallest batch fits
    device: str
    criterion: str
    tried: list[dict[str, Any]] = field(default_factory=list)   # {"batch_size", "fits", "peak_bytes"|"error"}

    def report(self) -> str:
        lines = [f"batch-size finder on {self.device} ({self.criterion}):"]
        for t in self.tried:
            detail = format_bytes(t["peak_bytes"]) if t.get("peak_bytes") is not None else t.get("error", "")
            lines.append(f"  batch {t['batch_size']:>6}: {'fits' if t['fits'] else 'does not fit'}  {detail}")
        lines.append(f"largest batch that fits: {self.batch_size}")
        return "\n".join(lines)


def search_largest(fits: Callable[[int], bool], start: int = 1, limit: int = 1 << 16) -> int:
    """Largest n in [start, limit] with fits(n), assuming fits is monotone; 0 if fits(start) is False."""
    lo, hi, n = 0, None, start
    while n <= limit:
        if fits(n):
            lo = n
            if n == limit:
                return lo
            n = min(n * 2, limit)
        else:
            hi = n
            break
    if lo == 0:
        return 0
    if hi is None:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise TorchwiseError("Cannot read the available memory.", fix="Pass budget= (bytes) explicitly.")


def find_batch_size(model: nn.Module, example_input: Any, *, device: str | torch.device = "auto",
                    precision: str = "fp32", optimizer: str = "adamw", task: str = "classification",
                    loss_fn: Callable | None = None, budget: int | None = None, start: int = 1,
                    limit: int = 1 << 16) -> BatchSizeResult:
    """The largest training batch for `model` on `device`; `example_input` gives the shape of one
    sample (its first dimension is the batch and is replaced)."""
    from torchwise.toolbox.memory import (batch_like, estimate_row, measure_cuda_peak, optimizer_cost)
    from torchwise.toolbox.oom import free_memory, is_oom
    from torchwise.train.step.precision import choose_device

    dev = choose_device(device)
    cost = optimizer_cost(optimizer)
    model = model.to(dev)
    was_training = model.training
    tried: list[dict[str, Any]] = []
    if dev.type == "cuda":
        criterion = "real training steps" + (f", peak <= {format_bytes(budget)}" if budget else "")
    else:
        budget = budget or int(0.8 * available_memory())
        criterion = f"estimated peak <= budget {format_bytes(budget)}"

    def fits(n: int) -> bool:
        inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in batch_like(example_input, n))
        error = None
        peak = None
        try:
            if dev.type == "cuda":
                peak = measure_cuda_peak(model, inputs, precision, cost.name, task=task, loss_fn=loss_fn, steps=2)
            else:
                peak = estimate_row(model, inputs, precision, cost, task=task, loss_fn=loss_fn).estimate
        except Exception as exc:  # noqa: BLE001 - only out-of-memory means "does not fit"
            if not is_oom(exc):
                raise
            error = str(exc).strip().splitlines()[0][:120]
        del inputs
        if error is not None:
            free_memory()
        ok = error is None and (budget is None or peak <= budget)
        tried.append({"batch_size": n, "fits": ok, **({"peak_bytes": peak} if peak is not None else {"error": error})})
        return ok

    try:
        best = search_largest(fits, start, limit)
    finally:
        model.train(was_training)
        for p in model.parameters():
            p.grad = None
    return BatchSizeResult(best, str(dev), criterion, tried)
