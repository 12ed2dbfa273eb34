"""An imbalanced CSV data set (8% 'fraud') for the class-weight tests."""
from __future__ import annotations

import csv
from pathlib import Path
import numpy as np


def _write_imbalanced_csv(path: Path) -> Path:
    """300 rows, 25 'fraud' (8%) and 275 'ok'; fraud rows have a larger x1, with overlap."""
    rng = np.random.default_rng(0)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x1", "x2", "label"])
        for i in range(300):
            rare = i % 12 == 0
            writer.writerow([round(rng.normal(1.2 if rare else 0.0, 1.0), 4), round(rng.normal(0, 1), 4),
                             "fraud" if rare else "ok"])
    return path


def make_imbalanced_csv(tmp_path_factory) -> Path:
    return _write_imbalanced_csv(tmp_path_factory.mktemp("csv") / "transactions.csv")
