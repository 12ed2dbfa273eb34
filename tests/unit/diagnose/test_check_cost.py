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


def test_the_first_evaluation_passes_are_deep_wherever_they_fall(tmp_path):
    """After the deep window only every deep_every-th step is deep; an evaluation pass over its own loader is
    watched closely all the same (the first DEEP_EVAL_PASSES of them), so a mistake made on its outputs is seen
    when every evaluation starts after a step that is not deep. Here each epoch is 53 steps (prime, so no pass
    starts on the schedule) and the first evaluation comes after the deep window."""
    from torchwise.diagnose.deep_steps import DeepSteps
    from torchwise.diagnose.loader_passes import DEEP_EVAL_PASSES

    path = tmp_path / "late_eval.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(0)
        X = torch.randn(53 * 8, 12)
        y = (X[:, :3].sum(1) > 0).long() + (X[:, 3] > 1).long()
        train = DataLoader(TensorDataset(X, y), batch_size=8, shuffle=True)   # 53 steps an epoch
        val = DataLoader(TensorDataset(torch.randn(96, 12), torch.randint(0, 3, (96,))), batch_size=32)
        model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(4):
            model.train()
            for xb, yb in train:
                opt.zero_grad()
                nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
            model.eval()
            correct = 0
            with torch.no_grad():
                for xb, yb in val:
                    best, _ = torch.max(model(xb), 1)   # the values, not the indices
                    correct += (best == yb).sum().item()
            print(epoch, correct)
    """))
    seen = []
    orig = DeepSteps.set_deep

    def spy(self, on):
        seen.append((self.w.steps, on, self.deep_first, self.deep_every))
        orig(self, on)

    DeepSteps.set_deep = spy
    try:
        result = run_checked_quietly(path)
    finally:
        DeepSteps.set_deep = orig
    assert result.error is None, result.traceback
    deep_first, deep_every = seen[0][2], seen[0][3]
    assert deep_first < 53 and all(53 * k % deep_every for k in range(1, 5)), (deep_first, deep_every)
    assert "compare-values-not-indices" in [f.id for f in result.findings], [f.id for f in result.findings]
    turned_on_at_eval = [s for s, on, _, _ in seen if on and s in (53, 106, 159, 212)]
    assert turned_on_at_eval == [53, 106, 159][:DEEP_EVAL_PASSES], seen


def test_the_deep_window_ends_once_its_call_budget_is_spent(monkeypatch):
    """A step that is a whole rollout makes thousands of torch calls: the deep window (deep_first steps) ends once
    the function mode has analysed DEEP_CALL_BUDGET calls, after DEEP_MIN_STEPS steps; later steps are deep on the
    deep_every schedule only. Counted calls, not time (the budget is made small here)."""
    from torchwise.diagnose import deep_steps
    from torchwise.diagnose.watch import Watcher

    monkeypatch.setattr(deep_steps, "DEEP_CALL_BUDGET", 1000)
    torch.manual_seed(0)
    policy = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(policy.parameters(), lr=0.01)
    w = Watcher(check_mode=True).attach()
    per_step = []
    try:
        for step in range(12):
            before = w.function_mode.analysed
            opt.zero_grad()
            total = 0.0
            for t in range(60):  # a rollout: one forward and a few distribution calls per time step
                logits = policy(torch.randn(4))
                total = total - torch.log_softmax(logits, -1)[t % 2] * (1.0 + t * 0.01)
            total.backward()
            opt.step()
            per_step.append(w.function_mode.analysed - before)
    finally:
        w.detach()
    spent = next(i for i in range(len(per_step)) if sum(per_step[:i + 1]) >= 1000)
    first_off = max(spent, deep_steps.DEEP_MIN_STEPS - 1) + 1
    assert all(n > 0 for n in per_step[:first_off]), per_step
    deep_every = w.deep.deep_every
    # (a step that turns the next one deep sees its own last call or two analysed)
    assert [i for i in range(first_off, 12) if per_step[i] > 10] == \
        [i for i in range(first_off, 12) if i % deep_every == 0], per_step


def test_a_no_grad_rollout_is_analysed_up_to_its_budget_and_the_update_after_it_is_followed(monkeypatch):
    """A replay collection under no_grad (thousands of environment steps between two updates) is analysed for its
    first NOGRAD_CALLS_IN_A_ROW torch calls only; the update after it (a batch made with gradients on, a target
    computed under no_grad from the model, the loss) is analysed, so the loss is still known to chase a target
    the model makes. Counted calls, not time (the budget is made small here)."""
    from torchwise.diagnose import function_mode
    from torchwise.diagnose.watch import Watcher

    monkeypatch.setattr(function_mode, "NOGRAD_CALLS_IN_A_ROW", 200)
    torch.manual_seed(0)
    q = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(q.parameters(), lr=0.01)
    w = Watcher(check_mode=True).attach()
    rollout, update = [], []
    try:
        for episode in range(3):
            before = w.function_mode.analysed
            with torch.no_grad():  # acting: a forward, an argmax and some arithmetic per environment step
                for t in range(300):
                    s = torch.randn(4)
                    a = q(s).argmax().item()
                    _ = (s * 0.99 + a).clamp(-1, 1).sum()
            rollout.append(w.function_mode.analysed - before)
            before = w.function_mode.analysed
            x = torch.randn(32, 4)
            with torch.no_grad():
                target = torch.randn(32, 2) + 0.9 * q(x)
            loss = torch.nn.functional.mse_loss(q(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            update.append(w.function_mode.analysed - before)
    finally:
        w.detach()
    assert all(n == 200 for n in rollout), rollout  # 300 steps x 4+ calls each: cut at the budget, every episode
    assert all(n >= 5 for n in update), update      # the batch, the target's max and sum, the loss: looked at
    assert list(w.objective.kinds().values()) == ["bootstrapped"], w.objective.per_opt  # not "supervised"
