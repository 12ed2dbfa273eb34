"""The loop's own state, as checkpoint components (state_dict/load_state_dict): where the run is, the
rows logged so far, and the optimizer (whose state lives in sharded/ when the model is sharded)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from torchwise.train.evaluate.monitor import BestMetric, Monitor

COUNTERS = ("step", "epoch", "batch_in_epoch", "skipped", "consecutive_skipped", "loss_sum", "loss_count",
            "last_grad_norm", "stage", "stage_start_step", "stage_start_epoch", "stage_start_batch", "timing")


def no_timing() -> dict[str, float]:
    return {"data_s": 0.0, "compute_s": 0.0, "samples": 0.0}


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
    # Since the last evaluation: seconds waiting for data, seconds in the step, samples trained. Kept in the
    # checkpoint, so the first row after a resume covers its whole interval (not only the part after it).
    timing: dict = field(default_factory=no_timing)
    # The run's clock, across resumes: seconds trained before this process (None: a checkpoint from before it
    # was kept, then its last row's elapsed_s), and this process's perf_counter() at which the run "began".
    elapsed_s: float | None = None
    clock_start: float | None = None
    earlier_sessions_s: float = 0.0  # what the checkpoint resumed from had trained (0: a fresh run)
    history: list = field(default_factory=list)
    best: BestMetric = field(default_factory=lambda: BestMetric(Monitor()))

    def start_clock(self) -> float:
        """The perf_counter() value the run began at, as if its earlier sessions had run just before this one:
        elapsed times (metrics rows, checkpoints, the run's summary) then count the whole run."""
        if self.elapsed_s is None:
            self.elapsed_s = float(self.history[-1].get("elapsed_s") or 0.0) if self.history else 0.0
        if self.clock_start is None:  # this process's first fit() (a later one is the run's next stage)
            self.earlier_sessions_s = self.elapsed_s
        self.clock_start = time.perf_counter() - self.elapsed_s
        return self.clock_start

    def elapsed(self) -> float:
        """Seconds the run has trained, all its sessions together (kept as elapsed_s as of now)."""
        if self.clock_start is not None:
            self.elapsed_s = time.perf_counter() - self.clock_start
        return self.elapsed_s or 0.0

    @property
    def best_value(self) -> float:
        return self.best.value

    @property
    def best_step(self) -> int:
        return self.best.step

    def state_dict(self) -> dict[str, Any]:
        # best_value/best_step sit with the counters, as in the first checkpoint format
        return {**{k: getattr(self, k) for k in COUNTERS}, "best_value": self.best.value, "best_step": self.best.step,
                "elapsed_s": self.elapsed()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in COUNTERS:
            if key in state:
                setattr(self, key, state[key])
        self.elapsed_s, self.clock_start = state.get("elapsed_s"), None  # (the clock starts again in fit())
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
