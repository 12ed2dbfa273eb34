"""TensorBoard event files under <run>/tb: val/<metric> per evaluation, train/<scalar> every log_every steps."""
from __future__ import annotations

import math
import os
import sys
from typing import Any

from torchwise.train.loggers.protocol import RunInfo


class TensorBoardLogger:
    name = "tensorboard"

    def __init__(self) -> None:
        self.writer: Any = None
        self._dir_fd: int | None = None

    def start(self, run: RunInfo) -> None:
        if run.run_dir is None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            # the run goes on: metrics.csv holds the same rows
            print("torchwise: tensorboard is not installed; metrics go to metrics.csv only "
                  "(pip install tensorboard)", file=sys.stderr)
            return
        from torchwise import files

        files.make_folder(run.run_dir / "tb", run.run_dir)  # the event files: never through a link out of the run
        # purge_step: on resume, the events from the resumed step on (from the run that stopped) are hidden; from
        # the step after it when the checkpoint already holds that step's evaluation (it is not run again)
        purge = run.resume_step
        if purge is not None and run.resume_rows and run.resume_rows[-1].get("step") == purge:
            purge += 1
        from torchwise.file_names import strict_utf8_path

        # TensorBoard encodes its path as strict UTF-8: a run folder named in Latin-1 is reached through an open
        # descriptor of tb/ (held until finish)
        log_dir, self._dir_fd = strict_utf8_path(run.run_dir / "tb")
        self.writer = SummaryWriter(log_dir=log_dir, purge_step=purge)

    def scalars(self, step: int, values: dict[str, Any], prefix: str) -> None:
        if self.writer is None:
            return
        for key, value in values.items():
            if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def log_metrics(self, row: dict[str, Any], step: int) -> None:
        self.scalars(step, {k: v for k, v in row.items() if k.startswith("val_")}, "val")

    def log_train(self, values: dict[str, Any], step: int) -> None:
        self.scalars(step, values, "train")

    def finish(self, status: str) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
