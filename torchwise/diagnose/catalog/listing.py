"""The catalog as text: `torchwise check --list`."""
from __future__ import annotations

from torchwise.diagnose.catalog.entries import CATALOG
from torchwise.diagnose.detectors import REGISTRY
from torchwise.diagnose.detectors.spec import ALL_OBJECTIVES


def describe() -> str:
    """The catalog as text: `torchwise check --list`: each mistake, how it is detected, the objectives it judges
    and the harm it requires before it warns."""
    lines = []
    width = max(len(i) for i in CATALOG)  # the ids line up however long the longest one is
    for e in CATALOG.values():
        det = REGISTRY[e.id]
        judges = "every objective" if det.applies_to == ALL_OBJECTIVES else ", ".join(sorted(det.applies_to))
        lines.append(f"{e.id:{width}s} {e.severity:8s} {e.title}")
        lines.append(f"{'':{width}s} detected by: {det.evidence}")
        lines.append(f"{'':{width}s} judges: {judges}")
        if det.harm:
            lines.append(f"{'':{width}s} needs: {det.harm}")
    return "\n".join(lines)
