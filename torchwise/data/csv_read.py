"""Reading a CSV file into a header and rows of text, whatever wrote it.

The encoding (UTF-8 with or without Excel's byte-order mark, UTF-16 with one, else
Windows-1252/Latin-1, said), the delimiter (`,` `;` tab `|`, or Excel's `sep=` first line), a
workbook or other binary file passed by mistake (refused, saying what it is), unnamed and repeated
columns, and rows without one value per column. Cells stay text: torchwise.numbers reads them.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from torchwise.errors import TorchwiseError

DELIMITERS = (",", ";", "\t", "|")
_DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
_SAMPLE_LINES = 200


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


def _delimiter_of(text: str) -> tuple[str, str]:
    """(delimiter, the text without Excel's "sep=;" first line when it has one)."""
    first, _, rest = text.partition("\n")
    if first.strip().lower().startswith("sep=") and len(first.strip()) == 5:  # Excel's "sep=;" line
        return first.strip()[4], rest
    return detect_delimiter(text), text


def _header(first: list[str], path: Path, warnings: list[str]) -> list[str]:
    """The column names: an unnamed one gets "column N" (said); two with one name are refused."""
    header = [name.strip() for name in first]
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
    return header


def read_table(path: str | Path) -> Table:
    path = Path(path)
    if not path.is_file():
        raise TorchwiseError("The CSV file does not exist.", values={"path": str(path)},
                             fix="pass --data with the path of an existing .csv file")
    raw = path.read_bytes()
    text, encoding, warnings = _decode(path, raw)
    text = text.lstrip("\ufeff")
    notes: dict[str, Any] = {}
    delimiter, text = _delimiter_of(text)
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
    header = _header(rows[0], path, warnings)
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


def describe_reading(delimiter: str, decimals: Iterable[str], ids: Sequence[str], *, encoding: str = "utf-8",
                     decided: str = "detected") -> str:
    """How a CSV file was read, for the console's data line: the separator, the decimal mark of its
    number columns (`decided`: how it was decided) and the identifier columns, so a file exported from a
    spreadsheet visibly read as it was written."""
    parts = [f"separator {delimiter!r}" + (f" ({_DELIMITER_NAMES[delimiter]})" if delimiter in _DELIMITER_NAMES
                                            and delimiter != "," else "")]
    marks = list(decimals)
    names = {",": "comma", ".": "point"}
    if len(set(marks)) == 1:
        parts.append(f"decimal {names.get(marks[0], repr(marks[0]))} ({decided})")
    elif marks:
        parts.append(f"decimal comma in {marks.count(',')} column(s), point in {marks.count('.')} ({decided})")
    if encoding != "utf-8":
        parts.append(f"encoding {encoding}")
    if ids:
        parts.append(("ID columns " if len(ids) > 1 else "ID column ") + ", ".join(map(repr, ids)))
    else:
        parts.append("no ID column")
    return ", ".join(parts)
