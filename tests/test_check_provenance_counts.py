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


# --------------------------------------------------------------------------- double-sigmoid

def test_origin_reads_the_graph_through_views_and_casts():
    import torch
    from torch import nn

    from torchwise.diagnose.checks.losses import origin
    x = torch.randn(8, 3, requires_grad=True)
    assert origin(torch.sigmoid(x)) == "sigmoid"
    assert origin(nn.Sigmoid()(x)[:, 0].reshape(-1, 1).squeeze(1).double()) == "sigmoid"
    assert origin(x.sigmoid()[torch.tensor([0, 2])].t()) == "sigmoid"
    assert origin(torch.sigmoid(torch.sigmoid(x).view(-1))) == "sigmoid-sigmoid"
    assert origin(torch.sigmoid(x) * 2) is None             # a sigmoid, then values changed
    assert origin(0.5 + 0.4 * torch.tanh(x)) is None         # values in (0, 1), not from a sigmoid
    assert origin(torch.sigmoid(x).detach()) is None         # no graph: nothing to read


def test_values_in_0_1_without_a_sigmoid_are_logits(tmp_path):
    src = ZOO / "buggy" / "sigmoid_then_bcewithlogits.py"
    path = variant(tmp_path, src, ("return torch.sigmoid(self.out(F.relu(self.hidden(x))))",
                                   "return 0.5 + 0.45 * torch.tanh(self.out(F.relu(self.hidden(x))))"))
    assert "double-sigmoid" not in ids(run(path))
    assert "double-sigmoid" in ids(run(src))


def test_sigmoid_module_into_logits_loss_is_caught(tmp_path):
    src = ZOO / "correct" / "bounded_logits_into_bcewithlogits.py"
    path = variant(tmp_path, src, ("self.score = nn.Linear(24, 1)",
                                   "self.score = nn.Sequential(nn.Linear(24, 1), nn.Sigmoid())"),
                   ("return 0.5 + 0.45 * torch.tanh(self.score(self.body(x))).squeeze(1)",
                    "return self.score(self.body(x)).squeeze(1)"))
    result = run(path)
    f = next(f for f in result.findings if f.id == "double-sigmoid")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "criterion(model(" in text)
    assert f.evidence["form"] == "sigmoid-into-logits-loss" and f.where.endswith(f":{line}"), f.where
