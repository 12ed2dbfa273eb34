"""Early stopping on a monitored validation metric.

Whether an evaluation improves is decided by a `Monitor` (torchwise.train.evaluate.monitor): the Trainer's own,
the same one that picks the best weights, once the EarlyStopping is given to a Trainer; standing
alone, one made from this object's monitor/mode/min_delta.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from torchwise.errors import ConfigError
from torchwise.train.evaluate.monitor import Monitor


@dataclass
class EarlyStopping:
    # None: the Trainer's monitor (default "val_loss"); the mode follows from the metric's name
    # ("min" for losses, "max" for accuracies) unless given
    monitor: str | None = None
    patience: int = 5          # evaluations without improvement before stopping
    mode: str | None = None    # "min" for losses, "max" for accuracies
    min_delta: float | None = None  # None: the Trainer's (default 0.0: any improvement counts)
    restore_best: bool = True  # put the best weights back at the end of fit()
    # progress, saved in checkpoints
    best: float = field(default=math.nan)
    bad_evaluations: int = 0
    judge: Monitor | None = field(default=None, repr=False, compare=False)  # set by the Trainer (follow)

    def __post_init__(self) -> None:
        from torchwise.train.input_checks import infer_mode, is_int

        if self.monitor is not None and not (isinstance(self.monitor, str) and self.monitor):
            raise ConfigError("EarlyStopping monitor must be a metric name.", values={"monitor": repr(self.monitor)},
                              fix="Pass e.g. monitor='val_loss' or monitor='val_acc' (or leave it out: the "
                                  "Trainer's monitor is used).")
        if self.mode not in (None, "min", "max"):
            raise ConfigError("EarlyStopping mode must be 'min' or 'max'.", values={"mode": self.mode},
                              fix="Use 'min' for a loss and 'max' for an accuracy.")
        if not is_int(self.patience) or self.patience < 1:
            raise ConfigError("EarlyStopping patience must be an integer of at least 1.",
                              values={"patience": self.patience}, fix="Pass patience=5 or so.")
        d = self.min_delta
        if d is not None and (not isinstance(d, (int, float)) or isinstance(d, bool) or not d >= 0):
            raise ConfigError("EarlyStopping min_delta must be a number >= 0.", values={"min_delta": d},
                              fix="Pass min_delta=0.0 (any improvement counts) or a small positive number.")
        if self.mode is None and self.monitor is not None:
            self.mode = infer_mode(self.monitor)  # None still: the Trainer's mode decides, or it asks

    def follow(self, judge: Monitor) -> None:
        """Use the Trainer's monitor (one judge of improvement for the best weights and the stop)."""
        self.judge = judge
        self.monitor, self.mode, self.min_delta = judge.name, judge.mode, judge.min_delta

    def update(self, value: float) -> bool:
        """Record one evaluation; returns True when training should stop."""
        if self.improved(value):
            self.best = value
            self.bad_evaluations = 0
        else:
            self.bad_evaluations += 1
        return self.bad_evaluations >= self.patience

    def improved(self, value: float) -> bool:
        if self.judge is None and self.mode is None:
            raise ConfigError("EarlyStopping does not know whether a higher or lower value is better.",
                              values={"monitor": self.monitor, "mode": None},
                              fix="Pass mode='max' (accuracies) or mode='min' (losses).")
        judge = self.judge or Monitor(self.monitor or "val_loss", self.mode, self.min_delta or 0.0)
        return judge.is_better(value, self.best)

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_evaluations": self.bad_evaluations}

    def load_state_dict(self, state: dict) -> None:
        self.best = float(state["best"])
        self.bad_evaluations = int(state["bad_evaluations"])
