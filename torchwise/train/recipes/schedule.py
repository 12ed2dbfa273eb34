"""Learning-rate schedulers and when each one is stepped.

Per-batch schedules (one-cycle, cosine with warmup) advance after every optimizer step that
actually happened; per-epoch ones (step) at the end of an epoch; plateau on the validation metric.
A step skipped for a non-finite loss or an fp16 overflow does not advance the schedule.

A run resumed with another length (a finished run extended): a step, plateau or no schedule simply
goes on; one-cycle and cosine are laid out over the run's length, so they go on only as the user
chooses (`extend_schedule`): "restart" lays the schedule out again from the step resumed at over the
steps left, "keep_end" runs it to its planned end and holds its last value after. Either way the
optimizer, RNG and position are the checkpoint's. Where the schedule was laid out (its first step and
length) is kept in every checkpoint, so a restarted or held schedule resumes exactly.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from torchwise.errors import ConfigError

BUILTIN = ("onecycle", "cosine", "step", "plateau")
INTERVALS = ("step", "epoch", "plateau")
LAID_OUT = ("onecycle", "cosine")  # their shape depends on the run's length


@dataclass
class Schedule:
    scheduler: Any
    interval: str  # "step" | "epoch" | "plateau"
    # A built-in laid out over the run's length (onecycle, cosine): the scheduler over n steps, and the
    # learning rates it starts from (the optimizer's, as built); None for every other schedule.
    make: Callable[[int], Any] | None = None
    base_lrs: list[float] = field(default_factory=list)
    start_step: int | None = None   # the optimizer step its step 0 is at (None: where the stage began)
    total_steps: int | None = None  # the steps it is laid out over
    keeps_end: bool = False         # past its end it holds its last value (extend_schedule="keep_end")

    @property
    def laid_out(self) -> bool:
        return self.make is not None

    def after_optimizer_step(self) -> None:
        if self.interval == "step" and not self.hold_end():
            self.scheduler.step()

    def hold_end(self) -> bool:
        """keep_end: at its last step the schedule stays at its end value (torch's one-cycle, stepped on,
        would raise, and its last step already overshoots its end value)."""
        if not self.keeps_end or self.scheduler.last_epoch < self.length() - 1:
            return False
        for group, lr in zip(self.scheduler.optimizer.param_groups, self.end_lrs()):
            group["lr"] = lr
        return True

    def length(self) -> int:
        """Steps the scheduler counts before its end (one-cycle needs at least 2)."""
        return int(getattr(self.scheduler, "total_steps", self.total_steps or 0))

    def end_lrs(self) -> list[float]:
        """The learning rates the schedule ends at: cosine's lambda at its end, one-cycle's min_lr."""
        s = self.scheduler
        if hasattr(s, "lr_lambdas"):
            return [base * fn(self.length()) for base, fn in zip(s.base_lrs, s.lr_lambdas)]
        return [group["min_lr"] for group in s.optimizer.param_groups]

    def state_dict(self) -> Any:  # the torch scheduler's own: checkpoints hold it as they always did
        return self.scheduler.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.scheduler.load_state_dict(state)

    def relayout(self, start_step: int, total_steps: int, keeps_end: bool) -> None:
        """Laid out as a checkpoint's schedule was (before the optimizer's and the scheduler's states are
        loaded: building a scheduler sets the learning rates, which the optimizer's state then puts back)."""
        self.scheduler = self.make(total_steps)
        self.start_step, self.total_steps, self.keeps_end = start_step, total_steps, keeps_end

    def restart(self, optimizer: Any, at_step: int, total_steps: int) -> None:
        """Laid out again from `at_step` over `total_steps`, from the learning rates it started from."""
        for group, lr in zip(optimizer.param_groups, self.base_lrs):
            group["lr"] = lr
            group.pop("initial_lr", None)  # (torch schedulers keep their start there; a new one sets its own)
        self.relayout(at_step, total_steps, False)

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
        if spec in LAID_OUT:
            def make(steps: int) -> Any:
                if spec == "onecycle":
                    return lrs.OneCycleLR(optimizer, max_lr=base_lrs, total_steps=max(steps, 2))
                return lrs.LambdaLR(optimizer, warmup_cosine(steps, warmup_steps))

            return Schedule(make(total_steps), "step", make, base_lrs, None, total_steps)
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


def end_lr(spec: str, lr: float) -> float:
    """The learning rate a laid-out built-in ends at (cosine: 0; one-cycle: torch's lr / 25 / 1e4)."""
    return 0.0 if spec == "cosine" else lr / 25 / 1e4


def extend_error(spec: str, steps_then: int, steps_now: int, at_step: int, lr: float, *, choice: Callable[[str], str],
                 values: dict[str, Any] | None = None) -> ConfigError:
    """The refusal of a longer (or shorter) run whose schedule was laid out for the old length, with the
    two ways on; `choice(name)` says how the user picks one (a keyword, a flag)."""
    end = end_lr(spec, lr)
    idle = " (a cosine ends at 0: the steps added would not change the weights)" if end == 0 else ""
    return ConfigError(
        f"The run's length changed, and its {spec} learning-rate schedule was laid out for the old length.",
        values={**(values or {}), "scheduler": spec, "steps then": steps_then, "steps now": steps_now,
                "resuming at step": at_step},
        fix=f"choose how the schedule goes on ({choice('restart')}: it starts again at step {at_step} over the "
            f"{max(0, steps_now - at_step)} steps left, from lr {lr:.3g}; {choice('keep_end')}: it ends at step "
            f"{steps_then} as planned, then holds its last lr, {end:.3g}{idle}); the optimizer, random state and "
            "position are the checkpoint's either way. Or resume with the original length.")


def resumed_layout(saved: tuple[int, int, bool], now: tuple[int, int], at_step: int,
                   choice: str | None) -> tuple[str, int, int]:
    """How a laid-out schedule resumes: ("as_built" | "as_saved" | "keep_end" | "restart", first step, length).
    `saved` is the checkpoint's (first step, length, holds its end), `now` this run's (first step, length)."""
    (start, total, keeps), end_now = saved, now[0] + now[1]
    if (start, total) == now:
        return "as_built", start, total
    if start + total == end_now:  # a schedule restarted (or run back to its length) earlier: exactly as saved
        return "as_saved", start, total
    if choice == "restart":
        return "restart", at_step, max(1, end_now - at_step)
    if choice == "keep_end" or keeps:  # (a run that holds its end goes on holding it)
        return "keep_end", start, total
    return "refuse", start, total
