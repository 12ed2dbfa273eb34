"""PNG plots for the run report, drawn with matplotlib's Agg backend (no display needed).

Every function returns PNG bytes, so the HTML report can embed them as data URIs and stay a
single self-contained file.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Sequence


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # before pyplot is imported: never try to open a window
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    plt = _pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def read_metrics_csv(path: str | Path) -> list[dict[str, float | str]]:
    """metrics.csv rows with numbers parsed; empty cells dropped (columns vary between rows)."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            parsed: dict[str, float | str] = {}
            for key, value in row.items():
                if key is None or value in (None, ""):
                    continue
                try:
                    parsed[key] = float(value)
                except ValueError:
                    parsed[key] = value
            rows.append(parsed)
    return rows


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, float) and math.isfinite(value) and isinstance(row.get("step"), float):
            xs.append(row["step"])
            ys.append(value)
    return xs, ys


def curve_png(rows: Sequence[dict[str, Any]], keys: Sequence[str], *, title: str, ylabel: str,
              log: bool = False) -> bytes | None:
    """One line per metric in `keys` against the optimizer step; None when no row has any of them."""
    plotted = [(key, *_series(rows, key)) for key in keys]
    plotted = [p for p in plotted if p[1]]
    if not plotted:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    for key, xs, ys in plotted:
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
    if log and all(y > 0 for _, _, ys in plotted for y in ys):
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def confusion_png(matrix: Sequence[Sequence[int]], class_names: Sequence[str], columns: Sequence[str] | None = None,
                  title: str = "confusion matrix (validation)") -> bytes:
    """Rows: the true classes (`class_names`); columns: `columns` (default: the same classes), which may add
    one, such as the summarised matrix's "other classes"."""
    import numpy as np

    plt = _pyplot()
    m = np.asarray(matrix, dtype=float)
    columns = list(class_names if columns is None else columns)
    n, n_cols = len(class_names), len(columns)
    side = min(12.0, 2.5 + 0.45 * max(n, n_cols))
    fig, ax = plt.subplots(figsize=(side, side * 0.85))
    # Colour by the share of each true class (row), so small classes are as visible as large ones.
    share = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, label="share of the true class")
    tilt = n_cols > 6 and max(len(str(c)) for c in columns) > 3  # long names would overlap
    ax.set_xticks(range(n_cols), [str(c) for c in columns], rotation=45 if tilt else 0,
                  ha="right" if tilt else "center")
    ax.set_yticks(range(n), [str(c) for c in class_names])
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if max(n, n_cols) <= 31:
        for i in range(n):
            for j in range(n_cols):
                if m[i, j]:
                    ax.text(j, i, f"{int(m[i, j])}", ha="center", va="center", fontsize=8 if n <= 25 else 6,
                            color="white" if share[i, j] > 0.5 else "black")
    ax.set_title(title)
    return _png(fig)


def score_spread_png(per_class: Sequence[dict[str, Any]]) -> bytes:
    """How the per-class F1 and recall spread over all classes (with validation examples): one picture for
    any number of classes, where a bar per class stops being readable."""
    plt = _pyplot()
    rows = [row for row in per_class if row.get("support", 0) > 0]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    bins = [i / 20 for i in range(21)]
    ax.hist([[row["f1"] for row in rows], [row["recall"] for row in rows]], bins=bins, label=["F1", "recall"])
    ax.set_xlabel("per-class score")
    ax.set_ylabel("classes")
    ax.set_title(f"per-class scores of {len(rows):,} classes (validation)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return _png(fig)


def per_class_png(per_class: Sequence[dict[str, Any]], title: str = "per-class precision and recall (validation)"
                  ) -> bytes:
    plt = _pyplot()
    names = [str(row["class"]) for row in per_class]
    n = len(names)
    fig, ax = plt.subplots(figsize=(min(14.0, 3.0 + 0.5 * n), 3.2))
    width = 0.4
    ax.bar([i - width / 2 for i in range(n)], [row["precision"] for row in per_class], width, label="precision")
    ax.bar([i + width / 2 for i in range(n)], [row["recall"] for row in per_class], width, label="recall")
    tilt = n > 8 and max(len(name) for name in names) > 3
    ax.set_xticks(range(n), names, rotation=45 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylim(0, 1.2)  # headroom so the legend never covers a bar
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", ncol=2)
    return _png(fig)


def regression_png(predicted: Sequence[float], actual: Sequence[float]) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    ax.scatter(actual, predicted, s=10, alpha=0.6)
    low, high = min(min(actual), min(predicted)), max(max(actual), max(predicted))
    ax.plot([low, high], [low, high], color="gray", linewidth=1, label="perfect")
    ax.set_xlabel("actual")
    ax.set_ylabel("predicted")
    ax.set_title("predicted vs actual (validation)")
    ax.legend()
    return _png(fig)


def thumbnail_png(image, side: int = 96) -> bytes:
    """A PIL image scaled so its longer side is `side`; tiny images are enlarged without blurring."""
    from PIL import Image

    scale = side / max(image.size)
    size = (max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale)))
    resample = Image.NEAREST if scale > 1 else Image.BILINEAR
    buffer = io.BytesIO()
    image.resize(size, resample).save(buffer, format="PNG")
    return buffer.getvalue()
