"""The one judge of "is this better": the monitored metric, its direction and the smallest change that
counts. The Trainer's best weights and EarlyStopping both ask the same `Monitor`, so "best" means one
thing in a run (the plateau schedule reads the same metric).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Monitor:
    name: str = "val_loss"
    mode: str = "min"          # "min" for losses, "max" for accuracies
    min_delta: float = 0.0     # an improvement smaller than this does not count

    def is_better(self, value: float, best: float) -> bool:
        """`value` improves on `best` (a nan value never does; anything beats a nan best)."""
        if math.isnan(value):
            return False
        if math.isnan(best):
            return True
        if self.mode == "min":
            return value < best - self.min_delta
        return value > best + self.min_delta


@dataclass
class BestMetric:
    """The best value seen so far and the step it was seen at (saved in every checkpoint)."""
    monitor: Monitor
    value: float = math.nan
    step: int = -1

    def update(self, value: float, step: int) -> bool:
        """Record one evaluation; True when it is the new best."""
        if not self.monitor.is_better(value, self.value):
            return False
        self.value, self.step = float(value), int(step)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value, self.step = float(state["value"]), int(state["step"])
