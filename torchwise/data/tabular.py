"""Tabular classification or regression from a CSV file.

Preprocessing is fitted on the training rows only (means, standard deviations, category
vocabularies), then applied unchanged to validation rows and, later, to new data at eval time:
the fitted encoder is saved as JSON in the run's metadata. Types are decided from the whole file,
statistics from the training split alone.

Reading the file (torchwise.data.csv_read): the encoding (UTF-8 with or without Excel's byte-order
mark, UTF-16 with one, else Windows-1252/Latin-1, said), the delimiter (`,` `;` tab `|`, or Excel's
`sep=` first line), and every number through torchwise.numbers: a column is numeric when every
present value is a number under one decimal mark, decided per column. A non-finite cell (inf,
#DIV/0!) is missing and said. A column dropped or read as categories (torchwise.data.tabular_encoder)
is said with the reason and example values. This module: the target, the split, the data set.
"""
from __future__ import annotations

import difflib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from torchwise import numbers
from torchwise.data.csv_read import DELIMITERS, Table, describe_reading, detect_delimiter, read_csv, read_table
from torchwise.data.tabular_encoder import MISSING_CATEGORY, TabularEncoder, is_missing, show_examples
from torchwise.errors import TorchwiseError

# What this module offers, with the names of the two modules it was split into that other modules
# (predict.py, the tests) still import from here.
__all__ = ["DECIMALS", "DELIMITERS", "MAX_AUTO_CLASSES", "MISSING_CATEGORY", "MISSING_TOKENS", "TabularData",
           "TabularEncoder", "Table", "check_target", "detect_delimiter", "detect_problem", "encode_for_eval",
           "is_missing", "load_tabular", "read_csv", "read_table", "sort_labels", "standardize_stats"]

MISSING_TOKENS = numbers.MISSING_TOKENS
# A numeric target with at most this many distinct integer values is taken as class labels.
MAX_AUTO_CLASSES = 20
DECIMALS = {"auto": "auto", "point": ".", "comma": ",", ".": ".", ",": ","}


def _number(value: str) -> float | None:
    """A finite number read from one cell alone (a decimal point when the cell cannot tell)."""
    cell = numbers.read_cell(value)
    if cell.kind != "number":
        return None
    return cell.point if cell.point is not None else cell.comma


def check_target(header: Sequence[str], target: str | None, path: str) -> int:
    if target is None:
        raise TorchwiseError("A CSV file needs --target: the column to predict.",
                             values={"file": path, "columns": ", ".join(header)},
                             fix="add --target COLUMN with one of the columns above")
    if target not in header:
        stripped = [h for h in header if h.lower() == target.strip().lower()]
        guess = stripped or difflib.get_close_matches(target, header, n=1, cutoff=0.4)
        values: dict[str, Any] = {"target": target, "columns": ", ".join(header)}
        if guess:
            values["did you mean"] = guess[0]
        raise TorchwiseError("The --target column is not in the CSV file.", values=values,
                             fix=f"use --target {guess[0]}" if guess else "use one of the columns listed")
    return list(header).index(target)


def _problem_of(column: numbers.ColumnNumbers) -> str:
    present = [v for v in column.values if v is not None]
    if not column.numeric or not present:
        return "classification"
    if all(float(v).is_integer() for v in present) and len(set(present)) <= MAX_AUTO_CLASSES:
        return "classification"
    return "regression"


def detect_problem(values: Sequence[str]) -> str:
    return _problem_of(numbers.decide_column([v for v in values if not is_missing(v)]))



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
    target_decimal: str = "."
    warnings: list[str] = field(default_factory=list)

    def tabular_meta(self) -> dict[str, Any]:
        return {"target": self.target, "encoder": self.encoder.to_dict(),
                "feature_names": self.encoder.feature_names,
                "target_mean": self.target_mean, "target_std": self.target_std,
                "target_decimal": self.target_decimal}

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"kind": "CSV table", "root": self.path, "target": self.target,
                                   "problem": self.problem, "features": len(self.mean),
                                   "train_rows": len(self.train_rows), "val_rows": len(self.val_rows),
                                   "missing_values": self.encoder.missing,
                                   "skipped": [], **self.notes}
        if self.warnings:
            summary["warnings"] = list(self.warnings)
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
    numbers_ = [_number(v) for v in unique]
    if all(n is not None for n in numbers_):
        return [v for _, v in sorted(zip(numbers_, unique))]
    return unique


def standardize_stats(x) -> tuple[list[float], list[float]]:
    import numpy as np

    if len(x) and not np.isfinite(x).all():  # the reader makes non-finite cells missing; never normalize them
        bad = sorted({int(j) for j in np.argwhere(~np.isfinite(x))[:, 1]})
        raise TorchwiseError("Some feature values are not finite numbers.", values={"feature indices": bad[:10]},
                             fix="remove inf/nan values from the file, or mark them as empty cells")
    mean = x.mean(axis=0, dtype=np.float64) if len(x) else x.sum(axis=0)
    std = x.std(axis=0, dtype=np.float64) if len(x) else x.sum(axis=0)
    std[std < 1e-8] = 1.0  # constant columns: centered only
    return [float(v) for v in mean], [float(v) for v in std]


def _decimal_setting(decimal: str) -> str:
    if decimal not in DECIMALS:
        raise TorchwiseError("Unknown decimal mark setting.", values={"data.decimal": decimal,
                                                                       "allowed": "auto, point, comma"},
                             fix="use data.decimal=auto, point or comma")
    return DECIMALS[decimal]



@dataclass
class _Target:
    """The rows with a usable target, and what the target column reads as."""
    problem: str
    column: numbers.ColumnNumbers
    kept: list[list[str]]
    values: list[float]            # regression: the target of each kept row; classification: empty


def _target(table: Table, target: str | None, t: int, problem: str, mark: str, warnings: list[str],
            notes: dict[str, Any]) -> _Target:
    """Drop the rows whose target is missing (or, in a regression, not finite), and decide the problem
    ("auto": classification for text or a few integer values)."""
    rows = table.rows
    kept = [r for r in rows if not is_missing(r[t])]
    if not kept:
        raise TorchwiseError("The --target column has no values: every cell of it is empty or missing.",
                             values={"target": target, "rows": len(rows),
                                     "cells": show_examples([r[t] for r in rows]) or "''"},
                             fix="pick the column to predict with --target, or fill in its values")
    target_col = numbers.decide_column([r[t] for r in kept], decimal=mark, hint=table.decimal_hint)
    if problem == "auto":
        problem = _problem_of(target_col)
        notes["problem_detected"] = problem
    values: list[float] = []
    if problem == "regression":
        if not target_col.numeric:
            raise TorchwiseError("Regression needs a numeric target column.",
                                 values={"target": target, "why": target_col.reason or "no numbers",
                                         "non-numeric values": target_col.not_numbers[:5]},
                                 fix="use --problem classification, or clean the column")
        if target_col.guessed:
            warnings.append(f"target {target!r}: {target_col.reason}; set data.decimal=point or "
                            f"data.decimal=comma to say which")
        if target_col.nonfinite:
            warnings.append(f"target {target!r}: {target_col.nonfinite} non-finite value(s) "
                            f"({', '.join(map(repr, target_col.nonfinite_examples))}): those rows are dropped")
            notes["dropped_non_finite_target"] = target_col.nonfinite
        keep = [v is not None for v in target_col.values]
        values = [v for v in target_col.values if v is not None]
        kept = [r for r, k in zip(kept, keep) if k]
    notes["dropped_missing_target"] = len(rows) - len(kept) - notes.get("dropped_non_finite_target", 0)
    return _Target(problem, target_col, kept, values)


def _complete_only(encoder: TabularEncoder, header: Sequence[str], kept: Sequence[Sequence[str]],
                   train_idx: list[int], val_idx: list[int], notes: dict[str, Any]) -> tuple[list[int], list[int]]:
    """data.missing=drop: the split without the rows that have a missing feature (counted in `notes`)."""
    index = {name: i for i, name in enumerate(header)}
    complete = {i for i, r in enumerate(kept) if encoder.row_is_complete(index, r)}
    notes["dropped_missing_features"] = len(kept) - len(complete)
    return [i for i in train_idx if i in complete], [i for i in val_idx if i in complete]


def _targets(problem: str, target: str | None, labels: Sequence[str], values: Sequence[float],
             train_idx: Sequence[int], val_idx: Sequence[int]):
    """(class names, y_train, y_val, target mean, target std): class indices, or the regression values
    with the training split's mean and std (for standardizing the target)."""
    import numpy as np

    if problem == "classification":
        class_names = sort_labels(labels)
        if len(class_names) < 2:
            raise TorchwiseError("Classification needs at least two classes in the target column.",
                                 values={"target": target, "values": class_names},
                                 fix="pick another --target, or check the file")
        lookup = {name: i for i, name in enumerate(class_names)}
        y_train = np.array([lookup[labels[i]] for i in train_idx], dtype=np.int64)
        y_val = np.array([lookup[labels[i]] for i in val_idx], dtype=np.int64)
        return class_names, y_train, y_val, 0.0, 1.0
    y_train = np.array([values[i] for i in train_idx], dtype=np.float32)
    y_val = np.array([values[i] for i in val_idx], dtype=np.float32)
    return [], y_train, y_val, float(y_train.mean()), float(y_train.std()) or 1.0


def load_tabular(path: str | Path, target: str | None, *, problem: str = "auto", val_fraction: float = 0.2,
                 seed: int = 0, missing: str = "drop", max_categories: int = 50,
                 decimal: str = "auto") -> TabularData:
    mark = _decimal_setting(decimal)
    table = read_table(path)
    header, rows = table.header, table.rows
    warnings = list(table.warnings)
    t = check_target(header, target, str(path))
    notes: dict[str, Any] = {"rows_in_file": len(rows), **table.notes}
    found = _target(table, target, t, problem, mark, warnings, notes)
    kept = found.kept

    feature_columns = [c for c in header if c != target]
    labels = [r[t] for r in kept]
    train_idx, val_idx = _split(labels, found.problem, val_fraction, seed)
    encoder = TabularEncoder.fit(header, [kept[i] for i in train_idx], feature_columns,
                                 missing=missing, max_categories=max_categories, all_rows=kept,
                                 decimal=mark, decimal_hint=table.decimal_hint, warnings=warnings)
    if missing == "drop":
        train_idx, val_idx = _complete_only(encoder, header, kept, train_idx, val_idx, notes)
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
    if encoder.why:
        notes["column_types"] = dict(encoder.why)
    notes["id_columns"] = list(encoder.ids)
    notes["read_as"] = describe_reading(table.delimiter, encoder.decimals.values(), encoder.ids,
                                        encoding=table.encoding,
                                        decided="detected" if decimal == "auto" else f"data.decimal={decimal}")
    encoder.forget_rows()
    mean, std = standardize_stats(x_train)
    # Rows are numbered within the file (not within `kept`) so eval can find them again.
    kept_ids = {id(r) for r in kept}
    file_row = [i for i, r in enumerate(rows) if id(r) in kept_ids]
    class_names, y_train, y_val, target_mean, target_std = _targets(found.problem, target, labels, found.values,
                                                                    train_idx, val_idx)
    return TabularData(
        path=str(path), target=str(target), problem=found.problem, encoder=encoder, class_names=class_names,
        x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, mean=mean, std=std,
        target_mean=target_mean, target_std=target_std,
        train_rows=[file_row[i] for i in train_idx], val_rows=[file_row[i] for i in val_idx], notes=notes,
        target_decimal=found.column.decimal if found.column.numeric else ".", warnings=warnings)


def encode_for_eval(path: str | Path, tabular_meta: dict[str, Any], class_names: Sequence[str], problem: str,
                    rows_wanted: Sequence[int] | None = None):
    """(x, y, notes) for a CSV file evaluated with a trained run's encoder. Rows with a missing
    target are dropped; so are rows with missing features when the run dropped them in training."""
    import numpy as np

    header, rows = read_csv(path)
    target = tabular_meta["target"]
    t = check_target(header, target, str(path))
    encoder = TabularEncoder.from_dict(tabular_meta["encoder"])
    target_decimal = tabular_meta.get("target_decimal", ".")
    if rows_wanted is not None:
        rows = [rows[i] for i in rows_wanted]
    index = {name: i for i, name in enumerate(header)}
    if problem == "classification":
        kept = [r for r in rows if not is_missing(r[t])]
    else:
        kept = [r for r in rows if numbers.value_with(r[t], target_decimal) is not None]
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
        y = np.array([numbers.value_with(r[t], target_decimal) for r in kept], dtype=np.float32)
    return x, y, notes
