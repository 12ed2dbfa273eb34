"""Detectors that judge by where a value came from or how many values stand behind it, not by a value range
or a batch size alone (torchwise/diagnose/checks/losses.py, data.py, watch.py): BatchNorm's values per
channel, sigmoid outputs fed to a logits loss, and the epoch's average loss divided by the wrong count.
Every test runs the real checker on a real script (a zoo script, or a variant of one written here)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import TESTS_DIR, run_checked_quietly


ZOO = TESTS_DIR / "check_zoo"

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


# --------------------------------------------------------------------------- loss-average-wrong-count

def test_printed_numbers_carry_their_precision():
    from torchwise.diagnose.checks.loss_average import _printed_numbers
    got = _printed_numbers("epoch 3 loss 0.0819 acc 97.25% lr=1e-3 x 1.2345e-05 step12.5 v1.2.3 -2.50")
    assert [(v, d) for v, d, _ in got] == [(0.0819, 3), (97.25, 4), (1e-3, 1), (1.2345e-05, 5), (-2.5, 3)]
    assert got[0][2] == pytest.approx(5e-5)


WRONG_DATASET = ZOO / "buggy" / "epoch_loss_over_whole_dataset.py"
MEANS_OVER_SAMPLES = ZOO / "buggy" / "batch_means_over_samples.py"


@pytest.mark.parametrize("swaps", [
    # three significant digits: too few to tell a formula from a coincidence
    [("train loss {train_loss:.4f}", "train loss {train_loss:.3f}")],
    # one epoch seen, four digits: one match is not enough
    [("for epoch in range(4):", "for epoch in range(1):")],
    # the drawn count is printed too, and it is right: the run is undecided, not reported
    [("    print(f\"epoch {epoch}: train loss {train_loss:.4f}",
      "    print(f\"drawn {running / len(train_loader.sampler):.6f}\")\n    print(f\"epoch {epoch}: train loss "
      "{train_loss:.4f}")],
], ids=["three-digits", "one-epoch", "right-one-printed-too"])
def test_loss_average_needs_clear_evidence(tmp_path, swaps):
    result = run(variant(tmp_path, WRONG_DATASET, *swaps))
    assert "loss-average-wrong-count" not in ids(result), [f.render() for f in result.findings]


def test_loss_average_one_epoch_with_full_precision_is_enough(tmp_path):
    path = variant(tmp_path, WRONG_DATASET, ("for epoch in range(4):", "for epoch in range(1):"),
                   ("train loss {train_loss:.4f}", "train loss {train_loss}"))
    f = next(f for f in run(path).findings if f.id == "loss-average-wrong-count")
    assert f.evidence["formula"] == "sum(loss*n)/len(dataset)" and f.evidence["epochs"] == [1]
    assert f.evidence["dataset_len"] == 500 and f.evidence["samples_drawn"] == 400
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.startswith("    print(f\"epoch"))
    assert f.where.endswith(f":{line}"), f.where


def test_a_summed_loss_over_samples_is_right(tmp_path):
    """reduction="sum": each batch's loss is already a sum, and a sum of them over the samples is the mean."""
    path = variant(tmp_path, MEANS_OVER_SAMPLES,
                   ("loss = loss_fn(net(batch_x), batch_y)\n",
                    "loss = nn.functional.cross_entropy(net(batch_x), batch_y, reduction=\"sum\")\n"))
    assert "loss-average-wrong-count" not in ids(run(path))


def test_drop_last_over_the_dataset_is_not_reported(tmp_path):
    """len(loader.dataset) with drop_last: a few samples left out, within 10% of the right count."""
    src = ZOO / "correct" / "sample_sums_over_samples.py"
    path = variant(tmp_path, src, ("xs = torch.rand(600, 3)", "xs = torch.rand(610, 3)"),
                   ("batch_size=20, shuffle=True)", "batch_size=20, shuffle=True, drop_last=True)"))
    assert "loss-average-wrong-count" not in ids(run(path))


def test_output_reaches_the_stream_and_a_replaced_stdout_stays(tmp_path):
    import contextlib
    import io
    import sys

    from torchwise.script_check.runner import run_script
    path = script(tmp_path, """
        import sys, io, torch
        print("before", 1.5)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad(); model(torch.randn(4, 2)).sum().backward(); opt.step()
        sys.stdout.write("after 2.25\\n")
        assert sys.stdout.isatty() in (True, False)
        sys.stdout = keep = io.StringIO()
        print("into the script's own stream")
    """)
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        result = run_script(str(path), [])
        replaced = sys.stdout
    assert result.error is None, result.traceback
    assert sink.getvalue() == "before 1.5\nafter 2.25\n"
    assert isinstance(replaced, io.StringIO) and replaced is not sink  # the script's own, as without check
