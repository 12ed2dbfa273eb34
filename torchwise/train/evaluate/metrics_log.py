"""The run's metrics, fanned out to the chosen loggers (torchwise.train.loggers): one row per evaluation,
the training scalars every log_every steps. A logger that raises is named with its error and the others
go on, so one broken tracker loses neither the other loggers' rows nor the run."""
from __future__ import annotations

import sys
from typing import Any

from torchwise.errors import TorchwiseError
from torchwise.train.loggers.protocol import RunInfo, name_of, status_of

BASE_COLUMNS = ["epoch", "step", "train_loss", "val_loss", "val_acc", "val_top5", "lr", "grad_norm",
                "skipped_steps", "elapsed_s", "data_wait", "samples_per_s"]


class MetricsLog:
    """Starts each logger (a failure there stops the run before it trains), then sends it every row."""

    def __init__(self, loggers: list[Any], run: RunInfo):
        self.loggers: list[Any] = []
        self.failures: dict[str, int] = {}
        self.rows = 0
        for logger in loggers:
            try:
                if callable(getattr(logger, "start", None)):
                    logger.start(run)
            except BaseException as exc:
                self.close(status_of(exc))  # the ones started are ended, as failed
                if isinstance(exc, TorchwiseError) or not isinstance(exc, Exception):
                    raise
                raise TorchwiseError(f"The logger {name_of(logger)!r} failed to start.",
                                     values={"logger": name_of(logger), "error": f"{type(exc).__name__}: {exc}"},
                                     fix="Fix its cause, or drop it from loggers.") from exc
            self.loggers.append(logger)

    def row(self, values: dict[str, Any]) -> None:
        self.rows += 1
        step = int(values["step"])
        for logger in self.loggers:
            self.call(logger, "log_metrics", dict(values), step)  # a copy each: no logger sees another's edits

    def scalars(self, step: int, values: dict[str, Any], prefix: str) -> None:
        """The training scalars (loss, lr, grad_norm) of one step, to the loggers that take them."""
        for logger in self.loggers:
            if callable(getattr(logger, "log_train", None)):
                self.call(logger, "log_train", dict(values), step)

    def call(self, logger: Any, method: str, values: dict[str, Any], step: int) -> None:
        try:
            getattr(logger, method)(values, step)
        except Exception as exc:
            self.failed(logger, f"at step {step}", exc)

    def failed(self, logger: Any, when: str, exc: Exception) -> None:
        name = name_of(logger)
        self.failures[name] = self.failures.get(name, 0) + 1
        if self.failures[name] == 1:  # told once; the count comes at the end
            print(f"torchwise: the logger {name!r} failed {when} ({type(exc).__name__}: {exc}); the other loggers "
                  "and the run go on", file=sys.stderr, flush=True)

    def close(self, status: str | None = None) -> None:
        """Ends every logger; the status (finished, failed, killed) is the exception on its way, if any."""
        status = status or status_of(sys.exc_info()[1])
        loggers, self.loggers = self.loggers, []
        for logger in loggers:
            if callable(getattr(logger, "finish", None)):
                try:
                    logger.finish(status)
                except Exception as exc:
                    self.failed(logger, "at its finish", exc)
        for name, count in self.failures.items():
            print(f"torchwise: the logger {name!r} failed {count} time(s) in this run ({self.rows} rows); its "
                  "record of the run is incomplete", file=sys.stderr, flush=True)
        self.failures = {}
