"""Pick the number of DataLoader workers by measuring, not by a formula.

`tune_loader(dataset, batch_size)` times the loader with a few worker counts on the real data set
(after each configuration's start-up, which is paid once per run with persistent workers) and
returns the fastest. The seeds' experience: a GPU at 30% utilisation because the loader could not
keep up, and 90% after tuning the workers.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch.utils.data import DataLoader

from torchwise.errors import TorchwiseError


@dataclass
class LoaderTuning:
    best_workers: int
    batches_per_s: dict[int, float] = field(default_factory=dict)   # workers -> measured throughput
    startup_s: dict[int, float] = field(default_factory=dict)       # workers -> time to the first batch

    def table(self) -> str:
        rows = ["workers  batches/s  first batch (s)"]
        for w, rate in self.batches_per_s.items():
            mark = "  <- best" if w == self.best_workers else ""
            rows.append(f"{w:>7}  {rate:>9.1f}  {self.startup_s[w]:>15.2f}{mark}")
        return "\n".join(rows)


def default_candidates() -> list[int]:
    # One worker only moves the same serial work to another process; loading that waits on files
    # overlaps across workers even beyond the core count, so 2 is always tried.
    cpus = os.cpu_count() or 1
    return sorted(w for w in {0, 2, 4, 8, 16, cpus} if w <= max(2, cpus))


def tune_loader(dataset: Any, batch_size: int, *, candidates: Sequence[int] | None = None, batches: int = 20,
                pin_memory: bool = False, collate_fn: Any = None) -> LoaderTuning:
    """Measure loader throughput for each worker count in `candidates`; the fastest wins (ties: fewer workers)."""
    if len(dataset) == 0:
        raise TorchwiseError("Cannot tune a loader on an empty data set.", values={"samples": 0},
                             fix="Check the data path.")
    candidates = list(candidates) if candidates is not None else default_candidates()
    if not candidates or any(not isinstance(w, int) or w < 0 for w in candidates):
        raise TorchwiseError("Worker counts must be integers >= 0.", values={"candidates": candidates},
                             fix="Pass e.g. candidates=[0, 2, 4].")
    result = LoaderTuning(best_workers=candidates[0])
    for workers in candidates:
        kwargs = {"collate_fn": collate_fn} if collate_fn is not None else {}
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                            pin_memory=pin_memory, persistent_workers=workers > 0,
                            generator=torch.Generator().manual_seed(0), **kwargs)
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        first = time.perf_counter()
        n = 0
        for _ in range(batches):
            try:
                next(it)
            except StopIteration:
                it = iter(loader)
                next(it)
            n += 1
        elapsed = time.perf_counter() - first
        del it, loader
        result.startup_s[workers] = first - start
        result.batches_per_s[workers] = n / elapsed if elapsed > 0 else float("inf")
    # 5% tolerance: an extra worker process must earn its memory and start-up
    best = max(result.batches_per_s.values())
    result.best_workers = min(w for w, rate in result.batches_per_s.items() if rate >= 0.95 * best)
    return result
