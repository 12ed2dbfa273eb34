"""dataloader-bottleneck's severity follows what the wait is: a batch that waits on I/O (a sleep stands in for
reading files) is a warning on any machine; a batch made by the process's own CPU work for a model that
trains on the same CPU is an info hint with the reason it may be fine. Real runs of two scripts."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import run_checked_quietly


pytestmark = pytest.mark.usefixtures("one_torch_thread")

SCRIPT = """
import time
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
FEATURES = torch.randn(480, 64)
TARGETS = (FEATURES[:, 0] > 0).long()
W = torch.randn(64, 64) / 8


class Files(Dataset):
    def __len__(self):
        return len(FEATURES)

    def __getitem__(self, i):
        x = FEATURES[i]
        {work}
        return x, TARGETS[i]


loader = DataLoader(Files(), batch_size=32, shuffle=True, num_workers=0)
model = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
"""
IO = "time.sleep(0.004)  # waiting on a file"
CPU = """t0 = time.process_time()
while time.process_time() - t0 < 0.002:  # decoding and augmenting: the process's own CPU work
    x = torch.tanh(x @ W) + FEATURES[i]"""


@pytest.mark.parametrize("work, severity", [(IO, "warning"), (CPU, "info")], ids=["io-bound", "cpu-bound"])
def test_the_wait_is_a_warning_when_io_bound_and_a_hint_when_cpu_bound(tmp_path, work, severity):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("{work}", work.replace("\n", "\n        ")))
    result = run_checked_quietly(script)
    assert result.error is None, result.traceback
    found = {f.id: f for f in result.findings}
    assert "dataloader-bottleneck" in found, [f.render() for f in result.findings]
    f = found["dataloader-bottleneck"]
    assert f.severity == severity, f.render()
    assert f.counts == (severity != "info")
    if severity == "info":
        assert "share the same cores" in f.maybe_fine
        assert f.evidence["cpu_share_of_wait"] > 0.3, f.evidence
    else:
        assert f.evidence["cpu_share_of_wait"] < 0.3, f.evidence


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/thread-self/schedstat"),
                    reason="needs Linux's CPU affinity and scheduler statistics")
def test_a_wait_for_a_core_on_a_busy_machine_is_not_taken_for_io(tmp_path):
    """Three busy processes share this test's one core: a batch made by a little CPU work then waits mostly for
    its turn on the core. That is neither I/O nor something more workers fix on the CPU: an info hint, with the
    queued share of the wait in its evidence (before, such a run on a busy machine was a warning)."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("{work}", CPU.replace("0.002", "0.001").replace("\n", "\n        ")))
    saved = os.sched_getaffinity(0)
    core = {min(saved)}
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        for p in spinners:
            os.sched_setaffinity(p.pid, core)
        os.sched_setaffinity(0, core)
        result = run_checked_quietly(script)
    finally:
        os.sched_setaffinity(0, saved)
        for p in spinners:
            p.kill()
            p.wait(timeout=30)
    assert result.error is None, result.traceback
    found = {f.id: f for f in result.findings}
    assert "dataloader-bottleneck" in found, [f.render() for f in result.findings]
    f = found["dataloader-bottleneck"]
    assert f.evidence["queued_share_of_wait"] > 0.3, f.evidence
    assert f.severity == "info" and not f.counts, f.render()
