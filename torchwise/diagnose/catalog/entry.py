"""One catalog entry: what a person reads about one mistake."""
from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Entry:
    id: str
    severity: str  # "error": the result is wrong; "warning": the result is likely poor or slow;
    #                "info": a hint that may be by design (a finding carries why it may be fine)
    title: str
    why: str
    fix: str
    maybe_fine: str = ""  # an "info" entry: why what it reports may be by design


def entry(id: str, severity: str, title: str, why: str, fix: str, maybe_fine: str = "") -> Entry:
    """An Entry whose fix is written as a triple-quoted block: the newlines that open and close it are dropped."""
    return Entry(id, severity, title, why, fix.strip("\n"), maybe_fine)
