"""The catalog as text: `torchwise check --list`."""
from __future__ import annotations

from torchwise.diagnose.catalog.detected_by import DETECTED_BY
from torchwise.diagnose.catalog.entries import CATALOG


def describe() -> str:
    """The catalog as text: `torchwise check --list`."""
    lines = []
    width = max(len(i) for i in CATALOG)  # the ids line up however long the longest one is
    for e in CATALOG.values():
        lines.append(f"{e.id:{width}s} {e.severity:8s} {e.title}")
        lines.append(f"{'':{width}s} detected by: {DETECTED_BY.get(e.id, '-')}")
    return "\n".join(lines)
