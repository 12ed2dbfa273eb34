"""Detectors that judge by where a value came from or how many values stand behind it, not by a value range
or a batch size alone (torchwise/diagnose/checks/losses.py, data.py, watch.py): BatchNorm's values per
channel, sigmoid outputs fed to a logits loss, and the epoch's average loss divided by the wrong count.
Every test runs the real checker on a real script (a zoo script, or a variant of one written here)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import run_checked_quietly

ZOO = Path(__file__).parent / "check_zoo"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(path: Path):
    result = run_checked_quietly(path)
    assert result.error is None, result.traceback
    return result


def ids(result) -> list[str]:
    return [f.id for f in result.findings]


def variant(tmp_path: Path, src: Path, *swaps: tuple[str, str], name: str | None = None) -> Path:
    text = src.read_text()
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    out = tmp_path / (name or src.name)
    out.write_text(text)
    return out


def script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    out = tmp_path / name
    out.write_text(textwrap.dedent(body))
    return out


# --------------------------------------------------------------------------- bn-small-batch

BN_SCRIPT = """
import torch
from torch import nn
torch.manual_seed(0)
layer = {layer}
model = nn.Sequential(nn.Conv1d(3, 4, 1) if {conv} else nn.Linear(3, 4), layer, nn.ReLU(), nn.Flatten())
head = nn.Linear({flat}, 1)
opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.01)
for step in range(40):
    x = torch.randn({shape})
    y = x.flatten(1).sum(1, keepdim=True)
    loss = nn.functional.mse_loss(head(model(x)), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("layer, conv, shape, flat, flagged", [
    ("nn.BatchNorm1d(4)", False, "2, 3", 4, True),              # (N, C) at batch 2: 2 values per channel
    ("nn.BatchNorm1d(4)", True, "2, 3, 4", 16, True),           # (N, C, L) at batch 2 over 4 positions: 8
    ("nn.BatchNorm1d(4)", True, "2, 3, 64", 256, False),        # batch 2 over 64 positions: 128 values
    ("nn.BatchNorm1d(4)", False, "16, 3", 4, False),            # batch 16
])
def test_bn_counts_values_per_channel(tmp_path, layer, conv, shape, flat, flagged):
    path = script(tmp_path, BN_SCRIPT.format(layer=layer, conv=conv, shape=shape, flat=flat))
    result = run(path)
    assert ("bn-small-batch" in ids(result)) == flagged, [f.render() for f in result.findings]
    if flagged:
        f = next(f for f in result.findings if f.id == "bn-small-batch")
        assert f.evidence["values_per_channel"] < 64 and f.evidence["median_batch"] == 2


def test_bn2d_small_batch_over_large_maps_is_fine_and_bn1d_head_is_not():
    clean = run(ZOO / "correct" / "bn2d_batch_of_2_large_maps.py")
    assert clean.findings == []
    buggy = run(ZOO / "buggy" / "bn1d_head_batch_of_2.py")
    f = next(f for f in buggy.findings if f.id == "bn-small-batch")
    assert "feature_norm" in f.message and f.evidence["values_per_channel"] == 2
