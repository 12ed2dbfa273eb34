"""Out-of-memory recovery for the train step: `on_oom="adapt"` and `on_oom="raise"`.

The guard itself (`OOMGuard`) is one of the step's wrappers and lives with them in
torchwise/train/step/step_wrappers.py (its docstring says what each mode does); it is re-exported here,
with the helpers, for the code that imports them from this module. `install` puts it around a
Trainer's step from outside, through the same composition the Trainer uses.
"""
from __future__ import annotations

from typing import Any, Callable

from torchwise.train.step.step_wrappers import (MODES, OOMGuard, TrainingOutOfMemory, split_parts, compose_step,
                                                find_layer, free_memory, is_oom, remedies, split_micro_batches)

__all__ = ["MODES", "OOMGuard", "TrainingOutOfMemory", "free_memory", "install", "is_oom", "remedies",
           "split_micro_batches", "split_parts"]


def install(trainer: Any, mode: str = "adapt", notify: Callable[[str], None] | None = None):
    """Put an OOM guard around `trainer`'s step when fit() starts; returns the event handle
    (`.remove()` undoes it for later fits). Works with the Trainer's public `on()` events."""
    if mode not in MODES:
        OOMGuard(None, mode)  # raises the clear error

    def wrap(trainer: Any, **_: Any) -> None:
        guard = find_layer(trainer.step_runner, OOMGuard)
        if guard is not None:  # the Trainer's own guard: switch its mode
            guard.mode = mode
            if notify is not None:
                guard.notify = notify
        else:  # device_steps=None: the step keeps the path the Trainer chose
            trainer.step_runner = compose_step(trainer.step_runner, on_oom=mode, notify=notify,
                                               accumulate=trainer.accumulate)

    return trainer.on("fit_start", wrap)
