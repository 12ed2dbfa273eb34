"""What a logger is (the protocol the Trainer's metrics go through) and what it is told at the start."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

STATUSES = ("finished", "failed", "killed")


@dataclass
class RunInfo:
    """The run a logger starts on.

    run_dir: the run's folder (None when the Trainer has no out_dir); config: the resolved Trainer config as
    plain values (TrainerConfig.to_dict()); resumed / resume_step: a resumed run and the step it goes on from; resume_rows: the evaluation rows its checkpoint holds;
    columns: the metrics row's columns in order; metadata: config.metadata; run_name: the folder's name.
    """

    run_dir: Path | None
    config: dict[str, Any]
    resumed: bool = False
    resume_step: int | None = None
    # the evaluation rows the resumed checkpoint holds (its history): exactly these were logged before it, so a
    # row written after it (an evaluation at its own step, when it was saved before that evaluation) is dropped
    resume_rows: list[dict[str, Any]] | None = None
    columns: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def run_name(self) -> str:
        return self.run_dir.name if self.run_dir is not None else "torchwise"


@runtime_checkable
class Logger(Protocol):
    """One place the metrics go. Only log_metrics is required of a logger of your own; start, log_train
    and finish are called when the object has them."""

    def start(self, run: RunInfo) -> None: ...

    def log_metrics(self, row: dict[str, Any], step: int) -> None: ...

    def finish(self, status: str) -> None: ...


def name_of(logger: Any) -> str:
    """How messages name a logger: its `name` attribute, else its class."""
    name = getattr(logger, "name", None)
    return name if isinstance(name, str) and name else type(logger).__name__


def status_of(error: BaseException | None) -> str:
    """The status a run ends with: finished, killed (Ctrl-C) or failed (any other exception)."""
    if error is None:
        return "finished"
    return "killed" if isinstance(error, KeyboardInterrupt) else "failed"


def numbers_of(values: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a row (what a metrics store takes), without the step it is logged at."""
    return {k: float(v) for k, v in values.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
