"""The fitted preprocessing of a CSV table: one float vector per row, learnt from the training rows.

Numeric columns as they are (missing: the training mean), categorical columns one-hot over the
training vocabulary, identifier-like and empty columns ignored (said with the reason and example
values). Types are decided from the whole file, statistics from the training rows alone; the fitted
encoder is saved as JSON in the run's metadata and applied unchanged to validation and new data.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from torchwise import numbers
from torchwise.errors import TorchwiseError

MISSING_CATEGORY = "<missing>"
# The reason an identifier column is ignored starts with this (runs saved before `ids` was recorded
# are read back through it).
IDENTIFIER = "looks like an identifier"


def is_missing(value: str) -> bool:
    return numbers.is_missing_text(value)


def show_examples(values: Sequence[str], n: int = 3) -> str:
    """The first `n` distinct values, quoted, for a message."""
    return ", ".join(repr(v) for v in numbers.examples(values, n))


def _read_columns(all_rows: Sequence[Sequence[str]], index: dict[str, int], feature_columns: Sequence[str],
                  decimal: str, decimal_hint: str) -> dict[str, numbers.ColumnNumbers]:
    """How each feature column of the whole file reads as numbers. A column that cannot tell its
    decimal mark follows the other columns of the file when they all show the same one."""
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
    return columns


def _fit_numeric(encoder: TabularEncoder, column: str, col: numbers.ColumnNumbers, i: int,
                 rows: Sequence[Sequence[str]], all_rows: Sequence[Sequence[str]], warnings: list[str]) -> None:
    """A numeric column: its training mean (for imputation), its decimal mark and how it was decided."""
    encoder.remember_values(all_rows, column, col.values)
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
        what = "its row is dropped" if encoder.missing == "drop" else "imputed with the training mean"
        warnings.append(f"column {column!r}: {col.nonfinite} non-finite value(s) "
                        f"({', '.join(map(repr, col.nonfinite_examples))}) read as missing: {what}")


# Column names that say "identifier" (lower case, dots and spaces dropped); a name ending in "_id",
# " id", "-id" or camel-case "Id"/"ID" (customerId, WineID) says it too.
_ID_NAMES = {"id", "ids", "identifier", "index", "idx", "row", "rowid", "rownumber", "nr", "no", "#", "n°"}
_ID_SUFFIX = re.compile(r"(^|[_\s.\-])id$|[a-z0-9](Id|ID)$")


def _named_identifier(column: str, cells: Sequence[str]) -> str | None:
    """Why `column` is an identifier when its name says so and every row has its own value (1, 2, 3 or
    A-17): numbers that only count rows would be learnt as a feature (a file sorted by class makes them
    predict it). None otherwise."""
    name = column.strip()
    if name.lower().replace(".", "").replace(" ", "") not in _ID_NAMES and not _ID_SUFFIX.search(name.lower()) \
            and not _ID_SUFFIX.search(name):
        return None
    if len(cells) < 2 or any(is_missing(c) for c in cells) or len(set(cells)) < len(cells):
        return None
    return (f"{IDENTIFIER} (named {column!r}, every one of the {len(cells)} rows has its own value, e.g. "
            f"{show_examples(cells)})")


def _unusable(col: numbers.ColumnNumbers, present_all: Sequence[str]) -> tuple[str, bool] | None:
    """(why the column is ignored, whether to warn), for a column with nothing to learn from; None if usable."""
    if not present_all:
        return "no values (every cell is empty or missing)", False
    if col.number_count and not col.not_number_count and col.reason.startswith("numbers written"):
        return f"{col.reason}; set data.decimal=point or data.decimal=comma", True
    if not col.number_count and col.nonfinite and not col.not_number_count:
        return (f"no numbers: every present value is non-finite "
                f"(e.g. {', '.join(map(repr, col.nonfinite_examples))})"), False
    return None


def _fit_categories(encoder: TabularEncoder, column: str, col: numbers.ColumnNumbers, i: int,
                    rows: Sequence[Sequence[str]], all_rows: Sequence[Sequence[str]], max_categories: int,
                    warnings: list[str]) -> None:
    """A column that is not numeric: its training vocabulary, or ignored (empty, two decimal marks,
    only non-finite values, or an identifier) with the reason."""
    present_all = [r[i] for r in all_rows if not is_missing(r[i])]
    unusable = _unusable(col, present_all)
    if unusable is not None:
        encoder.ignored[column], warn = unusable
        if warn:
            warnings.append(f"column {column!r} ignored: {encoder.ignored[column]}")
        return
    present = [r[i] for r in rows if not is_missing(r[i])]
    counts = Counter(present)
    numbers_note = (f"not numeric: {col.reason}" if col.number_count else
                    f"text values (e.g. {show_examples(present_all)})")
    if len(counts) > max_categories and len(counts) > 0.5 * len(present):
        encoder.ids.append(column)  # predict keeps its values beside each prediction
        encoder.ignored[column] = (f"{IDENTIFIER} ({len(counts)} distinct values in "
                                   f"{len(present)} training rows, e.g. {show_examples(present)}); "
                                   f"{numbers_note}")
        if col.number_count > col.not_number_count:
            warnings.append(f"column {column!r} ignored: {encoder.ignored[column]}")
        return
    vocabulary = [cat for cat, _ in counts.most_common(max_categories)]
    if encoder.missing == "impute" and len(present) < len(rows):
        vocabulary.append(MISSING_CATEGORY)
    encoder.categorical[column] = sorted(vocabulary)
    encoder.why[column] = f"categories: {numbers_note}"
    if col.number_count > col.not_number_count:
        warnings.append(f"column {column!r} read as categories, not numbers: {col.reason}")


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
    # identifier columns (ignored as features): predict writes their values beside each prediction
    ids: list[str] = field(default_factory=list)
    # while the training file is being encoded (remember_values): the values its cells were read as
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

    def remember_values(self, rows: Sequence[Sequence[str]], column: str, values: list[float | None]) -> None:
        """While the training file is encoded: `values` are what `column`'s cells of `rows` read as (the
        decimal mark decided for the whole file), so `value` answers them for these rows without reading
        the text again. Found by row identity, until forget_rows."""
        if self._rows is None:
            self._rows = {id(r): k for k, r in enumerate(rows)}
            self._values = {}
        assert self._values is not None
        self._values[column] = values

    def forget_rows(self) -> None:
        """Drop the values read during fit (row ids are only meaningful while those rows live)."""
        self._rows = self._values = None

    @classmethod
    def fit(cls, header: Sequence[str], rows: Sequence[Sequence[str]], feature_columns: Sequence[str], *,
            missing: str, max_categories: int, all_rows: Sequence[Sequence[str]], decimal: str = "auto",
            decimal_hint: str = ".", warnings: list[str] | None = None) -> "TabularEncoder":
        """Types from `all_rows` (the whole file), statistics and vocabularies from `rows` (training)."""
        encoder = cls(columns=list(feature_columns), missing=missing)
        warnings = warnings if warnings is not None else []
        index = {name: i for i, name in enumerate(header)}
        columns = _read_columns(all_rows, index, feature_columns, decimal, decimal_hint)
        for column in feature_columns:
            named_id = _named_identifier(column, [r[index[column]] for r in all_rows])
            if named_id is not None:
                encoder.ids.append(column)  # predict keeps its values beside each prediction
                encoder.ignored[column] = named_id
            elif columns[column].numeric:
                _fit_numeric(encoder, column, columns[column], index[column], rows, all_rows, warnings)
            else:
                _fit_categories(encoder, column, columns[column], index[column], rows, all_rows, max_categories,
                                warnings)
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
                "ignored": self.ignored, "missing": self.missing, "decimals": self.decimals, "why": self.why,
                "ids": self.ids}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TabularEncoder":
        return cls(columns=list(data["columns"]), numeric=dict(data["numeric"]),
                   categorical={k: list(v) for k, v in data["categorical"].items()},
                   ignored=dict(data.get("ignored", {})), missing=data.get("missing", "drop"),
                   decimals=dict(data.get("decimals", {})), why=dict(data.get("why", {})),
                   ids=list(data.get("ids") or [c for c, why in data.get("ignored", {}).items()
                                                if str(why).startswith(IDENTIFIER)]))
