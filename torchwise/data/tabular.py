"""Tabular classification or regression from a CSV file.

Preprocessing is fitted on the training rows only (means, standard deviations, category
vocabularies), then applied unchanged to validation rows and, later, to new data at eval time:
the fitted encoder is saved as JSON in the run's metadata. Types are decided from the whole file
(a column is numeric when every present value parses as a number), statistics from the training
split alone.
"""
from __future__ import annotations

import csv
import difflib
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from torchwise.errors import TorchwiseError

MISSING_TOKENS = {"", "na", "n/a", "nan", "null", "none", "?", "-"}
MISSING_CATEGORY = "<missing>"
# A numeric target with at most this many distinct integer values is taken as class labels.
MAX_AUTO_CLASSES = 20


def is_missing(value: str) -> bool:
    return value.strip().lower() in MISSING_TOKENS


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def read_csv(path: str | Path) -> tuple[list[str], list[list[str]]]:
    path = Path(path)
    if not path.is_file():
        raise TorchwiseError("The CSV file does not exist.", values={"path": str(path)},
                             fix="pass --data with the path of an existing .csv file")
    with path.open(newline="", encoding="utf-8-sig") as handle:  # utf-8-sig: Excel's byte-order mark
        sample = handle.read(64 * 1024)
        handle.seek(0)
        try:
            dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
        rows = [row for row in csv.reader(handle, dialect) if any(cell.strip() for cell in row)]
    if len(rows) < 2:
        raise TorchwiseError("The CSV file has no data rows.", values={"path": str(path), "lines": len(rows)},
                             fix="the first line must name the columns, and each following line is one example")
    header = [name.strip() for name in rows[0]]
    width = len(header)
    bad = [i + 2 for i, row in enumerate(rows[1:]) if len(row) != width]
    if bad:
        raise TorchwiseError("Some CSV rows do not have one value per column.",
                             values={"path": str(path), "columns": width, "bad line numbers": bad[:10]},
                             fix="fix or remove these lines (a quoted value may contain the delimiter)")
    return header, [[cell.strip() for cell in row] for row in rows[1:]]


def check_target(header: Sequence[str], target: str | None, path: str) -> int:
    if target is None:
        raise TorchwiseError("A CSV file needs --target: the column to predict.",
                             values={"file": path, "columns": ", ".join(header)},
                             fix="add --target COLUMN with one of the columns above")
    if target not in header:
        guess = difflib.get_close_matches(target, header, n=1, cutoff=0.4)
        values: dict[str, Any] = {"target": target, "columns": ", ".join(header)}
        if guess:
            values["did you mean"] = guess[0]
        raise TorchwiseError("The --target column is not in the CSV file.", values=values,
                             fix=f"use --target {guess[0]}" if guess else "use one of the columns listed")
    return list(header).index(target)


def detect_problem(values: Sequence[str]) -> str:
    numbers = [_number(v) for v in values if not is_missing(v)]
    if not numbers or any(n is None for n in numbers):
        return "classification"
    if all(float(n).is_integer() for n in numbers) and len(set(numbers)) <= MAX_AUTO_CLASSES:
        return "classification"
    return "regression"


@dataclass
class TabularEncoder:
    """Turns CSV rows into one float vector each: numeric columns as they are (missing: the
    training mean), categorical columns one-hot over the training vocabulary. Standardization is
    the separate (x - mean) / std step recorded in meta.json, as for images."""
    columns: list[str]
    numeric: dict[str, float] = field(default_factory=dict)          # column -> training mean (imputation)
    categorical: dict[str, list[str]] = field(default_factory=dict)  # column -> vocabulary
    ignored: dict[str, str] = field(default_factory=dict)            # column -> why
    missing: str = "drop"

    @property
    def feature_names(self) -> list[str]:
        names = []
        for column in self.columns:
            if column in self.numeric:
                names.append(column)
            elif column in self.categorical:
                names.extend(f"{column}={cat}" for cat in self.categorical[column])
        return names

    @classmethod
    def fit(cls, header: Sequence[str], rows: Sequence[Sequence[str]], feature_columns: Sequence[str], *,
            missing: str, max_categories: int, all_rows: Sequence[Sequence[str]]) -> "TabularEncoder":
        encoder = cls(columns=list(feature_columns), missing=missing)
        index = {name: i for i, name in enumerate(header)}
        for column in feature_columns:
            i = index[column]
            present_all = [r[i] for r in all_rows if not is_missing(r[i])]
            if not present_all:
                encoder.ignored[column] = "no values"
                continue
            present = [r[i] for r in rows if not is_missing(r[i])]
            if all(_number(v) is not None for v in present_all):
                numbers = [float(v) for v in present]
                encoder.numeric[column] = sum(numbers) / len(numbers) if numbers else 0.0
                continue
            counts = Counter(present)
            if len(counts) > max_categories and len(counts) > 0.5 * len(present):
                encoder.ignored[column] = f"looks like an identifier ({len(counts)} distinct values)"
                continue
            vocabulary = [cat for cat, _ in counts.most_common(max_categories)]
            if missing == "impute" and len(present) < len(rows):
                vocabulary.append(MISSING_CATEGORY)
            encoder.categorical[column] = sorted(vocabulary)
        if not encoder.numeric and not encoder.categorical:
            raise TorchwiseError("No usable feature columns in the CSV file.",
                                 values={"columns": list(feature_columns), "ignored": encoder.ignored},
                                 fix="the file needs at least one column besides the target")
        return encoder

    def row_is_complete(self, header_index: dict[str, int], row: Sequence[str]) -> bool:
        return all(not is_missing(row[header_index[c]]) for c in (*self.numeric, *self.categorical))

    def encode(self, header: Sequence[str], rows: Sequence[Sequence[str]]):
        """(features float32 [N, F], imputed value count). Rows must already be filtered for 'drop'."""
        import numpy as np

        index = {name: i for i, name in enumerate(header)}
        missing_cols = [c for c in (*self.numeric, *self.categorical) if c not in index]
        if missing_cols:
            raise TorchwiseError("The CSV file lacks columns the model was trained with.",
                                 values={"missing": missing_cols, "columns": list(header)},
                                 fix="use a file with the same columns as the training file")
        out = np.zeros((len(rows), len(self.feature_names)), dtype=np.float32)
        imputed = 0
        for r, row in enumerate(rows):
            j = 0
            for column in self.columns:
                if column in self.numeric:
                    value = row[index[column]]
                    number = None if is_missing(value) else _number(value)
                    if number is None:
                        number = self.numeric[column]
                        imputed += 1
                    out[r, j] = number
                    j += 1
                elif column in self.categorical:
                    vocabulary = self.categorical[column]
                    value = row[index[column]]
                    if is_missing(value):
                        value = MISSING_CATEGORY
                        imputed += 1
                    if value in vocabulary:  # unseen categories stay all-zero
                        out[r, j + vocabulary.index(value)] = 1.0
                    j += len(vocabulary)
        return out, imputed

    def to_dict(self) -> dict[str, Any]:
        return {"columns": self.columns, "numeric": self.numeric, "categorical": self.categorical,
                "ignored": self.ignored, "missing": self.missing}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TabularEncoder":
        return cls(columns=list(data["columns"]), numeric=dict(data["numeric"]),
                   categorical={k: list(v) for k, v in data["categorical"].items()},
                   ignored=dict(data.get("ignored", {})), missing=data.get("missing", "drop"))


@dataclass
class TabularData:
    path: str
    target: str
    problem: str
    encoder: TabularEncoder
    class_names: list[str]
    x_train: Any
    y_train: Any
    x_val: Any
    y_val: Any
    mean: list[float]
    std: list[float]
    target_mean: float = 0.0
    target_std: float = 1.0
    train_rows: list[int] = field(default_factory=list)   # row numbers (0 = first data row)
    val_rows: list[int] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def tabular_meta(self) -> dict[str, Any]:
        return {"target": self.target, "encoder": self.encoder.to_dict(),
                "feature_names": self.encoder.feature_names,
                "target_mean": self.target_mean, "target_std": self.target_std}

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"kind": "CSV table", "root": self.path, "target": self.target,
                                   "problem": self.problem, "features": len(self.mean),
                                   "train_rows": len(self.train_rows), "val_rows": len(self.val_rows),
                                   "missing_values": self.encoder.missing,
                                   "skipped": [], **self.notes}
        if self.problem == "classification":
            import numpy as np

            summary["classes"] = self.class_names
            summary["train_counts"] = dict(zip(self.class_names, np.bincount(self.y_train, minlength=len(self.class_names)).tolist()))
            summary["val_counts"] = dict(zip(self.class_names, np.bincount(self.y_val, minlength=len(self.class_names)).tolist()))
        return summary


def _split(labels: Sequence[Any], problem: str, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    groups: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label if problem == "classification" else 0, []).append(i)
    train, val = [], []
    for key in sorted(groups, key=str):
        items = groups[key]
        rng.shuffle(items)
        n_val = min(len(items) - 1, max(1, round(len(items) * val_fraction))) if len(items) > 1 else 0
        val += items[:n_val]
        train += items[n_val:]
    return sorted(train), sorted(val)


def sort_labels(values: Sequence[str]) -> list[str]:
    unique = sorted(set(values))
    numbers = [_number(v) for v in unique]
    if all(n is not None for n in numbers):
        return [v for _, v in sorted(zip(numbers, unique))]
    return unique


def standardize_stats(x) -> tuple[list[float], list[float]]:
    mean = x.mean(axis=0) if len(x) else x.sum(axis=0)
    std = x.std(axis=0) if len(x) else x.sum(axis=0)
    std[std < 1e-8] = 1.0  # constant columns: centered only
    return [float(v) for v in mean], [float(v) for v in std]


def load_tabular(path: str | Path, target: str | None, *, problem: str = "auto", val_fraction: float = 0.2,
                 seed: int = 0, missing: str = "drop", max_categories: int = 50) -> TabularData:
    import numpy as np

    header, rows = read_csv(path)
    t = check_target(header, target, str(path))
    notes: dict[str, Any] = {"rows_in_file": len(rows)}
    kept = [r for r in rows if not is_missing(r[t])]
    notes["dropped_missing_target"] = len(rows) - len(kept)
    if problem == "auto":
        problem = detect_problem([r[t] for r in kept])
        notes["problem_detected"] = problem
    if problem == "regression":
        bad = [r[t] for r in kept if _number(r[t]) is None][:5]
        if bad:
            raise TorchwiseError("Regression needs a numeric target column.",
                                 values={"target": target, "non-numeric values": bad},
                                 fix="use --problem classification, or clean the column")

    feature_columns = [c for c in header if c != target]
    labels = [r[t] for r in kept]
    train_idx, val_idx = _split(labels, problem, val_fraction, seed)
    encoder = TabularEncoder.fit(header, [kept[i] for i in train_idx], feature_columns,
                                 missing=missing, max_categories=max_categories, all_rows=kept)
    if missing == "drop":
        index = {name: i for i, name in enumerate(header)}
        complete = {i for i, r in enumerate(kept) if encoder.row_is_complete(index, r)}
        notes["dropped_missing_features"] = len(kept) - len(complete)
        train_idx = [i for i in train_idx if i in complete]
        val_idx = [i for i in val_idx if i in complete]
    if not train_idx or not val_idx:
        raise TorchwiseError("Too few usable rows to train and validate.",
                             values={"rows": len(rows), "train": len(train_idx), "val": len(val_idx), **notes},
                             fix="use more rows, or --set data.missing=impute to keep rows with missing values")
    x_train, imputed_train = encoder.encode(header, [kept[i] for i in train_idx])
    x_val, imputed_val = encoder.encode(header, [kept[i] for i in val_idx])
    if missing == "impute":
        notes["imputed_values"] = imputed_train + imputed_val
    if encoder.ignored:
        notes["ignored_columns"] = encoder.ignored
    mean, std = standardize_stats(x_train)
    # Rows are numbered within the file (not within `kept`) so eval can find them again.
    file_row = [i for i, r in enumerate(rows) if not is_missing(r[t])]

    if problem == "classification":
        class_names = sort_labels(labels)
        if len(class_names) < 2:
            raise TorchwiseError("Classification needs at least two classes in the target column.",
                                 values={"target": target, "values": class_names},
                                 fix="pick another --target, or check the file")
        lookup = {name: i for i, name in enumerate(class_names)}
        y_train = np.array([lookup[labels[i]] for i in train_idx], dtype=np.int64)
        y_val = np.array([lookup[labels[i]] for i in val_idx], dtype=np.int64)
        target_mean, target_std = 0.0, 1.0
    else:
        class_names = []
        y_train = np.array([float(labels[i]) for i in train_idx], dtype=np.float32)
        y_val = np.array([float(labels[i]) for i in val_idx], dtype=np.float32)
        target_mean = float(y_train.mean())
        target_std = float(y_train.std()) or 1.0
    return TabularData(
        path=str(path), target=str(target), problem=problem, encoder=encoder, class_names=class_names,
        x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, mean=mean, std=std,
        target_mean=target_mean, target_std=target_std,
        train_rows=[file_row[i] for i in train_idx], val_rows=[file_row[i] for i in val_idx], notes=notes)


def encode_for_eval(path: str | Path, tabular_meta: dict[str, Any], class_names: Sequence[str], problem: str,
                    rows_wanted: Sequence[int] | None = None):
    """(x, y, notes) for a CSV file evaluated with a trained run's encoder. Rows with a missing
    target are dropped; so are rows with missing features when the run dropped them in training."""
    import numpy as np

    header, rows = read_csv(path)
    target = tabular_meta["target"]
    t = check_target(header, target, str(path))
    encoder = TabularEncoder.from_dict(tabular_meta["encoder"])
    if rows_wanted is not None:
        rows = [rows[i] for i in rows_wanted]
    index = {name: i for i, name in enumerate(header)}
    kept = [r for r in rows if not is_missing(r[t])]
    notes: dict[str, Any] = {"rows": len(rows), "dropped_missing_target": len(rows) - len(kept)}
    if encoder.missing == "drop":
        complete = [r for r in kept if encoder.row_is_complete(index, r)]
        notes["dropped_missing_features"] = len(kept) - len(complete)
        kept = complete
    x, _ = encoder.encode(header, kept)
    if problem == "classification":
        lookup = {name: i for i, name in enumerate(class_names)}
        unknown = sorted({r[t] for r in kept} - set(lookup))
        if unknown:
            raise TorchwiseError("The CSV file has target values the model was not trained on.",
                                 values={"unknown": unknown[:10], "known": list(class_names)},
                                 fix="evaluate on rows whose target is one of the known classes")
        y = np.array([lookup[r[t]] for r in kept], dtype=np.int64)
    else:
        y = np.array([float(r[t]) for r in kept], dtype=np.float32)
    return x, y, notes
