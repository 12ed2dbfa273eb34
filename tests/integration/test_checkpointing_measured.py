"""Gradient checkpointing: the memory saving measured in a fresh process. The in-process checks (same
gradients and BatchNorm statistics) are tests/unit/train/test_checkpointing.py."""

import torch

from testkit.models import BlockNet
from torchwise.toolbox.memory import checkpointing_saving


def test_measured_saving_on_a_block_model():
    saving = checkpointing_saving(BlockNet(d=128, n=6), torch.randn(1, 64, 128), batch_size=32, threads=1)
    print(saving)
    assert saving["with"] < saving["without"]
    assert saving["saving"] > 0.4
