"""Run metrics on disk: metrics.csv (one row per evaluation) and TensorBoard event files."""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path
from typing import Any

BASE_COLUMNS = ["epoch", "step", "train_loss", "val_loss", "val_acc", "val_top5", "lr", "grad_norm",
                "skipped_steps", "elapsed_s", "data_wait", "samples_per_s"]


class MetricsLog:
    """Appends evaluation rows to metrics.csv and scalars to TensorBoard.

    On resume, rows written after the resumed step are dropped first, so the file never holds a
    step twice.
    """

    def __init__(self, out_dir: Path | None, extra_columns: list[str], *, resume_step: int | None = None,
                 tensorboard: bool = True):
        self.path = out_dir / "metrics.csv" if out_dir is not None else None
        self.columns = BASE_COLUMNS + [c for c in extra_columns if c not in BASE_COLUMNS]
        self._tb = None
        if self.path is None:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            self._truncate_after(resume_step)
        else:
            with open(self.path, "w", newline="") as fh:
                csv.writer(fh).writerow(self.columns)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(out_dir / "tb"), purge_step=resume_step)
            except ImportError:
                print("torchwise: tensorboard is not installed; metrics go to metrics.csv only "
                      "(pip install tensorboard)", file=sys.stderr)

    def _truncate_after(self, step: int) -> None:
        with open(self.path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        with open(self.path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(r for r in rows if r.get("step") and int(r["step"]) <= step)

    def scalars(self, step: int, values: dict[str, Any], prefix: str) -> None:
        if self._tb is None:
            return
        for key, value in values.items():
            if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
                self._tb.add_scalar(f"{prefix}/{key}", value, step)

    def row(self, values: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=self.columns, extrasaction="ignore").writerow(
                {k: _fmt(values.get(k)) for k in self.columns})
        self.scalars(int(values["step"]), {k: v for k, v in values.items() if k.startswith("val_")}, "val")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.flush()
            self._tb.close()
            self._tb = None


def _fmt(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value
