"""What a wait for the next batch was: the loading thread's own CPU work, a block on I/O, or time the busy machine
gave elsewhere. Only a block (or an idle accelerator) makes dataloader-bottleneck a warning; a wait in which the
thread neither worked nor blocked (another process had the core, a CPU quota ran out) is an info hint."""
from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from torchwise.diagnose.checks.data import _loader_speed
from torchwise.diagnose.loader_passes import blocked_count
from torchwise.diagnose.watch import Watcher
from torchwise.diagnose.watch_parts import PassInfo


def test_blocked_count_sees_a_sleep_and_not_cpu_work():
    before = blocked_count()
    time.sleep(0.01)
    assert blocked_count() > before
    before = blocked_count()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.005:  # pure CPU work: preemption is involuntary, not counted
        pass
    assert blocked_count() == before


def _pass(blocked: int, cpu: float) -> PassInfo:
    p = PassInfo(loader=None, index=0, site="train.py:9", steps=20)
    n = 20
    p.waits, p.gaps = [0.030] * n, [0.040] * n       # 75% of each step waits, 30 ms a batch
    p.cpu_waits, p.queued_waits, p.blocked_waits = [cpu] * n, [0.0] * n, [blocked] * n
    return p


@pytest.mark.parametrize("blocked, cpu, severity, reason", [
    (1, 0.001, "warning", None),                    # blocked on I/O: workers help
    (0, 0.001, "info", "gave the time to"),         # neither working nor blocked: the machine was busy
    (0, 0.025, "info", "share the same cores"),     # the process's own CPU work, model on the CPU
], ids=["io", "machine", "cpu-work"])
def test_a_wait_is_a_warning_only_when_the_loading_thread_blocked(blocked, cpu, severity, reason):
    w = Watcher(check_mode=True)
    w.attach(nn.Linear(4, 2), torch.optim.SGD(nn.Linear(4, 2).parameters(), lr=0.1))
    w.models.add_root(nn.Linear(4, 2))
    w.loaders.passes = [_pass(blocked, cpu)]
    found = _loader_speed(w)
    assert [f.id for f in found] == ["dataloader-bottleneck"]
    f = found[0]
    assert f.severity == severity, f.render()
    if reason:
        assert reason in f.maybe_fine, f.render()
    assert f.evidence["blocked_share_of_waits"] == blocked
