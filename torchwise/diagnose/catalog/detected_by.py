"""How each mistake is detected at run time (never from names, comments or file names): each detector's own
`evidence`. `torchwise check --list` prints it under each entry, and every reported finding carries its line."""
from __future__ import annotations

from torchwise.diagnose.detectors import REGISTRY

DETECTED_BY: dict[str, str] = {d.id: d.evidence for d in REGISTRY.values()}
