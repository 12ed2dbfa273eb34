"""The catalog of silent training mistakes torchwise can find.

One entry per mistake id: a short title, what it is, why it matters and the fix as code.
The detectors live in `torchwise.diagnose.checks` and only add the evidence (numbers) and
the place in the user's code; everything a person reads about a mistake comes from here,
so the Trainer, `torchwise.watch` and `torchwise check` all word it the same way.

The text of each entry lives with its detector (torchwise/diagnose/detectors/<id>.py); entries.py
gathers them into CATALOG in the registry's order, detected_by.py says how each is detected,
finding.py words one found mistake.
"""
from __future__ import annotations

from torchwise.diagnose.catalog.detected_by import DETECTED_BY
from torchwise.diagnose.catalog.entries import CATALOG
from torchwise.diagnose.catalog.entry import SEVERITIES, Entry, entry
from torchwise.diagnose.catalog.finding import Finding
from torchwise.diagnose.catalog.listing import describe

__all__ = ["CATALOG", "DETECTED_BY", "SEVERITIES", "Entry", "Finding", "describe", "entry"]
