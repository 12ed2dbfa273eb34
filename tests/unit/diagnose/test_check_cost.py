"""What the checker's cost cuts must keep (torchwise/diagnose/watch.py): finiteness by a sum gives the same
answer as isfinite().all(), and the NaN hunt that looks at every operation only in the first steps still names
a NaN-prone operation (log, sqrt, division) that makes the first NaN late in the run. Real runs, no timings."""
from __future__ import annotations

import textwrap

import pytest
import torch

from conftest import run_checked_quietly


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("t", [
    torch.randn(5, 7), torch.zeros(0), torch.arange(6), torch.full((4,), 6e4, dtype=torch.float16),  # sum overflows
    torch.tensor([1.0, float("nan")]), torch.tensor([float("inf"), 1.0]), torch.tensor([float("inf"), -float("inf")]),
    torch.tensor([1e38, 1e38, -1e38]), torch.tensor([1 + 1j, complex("nan")]), torch.tensor([1 + 1j]),
    torch.randn(3, requires_grad=True) * 2,
])
def test_all_finite_agrees_with_isfinite(t):
    from torchwise.diagnose.tensors import all_finite
    assert all_finite(t) == bool(torch.isfinite(t).all())


def test_a_late_nan_is_still_named_with_its_operation(tmp_path):
    """The features turn negative from step 40 on (long after the first steps): torch.log makes the NaN."""
    path = tmp_path / "late_nan.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        torch.manual_seed(0)

        class Squash(nn.Module):
            def forward(self, x):
                return torch.log(x)

        model = nn.Sequential(nn.Linear(6, 8), nn.Softplus(), Squash(), nn.Linear(8, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(60):
            x = torch.randn(16, 6)
            if step >= 40:
                model[1].beta = -1.0   # softplus with beta < 0 is negative: log of it is NaN
            loss = nn.functional.cross_entropy(model(x), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """))
    result = run_checked_quietly(path)
    assert result.error is None, result.traceback
    f = next(f for f in result.findings if f.id == "nonfinite-loss")
    assert f.evidence["first_nonfinite_step"] == 40
    assert f.evidence["operation"] == "torch.log" and "Squash" in f.message, f.message
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "torch.log(x)" in text)
    assert f.where.endswith(f":{line}"), f.where


def test_model_forwards_under_no_grad_and_in_light_steps_skip_the_per_call_analysis():
    """A model's own torch calls are analysed one by one in the first deep steps only: after LIGHT_AFTER_STEPS a
    training forward's layers are not (its loss outside the forward still is), and a forward under no_grad never
    is. Counted calls, not time."""
    from torchwise.diagnose.deep_steps import LIGHT_AFTER_STEPS
    from torchwise.diagnose.watch import Watcher

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(6))
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x):
            for layer in self.layers:
                x = torch.nn.functional.relu(layer(x)) + x * 0.5
            return self.head(x)

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w = Watcher(check_mode=True).attach()
    per_step = []
    try:
        for step in range(LIGHT_AFTER_STEPS + 5):
            before = w.function_mode.analysed
            x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            per_step.append(w.function_mode.analysed - before)
        x = torch.randn(16, 8)
        with torch.no_grad():
            before = w.function_mode.analysed
            model(x)
            no_grad_forward = w.function_mode.analysed - before
    finally:
        w.detach()
    early, light = per_step[5], per_step[LIGHT_AFTER_STEPS + 2]
    assert early - light >= 6 * 3, per_step  # the layers' linear, relu, add and mul calls are no longer analysed
    assert light > 0, per_step               # the loss and what follows the output still are
    assert no_grad_forward == 0
    assert w.steps == LIGHT_AFTER_STEPS + 5
