"""Reading numbers from text: the one place torchwise does it (CSV cells and configuration values).

People write numbers in many ways; all of these are read as the number they mean:

    1234.5   +1234.5   1e-3   1E+05   .5   -7   −7 (Unicode minus)   (12.5) (accounting negative)
    20,618.57   1 234,5   1'234.50   1.234.567,8   1_000   (thousands separators, groups of three)
    3,14 (decimal comma)   12% (0.12)   $1,200.50   €3,50   1.200 £   (currency symbols)

A thousands separator is accepted only with consistent grouping (1 to 3 digits, then groups of
exactly 3), so `1,5` or `12,34` can only be a decimal comma. A cell such as `1,234` reads as 1234
with a decimal point and as 1.234 with a decimal comma: `read_cell` returns both readings, and
`decide_column` chooses the decimal mark once per column (never per cell) from the cells that prove
it, saying so when no cell does. `read_number` reads one value (a configuration value) and refuses
to guess between two readings.

Missing: empty, NA, N/A, NaN, null, none, ?, -, #N/A. Non-finite (inf, -inf, infinity, ∞, a number
too large for a float, Excel's #DIV/0! and other error values) is a separate kind: the CSV reader
treats such a cell as missing and says how many there were, so it never reaches the statistics.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

MISSING_TOKENS = frozenset({"", "na", "n/a", "n.a.", "nan", "null", "none", "?", "-", "--", "#n/a"})
NONFINITE_TOKENS = frozenset({"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "∞", "+∞", "-∞",
                              "#div/0!", "#value!", "#num!", "#ref!", "#name?", "#null!"})
CURRENCY = "$€£¥₹₩₽₺"
# characters read as a thousands separator (besides the comma or point not used as the decimal mark)
_SPACES = {"\u00a0": " ", "\u202f": " ", "\u2009": " ", "\u2007": " "}
_MINUS = {"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"}
_GROUP_CHARS = ",. '_"

MISSING = "missing"
NONFINITE = "non-finite"

_PLAIN = re.compile(r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_FAST = re.compile(r"[+-]?\d+(\.\d+)?([eE][+-]?\d+)?")   # the common case: 12, -0.5, 1e-3, 2.5E+05
_DOT_GROUPS = re.compile(r"[+-]?[1-9]\d{0,2}(\.\d{3})+")    # 1.234: also 1234 with a decimal comma
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class Cell:
    """What one piece of text is: missing, non-finite, not a number, or a number with one value per
    decimal mark ("." and ","; None where the text cannot be read with that mark)."""
    kind: str                      # "number" | MISSING | NONFINITE | "text"
    point: float | None = None     # the value with "." as the decimal mark
    comma: float | None = None     # the value with "," as the decimal mark

    @property
    def ambiguous(self) -> bool:
        return self.point is not None and self.comma is not None and self.point != self.comma


TEXT = Cell("text")
_MISSING_CELL = Cell(MISSING)
_NONFINITE_CELL = Cell(NONFINITE)


def is_missing_text(text: str) -> bool:
    return text.strip().lower() in MISSING_TOKENS


def _core_value(core: str, decimal: str) -> float | None:
    """The value of unsigned `core` (digits, separators, exponent) with `decimal` as the decimal
    mark, or None. Thousands separators: one kind per number, groups of three after the first."""
    mantissa, exp = core, ""
    m = re.search(r"[eE][+-]?\d+$", core)
    if m:
        mantissa, exp = core[:m.start()], m.group(0)
    if mantissa.count(decimal) > 1:
        return None
    whole, _, frac = mantissa.partition(decimal)
    if frac and not frac.isdigit():
        return None
    if not whole:
        if not frac:
            return None
        digits = "0"
    elif whole.isdigit():
        digits = whole
    else:
        seps = {c for c in whole if not c.isdigit()}
        if len(seps) != 1 or (sep := seps.pop()) == decimal or sep not in _GROUP_CHARS:
            return None
        groups = whole.split(sep)
        if not (1 <= len(groups[0]) <= 3 and groups[0].isdigit() and groups[0][0] != "0"
                and all(len(g) == 3 and g.isdigit() for g in groups[1:])):
            return None
        if exp:  # 1,234e5: grouping and an exponent together is not a way numbers are written
            return None
        digits = "".join(groups)
    try:
        value = float(f"{digits}.{frac or '0'}{exp}")
    except ValueError:
        return None
    return value


def read_cell(text: str, *, units: bool = True) -> Cell:
    """Read one cell. `units`: also accept a percent sign, a currency symbol and an accounting
    negative in parentheses."""
    s = text.strip()
    if _FAST.fullmatch(s):
        value = float(s)
        if not math.isfinite(value):
            return _NONFINITE_CELL
        if "." not in s:
            return Cell("number", value, value)
        return Cell("number", value, float(s.replace(".", "")) if _DOT_GROUPS.fullmatch(s) else None)
    low = s.lower()
    if low in MISSING_TOKENS:
        return _MISSING_CELL
    if low in NONFINITE_TOKENS:
        return _NONFINITE_CELL
    for a, b in _SPACES.items():
        s = s.replace(a, b)
    for a, b in _MINUS.items():
        s = s.replace(a, b)
    negative = False
    scale = 1.0
    if units:
        if len(s) > 2 and s[0] == "(" and s[-1] == ")":
            negative, s = True, s[1:-1].strip()
        if s.endswith("%"):
            scale, s = 0.01, s[:-1].strip()
    sign_seen = False
    if s[:1] in "+-":
        negative, sign_seen, s = negative != (s[0] == "-"), True, s[1:].lstrip()
    if units and s[:1] and s[0] in CURRENCY:
        s = s[1:].lstrip()
        if not sign_seen and s[:1] in "+-":  # $-12
            negative, s = s[0] == "-", s[1:].lstrip()
    elif units and s[-1:] and s[-1] in CURRENCY:
        s = s[:-1].rstrip()
    if not s or not s[0].isdigit() and s[0] not in ".,":
        if s.lower() in ("inf", "infinity", "∞"):
            return _NONFINITE_CELL
        return TEXT
    if _PLAIN.fullmatch(s):  # digits with at most one "." and an optional exponent
        point = float(s)
        comma = _core_value(s, ",") if "." in s else point  # "1.234" is 1234 with a decimal comma
    else:
        if any(not (c.isdigit() or c in _GROUP_CHARS or c in "eE+-") for c in s):
            return TEXT
        point, comma = _core_value(s, "."), _core_value(s, ",")
        if point is None and comma is None:
            return TEXT
    sign = -scale if negative else scale
    point = None if point is None else point * sign
    comma = None if comma is None else comma * sign
    if (point is not None and not math.isfinite(point)) or (comma is not None and not math.isfinite(comma)):
        return _NONFINITE_CELL
    return Cell("number", point, comma)


@dataclass
class ColumnNumbers:
    """How a column's text reads as numbers (`decide_column`)."""
    numeric: bool
    decimal: str = "."                    # the decimal mark chosen for the whole column
    values: list[float | None] = field(default_factory=list)  # per cell; None: missing or non-finite
    missing: int = 0
    nonfinite: int = 0
    nonfinite_examples: list[str] = field(default_factory=list)
    not_numbers: list[str] = field(default_factory=list)      # distinct examples (at most 5)
    not_number_count: int = 0
    number_count: int = 0
    reason: str = ""                       # why not numeric, or how the decimal mark was decided
    guessed: bool = False                  # the decimal mark was not proven by any cell
    proven: str | None = None              # the decimal mark a cell of the column proves, if any
    ambiguous_examples: list[str] = field(default_factory=list)


@dataclass
class _Marks:
    """What the number cells of a column say about its decimal mark."""
    point_ok: bool = True                  # every number cell reads with a decimal point
    comma_ok: bool = True                  # ... with a decimal comma
    point_proof: str | None = None         # the first cell that only reads with a point
    comma_proof: str | None = None         # ... only with a comma
    ambiguous: list[str] = field(default_factory=list)  # cells two readings make different (at most 3)


def _tally(texts: Sequence[str], cells: Sequence[Cell], result: ColumnNumbers) -> _Marks:
    """Count the column's cells by kind into `result` (with examples); return what they say of the mark."""
    marks = _Marks()
    for text, cell in zip(texts, cells):
        if cell.kind == MISSING:
            result.missing += 1
        elif cell.kind == NONFINITE:
            result.nonfinite += 1
            if len(result.nonfinite_examples) < 3 and text.strip() not in result.nonfinite_examples:
                result.nonfinite_examples.append(text.strip())
        elif cell.kind == "text":
            result.not_number_count += 1
            if len(result.not_numbers) < 5 and text.strip() not in result.not_numbers:
                result.not_numbers.append(text.strip())
        else:
            result.number_count += 1
            if cell.point is None:
                marks.point_ok = False
                marks.comma_proof = marks.comma_proof or text.strip()
            if cell.comma is None:
                marks.comma_ok = False
                marks.point_proof = marks.point_proof or text.strip()
            if cell.ambiguous and len(marks.ambiguous) < 3:
                marks.ambiguous.append(text.strip())
    return marks


def _choose_mark(result: ColumnNumbers, marks: _Marks, cells: Sequence[Cell], texts: Sequence[str], decimal: str,
                 hint: str) -> str | None:
    """The decimal mark of a column of numbers (its reason said in `result`), or None when no one mark
    reads every cell (then `result` says why)."""
    if decimal in (".", ","):
        if not (marks.point_ok if decimal == "." else marks.comma_ok):
            bad = marks.comma_proof if decimal == "." else marks.point_proof
            result.not_numbers = [bad] if bad else []
            result.reason = (f"values such as {bad!r} cannot be read with {decimal!r} as the decimal mark "
                             f"(data.decimal)")
            return None
        return decimal
    ambiguous = marks.ambiguous
    if marks.point_ok and marks.comma_ok:
        chosen = hint if ambiguous else "."
        if ambiguous:
            result.guessed = True
            result.ambiguous_examples = ambiguous
            other = "," if chosen == "." else "."
            result.reason = (f"{', '.join(map(repr, ambiguous))} read with {chosen!r} as the decimal mark "
                             f"(as {_show(cells, texts, ambiguous[0], chosen)}); no value in the column shows "
                             f"whether {chosen!r} or {other!r} is meant")
        return chosen
    if marks.point_ok:
        result.proven = "."
        if ambiguous:
            result.reason = f"decimal point, as {marks.point_proof!r} shows"
        return "."
    if marks.comma_ok:
        result.proven = ","
        result.reason = f"decimal comma, as {marks.comma_proof!r} shows"
        return ","
    result.not_numbers = [marks.point_proof, marks.comma_proof]
    result.reason = (f"numbers written two ways: {marks.point_proof!r} has a decimal point and "
                     f"{marks.comma_proof!r} a decimal comma")
    return None


def decide_column(texts: Sequence[str], *, decimal: str = "auto", hint: str = ".") -> ColumnNumbers:
    """Read a whole column. It is numeric when every present cell is a number under ONE decimal mark.
    decimal: "auto", "." or ","; hint: the mark to take when no cell decides (e.g. "," for a
    semicolon-separated file), which is then reported in `reason` with `guessed=True`."""
    cells = [read_cell(t) for t in texts]
    result = ColumnNumbers(numeric=False)
    marks = _tally(texts, cells, result)
    if result.not_number_count:
        result.reason = (f"{result.not_number_count} of {result.not_number_count + result.number_count} "
                         f"present values are not numbers (e.g. {', '.join(map(repr, result.not_numbers))})")
        return result
    if result.number_count == 0:
        result.reason = "no numbers" if result.nonfinite else "no values"
        return result
    chosen = _choose_mark(result, marks, cells, texts, decimal, hint)
    if chosen is None:
        return result
    result.numeric = True
    result.decimal = chosen
    result.values = [(c.point if chosen == "." else c.comma) if c.kind == "number" else None for c in cells]
    return result


def _show(cells: Sequence[Cell], texts: Sequence[str], text: str, decimal: str) -> str:
    for t, c in zip(texts, cells):
        if t.strip() == text:
            v = c.point if decimal == "." else c.comma
            return f"{v:g}"
    return "?"


def value_with(text: str, decimal: str) -> float | None:
    """One cell of a column whose decimal mark is decided (eval-time data): the number, or None when
    missing, non-finite or not readable with that mark."""
    cell = read_cell(text)
    if cell.kind != "number":
        return None
    return cell.point if decimal == "." else cell.comma


class NumberTextError(ValueError):
    """`read_number` could not read the text as one number; the message says why."""


def read_number(text: str, *, integer: bool = False) -> float | int:
    """One number written by a person (a configuration value): "1e-3", " 64 ", "1_000", "3e-4", "20%".
    Refuses non-finite values, text that is not a number, a number that two readings make different
    (`1,000`: one thousand or one?), and, with `integer`, a value that is not whole."""
    cell = read_cell(text, units=False)
    s = text.strip()
    if s.endswith("%"):
        inner = read_cell(s[:-1], units=False)
        cell = Cell(inner.kind, None if inner.point is None else inner.point / 100,
                    None if inner.comma is None else inner.comma / 100) if inner.kind == "number" else inner
    if cell.kind == NONFINITE:
        raise NumberTextError(f"{text!r} is not a finite number")
    if cell.kind != "number":
        raise NumberTextError(f"{text!r} is not a number")
    if cell.ambiguous:
        raise NumberTextError(f"{text!r} is ambiguous: {cell.point:g} with a decimal point, {cell.comma:g} with a "
                              f"decimal comma; write it without the separator")
    value = cell.point if cell.point is not None else cell.comma
    assert value is not None
    if integer:
        if not float(value).is_integer():
            raise NumberTextError(f"{text!r} is not a whole number")
        return int(value)
    return float(value)


def examples(values: Iterable[str], n: int = 3) -> list[str]:
    out: list[str] = []
    for v in values:
        if v not in out:
            out.append(v)
        if len(out) >= n:
            break
    return out
