"""The checker's detectors: one module a mistake, each holding a `DETECTOR` (detectors/spec.py says what it
declares), listed once in registry.py. REGISTRY is them all, in that order; the catalog (what a person reads),
`torchwise check --list`, the order findings are reported in and which finding explains which are all read
from here, so nothing about a detector is kept in a second table.
"""
from __future__ import annotations

from importlib import import_module

from torchwise.diagnose.detectors.registry import NAMES
from torchwise.diagnose.detectors.spec import Detector


def _load() -> dict[str, Detector]:
    out: dict[str, Detector] = {}
    for name in NAMES:
        det = import_module(f"torchwise.diagnose.detectors.{name}").DETECTOR
        if det.id.replace("-", "_") != name or det.id in out:
            raise ValueError(f"detectors/{name}.py declares {det.id!r}: one module a mistake, named for its id")
        out[det.id] = det
    for det in out.values():
        unknown = [i for i in det.explains if i not in out]
        if unknown:
            raise ValueError(f"{det.id} explains unknown ids {unknown}")
    return out


REGISTRY: dict[str, Detector] = _load()
ORDER: tuple[str, ...] = tuple(REGISTRY)
