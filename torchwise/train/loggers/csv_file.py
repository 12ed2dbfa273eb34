"""metrics.csv: one row per evaluation, the columns in the run's order (the report and the CLI read it)."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from torchwise import files
from torchwise.train.loggers.protocol import RunInfo


class CsvLogger:
    """Appends evaluation rows to <run>/metrics.csv.

    On resume, the file is cut back to the rows the resumed checkpoint holds (none after its step, and not the
    evaluation at its own step when the checkpoint was saved before it: that evaluation runs again), so a resumed
    run's file equals an uninterrupted run's, row for row.
    Without a run folder (no out_dir, or a rank other than the main one) it writes nothing.
    """

    name = "csv"

    def __init__(self) -> None:
        self.path: Path | None = None
        self.root: Path | None = None  # the run folder: nothing is written through a link out of it
        self.columns: list[str] = []

    def start(self, run: RunInfo) -> None:
        if run.run_dir is None:
            return
        self.root, self.path, self.columns = run.run_dir, run.run_dir / "metrics.csv", list(run.columns)
        if run.resume_step is not None and self.path.exists():
            self.truncate_after(run.resume_step, len(run.resume_rows) if run.resume_rows is not None else None)
        else:
            self.rewrite([])

    def rewrite(self, rows: list[dict[str, Any]]) -> None:
        """The header and `rows`, replacing the file atomically (a link there is replaced, never written through)."""
        assert self.path is not None
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        with files.atomic_write_path(self.path, root=self.root) as tmp:
            tmp.write_bytes(text.getvalue().encode("utf-8"))

    def truncate_after(self, step: int, rows_known: int | None = None) -> None:
        assert self.path is not None
        with open(self.path, newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("step") and int(r["step"]) <= step]
        self.rewrite(rows if rows_known is None else rows[:rows_known])

    def log_metrics(self, row: dict[str, Any], step: int) -> None:
        if self.path is None:
            return
        # appended with O_NOFOLLOW: a link put in its place while the run runs is refused, never written through
        with files.open_nofollow(self.path, "a", root=self.root) as fh:
            csv.DictWriter(fh, fieldnames=self.columns, extrasaction="ignore").writerow(
                {k: cell(row.get(k)) for k in self.columns})

    def finish(self, status: str) -> None:
        self.path = None


def cell(value: Any) -> Any:
    """A value as metrics.csv writes it: empty for None, floats to 6 significant digits."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value
