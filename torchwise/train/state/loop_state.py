"""The loop's own state, as checkpoint components (state_dict/load_state_dict): where the run is, the
rows logged so far, and the optimizer (whose state lives in sharded/ when the model is sharded)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torchwise.train.evaluate.monitor import BestMetric, Monitor

COUNTERS = ("step", "epoch", "batch_in_epoch", "skipped", "consecutive_skipped", "loss_sum", "loss_count",
            "last_grad_norm", "stage", "stage_start_step", "stage_start_epoch", "stage_start_batch")


@dataclass
class Position:
    """Where the run is; everything here goes into every checkpoint."""
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    skipped: int = 0
    consecutive_skipped: int = 0
    loss_sum: float = 0.0          # train loss since the last evaluation
    loss_count: int = 0
    last_grad_norm: float | None = None  # logged every log_every steps, shown in each metrics row
    # fit() called again on the same Trainer starts a stage (staged fine-tuning): which, and where it began
    stage: int = 0
    stage_start_step: int = 0
    stage_start_epoch: int = 0
    stage_start_batch: int = 0
    history: list = field(default_factory=list)
    best: BestMetric = field(default_factory=lambda: BestMetric(Monitor()))

    @property
    def best_value(self) -> float:
        return self.best.value

    @property
    def best_step(self) -> int:
        return self.best.step

    def state_dict(self) -> dict[str, Any]:
        # best_value/best_step sit with the counters, as in the first checkpoint format
        return {**{k: getattr(self, k) for k in COUNTERS}, "best_value": self.best.value, "best_step": self.best.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in COUNTERS:
            if key in state:
                setattr(self, key, state[key])
        self.best.load_state_dict({"value": state["best_value"], "step": state["best_step"]})


class History:
    """The evaluation rows (metrics.csv's), saved as JSON text (a checkpoint holds plain containers only)."""

    def __init__(self, pos: Position):
        self.pos = pos

    def state_dict(self) -> str:
        return json.dumps(self.pos.history)

    def load_state_dict(self, state: str) -> None:
        self.pos.history = json.loads(state)


class OptimizerState:
    """The optimizer's state; None under FSDP, where every rank's shard of it is written to sharded/."""

    def __init__(self, optimizer: Any, sharded: bool):
        self.optimizer, self.sharded = optimizer, sharded

    def state_dict(self) -> Any:
        return None if self.sharded else self.optimizer.state_dict()

    def load_state_dict(self, state: Any) -> None:
        if not self.sharded:
            self.optimizer.load_state_dict(state)
