"""Early stopping on a monitored validation metric."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from torchwise.errors import ConfigError


@dataclass
class EarlyStopping:
    monitor: str = "val_loss"
    patience: int = 5          # evaluations without improvement before stopping
    mode: str = "min"          # "min" for losses, "max" for accuracies
    min_delta: float = 0.0
    restore_best: bool = True  # put the best weights back at the end of fit()
    # progress, saved in checkpoints
    best: float = field(default=math.nan)
    bad_evaluations: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("min", "max"):
            raise ConfigError("EarlyStopping mode must be 'min' or 'max'.", values={"mode": self.mode},
                              fix="Use 'min' for a loss and 'max' for an accuracy.")
        if self.patience < 1:
            raise ConfigError("EarlyStopping patience must be at least 1.", values={"patience": self.patience},
                              fix="Pass patience=5 or so.")

    def update(self, value: float) -> bool:
        """Record one evaluation; returns True when training should stop."""
        if self.improved(value):
            self.best = value
            self.bad_evaluations = 0
        else:
            self.bad_evaluations += 1
        return self.bad_evaluations >= self.patience

    def improved(self, value: float) -> bool:
        if math.isnan(value):
            return False
        if math.isnan(self.best):
            return True
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_evaluations": self.bad_evaluations}

    def load_state_dict(self, state: dict) -> None:
        self.best = float(state["best"])
        self.bad_evaluations = int(state["bad_evaluations"])
