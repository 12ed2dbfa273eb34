"""Any model, any batch, integration half: validation memory stays flat as the validation set grows (measured
in a fresh process). The in-process half is tests/unit/train/test_any_batch.py."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


MEMORY = textwrap.dedent("""
    import resource, sys, torch
    from torch import nn
    from torch.utils.data import TensorDataset
    from torchwise import Trainer
    torch.manual_seed(0)
    model = nn.Linear(8, 1000)
    trainer = Trainer(model, train_data=(torch.randn(64, 8), torch.randint(0, 1000, (64,))), eval_batch_size=500,
                      progress=False, checks=False, tensorboard=False)
    def peak_after(n):
        x, y = torch.randn(n, 8), torch.randint(0, 1000, (n,))
        trainer.evaluate(TensorDataset(x, y))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux reports KiB)
    small = peak_after(5_000)
    large = peak_after(50_000)
    print(f"{small:.1f} {large:.1f}")
""")


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's unit")
def test_validation_memory_does_not_grow_with_the_validation_set():
    done = subprocess.run([sys.executable, "-c", MEMORY], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    small, large = map(float, done.stdout.split())
    # Keeping the outputs would add 50,000 x 1,000 floats (191 MiB) and their concatenation as much again.
    assert large - small < 40, f"peak memory {small:.0f} MiB after 5,000 samples, {large:.0f} MiB after 50,000"
