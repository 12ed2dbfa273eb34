"""Learning-rate schedulers and when each one is stepped.

Per-batch schedules (one-cycle, cosine with warmup) advance after every optimizer step that
actually happened; per-epoch ones (step) at the end of an epoch; plateau on the validation metric.
A step skipped for a non-finite loss or an fp16 overflow does not advance the schedule.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from torchwise.errors import ConfigError

BUILTIN = ("onecycle", "cosine", "step", "plateau")
INTERVALS = ("step", "epoch", "plateau")


@dataclass
class Schedule:
    scheduler: Any
    interval: str  # "step" | "epoch" | "plateau"

    def after_optimizer_step(self) -> None:
        if self.interval == "step":
            self.scheduler.step()

    def after_epoch(self) -> None:
        if self.interval == "epoch":
            self.scheduler.step()

    def after_evaluation(self, value: float) -> None:
        if self.interval == "plateau" and not math.isnan(value):
            self.scheduler.step(value)


def warmup_cosine(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def build_schedule(spec: Any, optimizer: torch.optim.Optimizer, *, total_steps: int, max_epochs: int,
                   warmup_steps: int = 0, mode: str = "min", interval: str | None = None) -> Schedule | None:
    """Turn `scheduler=` into a Schedule. `spec` is None, a built-in name, or callable(optimizer, total_steps)."""
    from torch.optim import lr_scheduler as lrs

    if spec is None:
        return None
    if interval is not None and interval not in INTERVALS:
        raise ConfigError("Unknown scheduler interval.", values={"scheduler_interval": interval,
                                                                "allowed": ", ".join(INTERVALS)},
                          fix="'step' steps after every optimizer step, 'epoch' once per epoch, "
                              "'plateau' on the validation metric.")
    if isinstance(spec, str):
        if spec not in BUILTIN:
            close = difflib.get_close_matches(spec, BUILTIN, n=1)
            raise ConfigError("Unknown scheduler.", values={"scheduler": spec, "allowed": ", ".join(BUILTIN),
                                                           "did you mean": close[0] if close else "-"},
                              fix="Use a built-in name or pass callable(optimizer, total_steps) -> scheduler.")
        base_lrs = [group["lr"] for group in optimizer.param_groups]
        if spec == "onecycle":
            return Schedule(lrs.OneCycleLR(optimizer, max_lr=base_lrs, total_steps=max(total_steps, 2)), "step")
        if spec == "cosine":
            return Schedule(lrs.LambdaLR(optimizer, warmup_cosine(total_steps, warmup_steps)), "step")
        if spec == "step":
            return Schedule(lrs.StepLR(optimizer, step_size=max(1, max_epochs // 3), gamma=0.1), "epoch")
        return Schedule(lrs.ReduceLROnPlateau(optimizer, mode=mode, factor=0.1, patience=2), "plateau")
    if callable(spec):
        scheduler = spec(optimizer, total_steps)
        if not hasattr(scheduler, "step") or not hasattr(scheduler, "state_dict"):
            raise ConfigError("The scheduler factory did not return a scheduler.",
                              values={"returned": type(scheduler).__name__},
                              fix="Return e.g. torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=..., total_steps=total_steps).")
        if interval is None:
            interval = "plateau" if isinstance(scheduler, lrs.ReduceLROnPlateau) else "step"
        return Schedule(scheduler, interval)
    raise ConfigError("scheduler must be None, a name or a factory.", values={"scheduler": repr(spec),
                                                                             "allowed names": ", ".join(BUILTIN)},
                      fix="Pass scheduler='cosine' or scheduler=lambda opt, total: OneCycleLR(opt, 0.1, total_steps=total).")
