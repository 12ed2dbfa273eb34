"""Tabular classification or regression from a CSV file.

Preprocessing is fitted on the training rows only (means, standard deviations, category
vocabularies), then applied unchanged to validation rows and, later, to new data at eval time:
the fitted encoder is saved as JSON in the run's metadata. Types are decided from the whole file,
statistics from the training split alone.

Reading the file: the encoding (UTF-8 with or without Excel's byte-order mark, UTF-16 with one,
else Windows-1252/Latin-1, said), the delimiter (`,` `;` tab `|`, or Excel's `sep=` first line),
and every number through torchwise.numbers: a column is numeric when every present value is a
number under one decimal mark, decided per column. A non-finite cell (inf, #DIV/0!) is missing and
said. A column dropped or read as categories is said with the reason and example values.
"""
from __future__ import annotations

import csv
import difflib
import io
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from torchwise import numbers
from torchwise.errors import TorchwiseError

MISSING_TOKENS = numbers.MISSING_TOKENS
MISSING_CATEGORY = "<missing>"
# A numeric target with at most this many distinct integer values is taken as class labels.
MAX_AUTO_CLASSES = 20
DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
_SAMPLE_LINES = 200
DECIMALS = {"auto": "auto", "point": ".", "comma": ",", ".": ".", ",": ","}


def is_missing(value: str) -> bool:
    return numbers.is_missing_text(value)


def _number(value: str) -> float | None:
    """A finite number read from one cell alone (a decimal point when the cell cannot tell)."""
    cell = numbers.read_cell(value)
    if cell.kind != "number":
        return None
    return cell.point if cell.point is not None else cell.comma


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    delimiter: str = ","
    encoding: str = "utf-8"
    notes: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def decimal_hint(self) -> str:
        """The decimal mark a column that cannot tell is read with: a semicolon-separated file is
        the way spreadsheets write a decimal comma."""
        return "," if self.delimiter == ";" else "."


_BINARY_MAGIC = {b"PK\x03\x04": "a ZIP archive (an Excel .xlsx or OpenDocument workbook is one)",
                 b"\xd0\xcf\x11\xe0": "an old Excel .xls workbook", b"\x1f\x8b": "a gzip archive",
                 b"PAR1": "a Parquet file", b"%PDF": "a PDF document", b"\x89PNG": "a PNG image",
                 b"\xff\xd8\xff": "a JPEG image", b"SQLite format": "an SQLite database"}


def _not_text(path: Path, what: str) -> TorchwiseError:
    return TorchwiseError("The data file is not a CSV text file.", values={"path": str(path), "it is": what},
                          fix="save the table as CSV (in a spreadsheet: File > Save As > CSV UTF-8) and pass that "
                              "file to --data")


def _decode(path: Path, raw: bytes) -> tuple[str, str, list[str]]:
    """(text, encoding, warnings)."""
    for magic, what in _BINARY_MAGIC.items():
        if raw.startswith(magic):
            raise _not_text(path, what)
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16"), "utf-16", []
        except UnicodeDecodeError:
            raise _not_text(path, "binary data (an unreadable UTF-16 text)") from None
    if b"\x00" in raw[:65536]:
        raise _not_text(path, "binary data (it contains NUL bytes)")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8"), "utf-8", []
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        try:
            text, encoding = raw.decode("cp1252"), "cp1252"
        except UnicodeDecodeError:
            text, encoding = raw.decode("latin-1"), "latin-1"
        return text, encoding, [f"the file is not UTF-8 (byte 0x{raw[exc.start]:02x} on line {line}); read it as "
                                f"{'Windows-1252' if encoding == 'cp1252' else 'Latin-1'}: check accented "
                                f"names (save as CSV UTF-8 to be sure)"]


def _split_lines(text: str, delimiter: str, limit: int) -> list[list[str]]:
    rows = []
    try:
        for row in csv.reader(io.StringIO(text), delimiter=delimiter):
            if any(cell.strip() for cell in row):
                rows.append(row)
            if len(rows) >= limit:
                break
    except csv.Error:
        return []
    return rows


def detect_delimiter(text: str) -> str:
    """The delimiter that splits the header into most columns while every sampled row has as many."""
    best, best_score = ",", (-1.0, 0)
    for delimiter in DELIMITERS:
        rows = _split_lines(text, delimiter, _SAMPLE_LINES)
        if not rows or len(rows[0]) < 2:
            continue
        width = len(rows[0])
        body = rows[1:-1] if len(rows) > 2 else rows[1:]  # the sample's last line may be cut
        share = sum(len(r) == width for r in body) / len(body) if body else 1.0
        score = (share, width)
        if score > best_score:
            best, best_score = delimiter, score
    return best


def read_table(path: str | Path) -> Table:
    path = Path(path)
    if not path.is_file():
        raise TorchwiseError("The CSV file does not exist.", values={"path": str(path)},
                             fix="pass --data with the path of an existing .csv file")
    raw = path.read_bytes()
    text, encoding, warnings = _decode(path, raw)
    text = text.lstrip("\ufeff")
    notes: dict[str, Any] = {}
    first, _, rest = text.partition("\n")
    if first.strip().lower().startswith("sep=") and len(first.strip()) == 5:  # Excel's "sep=;" line
        delimiter, text = first.strip()[4], rest
    else:
        delimiter = detect_delimiter(text)
    if delimiter != ",":
        notes["delimiter"] = _DELIMITER_NAMES.get(delimiter, delimiter)
    if encoding not in ("utf-8",):
        notes["encoding"] = encoding
    try:
        rows = [row for row in csv.reader(io.StringIO(text), delimiter=delimiter) if any(c.strip() for c in row)]
    except csv.Error as exc:
        raise TorchwiseError("The CSV file cannot be read.", values={"path": str(path), "error": str(exc)},
                             fix="check the quoting of the line shown, or save the file again as CSV") from None
    if len(rows) < 2:
        raise TorchwiseError("The CSV file has no data rows.", values={"path": str(path), "lines": len(rows)},
                             fix="the first line must name the columns, and each following line is one example")
    header = [name.strip() for name in rows[0]]
    for i, name in enumerate(header):
        if not name:
            header[i] = f"column {i + 1}"
            warnings.append(f"column {i + 1} has no name in the header; it is called {header[i]!r}")
    seen: dict[str, int] = {}
    for i, name in enumerate(header):
        if name in seen:
            raise TorchwiseError("Two columns of the CSV file have the same name.",
                                 values={"path": str(path), "name": name,
                                         "positions": f"columns {seen[name] + 1} and {i + 1}",
                                         "header": ", ".join(header)},
                                 fix="rename one of them in the first line of the file, so every column has "
                                     "its own name")
        seen[name] = i
    width = len(header)
    bad = [i + 2 for i, row in enumerate(rows[1:]) if len(row) != width]
    if bad:
        raise TorchwiseError("Some CSV rows do not have one value per column.",
                             values={"path": str(path), "columns": width, "delimiter": repr(delimiter),
                                     "bad line numbers": bad[:10]},
                             fix="fix or remove these lines (a quoted value may contain the delimiter)")
    return Table(header=header, rows=[[cell.strip() for cell in row] for row in rows[1:]], delimiter=delimiter,
                 encoding=encoding, notes=notes, warnings=warnings)


def read_csv(path: str | Path) -> tuple[list[str], list[list[str]]]:
    table = read_table(path)
    return table.header, table.rows


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


def _examples(values: Sequence[str], n: int = 3) -> str:
    return ", ".join(repr(v) for v in numbers.examples(values, n))


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
    decimals: dict[str, str] = field(default_factory=dict)           # numeric column -> "." or ","
    # why a column is categories rather than numbers, or how its decimal mark was decided
    why: dict[str, str] = field(default_factory=dict)
    # while the training file is being encoded: the values its cells were read as (row id -> position)
    _rows: dict[int, int] | None = field(default=None, repr=False, compare=False)
    _values: dict[str, list[float | None]] | None = field(default=None, repr=False, compare=False)

    @property
    def feature_names(self) -> list[str]:
        names = []
        for column in self.columns:
            if column in self.numeric:
                names.append(column)
            elif column in self.categorical:
                names.extend(f"{column}={cat}" for cat in self.categorical[column])
        return names

    def value(self, column: str, text: str, row: Sequence[str] | None = None) -> float | None:
        """The number in a numeric column's cell (None: missing, non-finite or not a number)."""
        if self._rows is not None and row is not None and self._values is not None:
            pos = self._rows.get(id(row))
            if pos is not None and column in self._values:
                return self._values[column][pos]
        return numbers.value_with(text, self.decimals.get(column, "."))

    def forget_rows(self) -> None:
        """Drop the values read during fit (row ids are only meaningful while those rows live)."""
        self._rows = self._values = None

    @classmethod
    def fit(cls, header: Sequence[str], rows: Sequence[Sequence[str]], feature_columns: Sequence[str], *,
            missing: str, max_categories: int, all_rows: Sequence[Sequence[str]], decimal: str = "auto",
            decimal_hint: str = ".", warnings: list[str] | None = None) -> "TabularEncoder":
        encoder = cls(columns=list(feature_columns), missing=missing)
        warnings = warnings if warnings is not None else []
        index = {name: i for i, name in enumerate(header)}
        columns = {c: numbers.decide_column([r[index[c]] for r in all_rows], decimal=decimal, hint=decimal_hint)
                   for c in feature_columns}
        proofs = {c: col for c, col in columns.items() if col.numeric and col.proven}
        if decimal == "auto" and len({col.proven for col in proofs.values()}) == 1:
            # other columns of the file show the decimal mark: a column that cannot tell follows them
            witness, proof = next(iter(proofs.items()))
            for c, col in columns.items():
                if col.guessed:
                    if col.decimal != proof.proven:
                        col = numbers.decide_column([r[index[c]] for r in all_rows], hint=proof.proven or ".")
                    col.guessed = False
                    col.reason = (f"{', '.join(map(repr, col.ambiguous_examples))} read with {col.decimal!r} as "
                                  f"the decimal mark, as column {witness!r} shows ({proof.reason})")
                    columns[c] = col
        for column in feature_columns:
            i = index[column]
            col = columns[column]
            present_all = [r[i] for r in all_rows if not is_missing(r[i])]
            if col.numeric:
                if encoder._rows is None:
                    encoder._rows = {id(r): k for k, r in enumerate(all_rows)}
                    encoder._values = {}
                assert encoder._values is not None
                encoder._values[column] = col.values
                values = [v for v in (encoder.value(column, r[i], r) for r in rows) if v is not None]
                encoder.numeric[column] = sum(values) / len(values) if values else 0.0
                encoder.decimals[column] = col.decimal
                if col.guessed:
                    encoder.why[column] = col.reason
                    warnings.append(f"column {column!r}: {col.reason}; set data.decimal=point or "
                                    f"data.decimal=comma to say which")
                elif col.reason:
                    encoder.why[column] = col.reason
                if col.nonfinite:
                    what = "its row is dropped" if missing == "drop" else "imputed with the training mean"
                    warnings.append(f"column {column!r}: {col.nonfinite} non-finite value(s) "
                                    f"({', '.join(map(repr, col.nonfinite_examples))}) read as missing: {what}")
                continue
            if not present_all:
                encoder.ignored[column] = "no values (every cell is empty or missing)"
                continue
            if col.number_count and not col.not_number_count and col.reason.startswith("numbers written"):
                encoder.ignored[column] = f"{col.reason}; set data.decimal=point or data.decimal=comma"
                warnings.append(f"column {column!r} ignored: {encoder.ignored[column]}")
                continue
            if not col.number_count and col.nonfinite and not col.not_number_count:
                encoder.ignored[column] = (f"no numbers: every present value is non-finite "
                                           f"(e.g. {', '.join(map(repr, col.nonfinite_examples))})")
                continue
            present = [r[i] for r in rows if not is_missing(r[i])]
            counts = Counter(present)
            numbers_note = (f"not numeric: {col.reason}" if col.number_count else
                            f"text values (e.g. {_examples(present_all)})")
            if len(counts) > max_categories and len(counts) > 0.5 * len(present):
                encoder.ignored[column] = (f"looks like an identifier ({len(counts)} distinct values in "
                                           f"{len(present)} training rows, e.g. {_examples(present)}); "
                                           f"{numbers_note}")
                if col.number_count > col.not_number_count:
                    warnings.append(f"column {column!r} ignored: {encoder.ignored[column]}")
                continue
            vocabulary = [cat for cat, _ in counts.most_common(max_categories)]
            if missing == "impute" and len(present) < len(rows):
                vocabulary.append(MISSING_CATEGORY)
            encoder.categorical[column] = sorted(vocabulary)
            encoder.why[column] = f"categories: {numbers_note}"
            if col.number_count > col.not_number_count:
                warnings.append(f"column {column!r} read as categories, not numbers: {col.reason}")
        if not encoder.numeric and not encoder.categorical:
            raise TorchwiseError("No usable feature columns in the CSV file.",
                                 values={"columns": list(feature_columns), "ignored": encoder.ignored},
                                 fix="the file needs at least one column besides the target")
        return encoder

    def _absent(self, column: str, row: Sequence[str], i: int) -> bool:
        if column in self.numeric:
            return self.value(column, row[i], row) is None
        return is_missing(row[i])

    def row_is_complete(self, header_index: dict[str, int], row: Sequence[str]) -> bool:
        return all(not self._absent(c, row, header_index[c]) for c in (*self.numeric, *self.categorical))

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
                    number = self.value(column, row[index[column]], row)
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
                "ignored": self.ignored, "missing": self.missing, "decimals": self.decimals, "why": self.why}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TabularEncoder":
        return cls(columns=list(data["columns"]), numeric=dict(data["numeric"]),
                   categorical={k: list(v) for k, v in data["categorical"].items()},
                   ignored=dict(data.get("ignored", {})), missing=data.get("missing", "drop"),
                   decimals=dict(data.get("decimals", {})), why=dict(data.get("why", {})))


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


def load_tabular(path: str | Path, target: str | None, *, problem: str = "auto", val_fraction: float = 0.2,
                 seed: int = 0, missing: str = "drop", max_categories: int = 50,
                 decimal: str = "auto") -> TabularData:
    import numpy as np

    mark = _decimal_setting(decimal)
    table = read_table(path)
    header, rows = table.header, table.rows
    warnings = list(table.warnings)
    t = check_target(header, target, str(path))
    notes: dict[str, Any] = {"rows_in_file": len(rows), **table.notes}
    kept = [r for r in rows if not is_missing(r[t])]
    if not kept:
        raise TorchwiseError("The --target column has no values: every cell of it is empty or missing.",
                             values={"target": target, "rows": len(rows),
                                     "cells": _examples([r[t] for r in rows]) or "''"},
                             fix="pick the column to predict with --target, or fill in its values")
    target_col = numbers.decide_column([r[t] for r in kept], decimal=mark, hint=table.decimal_hint)
    if problem == "auto":
        problem = _problem_of(target_col)
        notes["problem_detected"] = problem
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
        target_values = [v for v in target_col.values if v is not None]
        kept = [r for r, k in zip(kept, keep) if k]
    notes["dropped_missing_target"] = len(rows) - len(kept) - notes.get("dropped_non_finite_target", 0)

    feature_columns = [c for c in header if c != target]
    labels = [r[t] for r in kept]
    train_idx, val_idx = _split(labels, problem, val_fraction, seed)
    encoder = TabularEncoder.fit(header, [kept[i] for i in train_idx], feature_columns,
                                 missing=missing, max_categories=max_categories, all_rows=kept,
                                 decimal=mark, decimal_hint=table.decimal_hint, warnings=warnings)
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
    if encoder.why:
        notes["column_types"] = dict(encoder.why)
    encoder.forget_rows()
    mean, std = standardize_stats(x_train)
    # Rows are numbered within the file (not within `kept`) so eval can find them again.
    kept_ids = {id(r) for r in kept}
    file_row = [i for i, r in enumerate(rows) if id(r) in kept_ids]

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
        y_train = np.array([target_values[i] for i in train_idx], dtype=np.float32)
        y_val = np.array([target_values[i] for i in val_idx], dtype=np.float32)
        target_mean = float(y_train.mean())
        target_std = float(y_train.std()) or 1.0
    return TabularData(
        path=str(path), target=str(target), problem=problem, encoder=encoder, class_names=class_names,
        x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val, mean=mean, std=std,
        target_mean=target_mean, target_std=target_std,
        train_rows=[file_row[i] for i in train_idx], val_rows=[file_row[i] for i in val_idx], notes=notes,
        target_decimal=target_col.decimal if target_col.numeric else ".", warnings=warnings)


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
