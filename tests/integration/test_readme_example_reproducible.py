"""README's Python example, run twice in two fresh processes, writes the same metrics.csv.

A fresh process matters: torch seeds its CPU generator from the OS at start-up, so a model built before
anything is seeded gets other initial weights in every process (and in-process reruns would not show it).
Only the wall-time columns may differ."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

from conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
WALL_TIME = {"elapsed_s", "samples_per_s", "data_wait"}  # measured on the clock: they differ run to run


def run_example(where) -> list[dict[str, str]]:
    block = README.split("<!-- readme-example")[1].split("```python\n", 1)[1].split("```", 1)[0]
    where.mkdir()
    (where / "example.py").write_text(block)
    proc = subprocess.run([sys.executable, "example.py"], cwd=where, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONHASHSEED="random"))
    assert proc.returncode == 0, f"README's Python example failed in {where}:\n{proc.stderr[-3000:]}"
    assert "was not seeded before the model was built" not in proc.stderr, proc.stderr
    with open(where / "runs" / "digits" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_readme_python_example_twice_in_fresh_processes_gives_the_same_metrics_csv(tmp_path):
    first, second = run_example(tmp_path / "first"), run_example(tmp_path / "second")
    assert first and len(first) == len(second), (len(first), len(second))
    columns = [c for c in first[0] if c not in WALL_TIME]
    assert {"train_loss", "val_loss", "val_acc", "grad_norm", "lr"} <= set(columns), columns
    differ = [(row["epoch"], c, row[c], other[c]) for row, other in zip(first, second) for c in columns
              if row[c] != other[c]]
    assert not differ, f"the two runs differ (epoch, column, first, second): {differ[:10]}"
