"""CATALOG: every mistake's entry by id, in the registry's order (the order `torchwise check --list` prints and
findings are sorted by). The text itself lives with each detector (torchwise/diagnose/detectors/<id>.py)."""
from __future__ import annotations

from torchwise.diagnose.catalog.entry import Entry
from torchwise.diagnose.detectors import REGISTRY

ORDER: tuple[str, ...] = tuple(REGISTRY)

CATALOG: dict[str, Entry] = {d.id: Entry(d.id, d.severity, d.title, d.why, d.fix, d.maybe_fine)
                             for d in REGISTRY.values()}
