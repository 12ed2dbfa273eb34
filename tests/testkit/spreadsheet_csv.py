"""CSV files the way a European spreadsheet exports them: `;` separators, decimal commas, an ID
column and text labels (the CSV of issue 28's newcomer)."""
from __future__ import annotations

import random
from pathlib import Path

LABELS = ("barolo", "grignolino", "barbera")


def spreadsheet_rows(n: int, seed: int = 0, *, ids: str = "text") -> list[list[str]]:
    """[wine_id, alcohol, acid, cultivar] rows: the label shifts both features, so a few steps learn it."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 3
        alcohol = 12.0 + label + rng.gauss(0, 0.3)
        acid = 1.5 + 0.8 * label + rng.gauss(0, 0.2)
        wine_id = f"W-{i + 1:04d}" if ids == "text" else str(i + 1)
        rows.append([wine_id, f"{alcohol:.2f}".replace(".", ","), f"{acid:.3f}".replace(".", ","), LABELS[label]])
    return rows


def write_spreadsheet(path: Path, rows: list[list[str]], header=("wine_id", "alcohol", "acid", "cultivar")) -> Path:
    path.write_text("\n".join(";".join(r) for r in [list(header), *rows]) + "\n", encoding="utf-8")
    return path
