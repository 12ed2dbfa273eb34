"""`Trainer(profile=N)`: torch.profiler over N optimizer steps after a warm-up.

Writes a trace that TensorBoard's profiler plugin and Perfetto (ui.perfetto.dev) open, and a table
of the operators that took the most device time (CPU time on a CPU run), so that "where does my
step go" has an answer without any setup.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


class StepProfiler:
    WAIT, WARMUP = 2, 2  # skip start-up effects (allocator, lazy init, cudnn.benchmark's first trials)

    def __init__(self, active_steps: int, device: torch.device, out_dir: Path | None):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.device, self.out_dir = device, out_dir
        self.total = self.WAIT + self.WARMUP + active_steps
        self.steps = 0
        self.table: str | None = None
        self.trace: Path | None = None
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        self._prof = profile(activities=activities, record_shapes=True,
                             schedule=schedule(wait=self.WAIT, warmup=self.WARMUP, active=active_steps, repeat=1),
                             on_trace_ready=self._ready)
        self._prof.__enter__()

    def step(self) -> bool:
        """Call after each optimizer step; returns True once the profile is complete."""
        if self.table is not None:
            return True
        self.steps += 1
        self._prof.step()
        if self.steps >= self.total:
            self.close()
        return self.table is not None

    def _ready(self, prof: Any) -> None:
        sort = "self_cuda_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        self.table = prof.key_averages().table(sort_by=sort, row_limit=15)
        if self.out_dir is not None:
            from torchwise import files

            folder = self.out_dir / "profile"  # never written through a link out of the run folder
            self.trace = folder / "trace.json"
            with files.atomic_write_path(self.trace, root=self.out_dir) as tmp:
                prof.export_chrome_trace(str(tmp))
            files.write_text(folder / "top_ops.txt", self.table, root=self.out_dir)

    def close(self) -> None:
        if self._prof is not None:
            self._prof.__exit__(None, None, None)
            self._prof = None
