"""torchwise.watch() in a user's own loop, and the Watcher API the Trainer drives."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchwise
from torchwise.script_check.sanity import overfit_one_batch
from torchwise.diagnose.watch import Watcher


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def data(n=640, d=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, (x[:, 0] + x[:, 1] > 0).long()


def test_watch_context_manager_finds_missing_zero_grad_and_cleans_up():
    x, y = data()
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    original_backward = torch.autograd.backward
    with torchwise.watch(print_findings=False) as w:
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True):
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    assert "missing-zero-grad" in [f.id for f in w.findings()]
    assert torch.autograd.backward is original_backward
    assert not torch._C._is_torch_function_mode_enabled()


def test_watch_with_a_given_model_sees_eval_mode_missing():
    x, y = data()
    model = nn.Sequential(nn.Linear(10, 32), nn.Dropout(0.3), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torchwise.watch(model, opt, print_findings=False) as w:
        for i in range(0, 600, 30):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[i:i + 30]), y[i:i + 30]).backward()
            opt.step()
        with torch.no_grad():
            model(x[600:])
    assert [f.id for f in w.findings()] == ["eval-mode-missing"]
    assert not model._forward_pre_hooks and not opt._optimizer_step_pre_hooks


def _trainer_style_loop(model, loss_fn, steps=60, zero_grad=True):
    """How the Trainer drives a Watcher: local hooks, loss_scope, observe_backward, phase."""
    x, y = data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    w = Watcher(deep_first=5, deep_every=10)
    w.attach(model, opt)
    w.phase("train")
    for step in range(steps):
        i = (step * 32) % 608
        if zero_grad:
            opt.zero_grad()
        out = model(x[i:i + 32])
        with w.loss_scope():
            loss = loss_fn(out, y[i:i + 32])
        w.observe_backward(loss)
        loss.backward()
        opt.step()
    w.detach()
    return w


def test_watcher_api_for_the_trainer_catches_softmax_before_loss():
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2), nn.Softmax(dim=1))
    w = _trainer_style_loop(model, nn.CrossEntropyLoss())
    ids = [f.id for f in w.findings()]
    assert "softmax-before-loss" in ids
    assert not model._forward_pre_hooks and not any(m._forward_hooks for m in model.modules())


def test_watcher_api_for_the_trainer_catches_missing_zero_grad():
    w = _trainer_style_loop(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)), nn.CrossEntropyLoss(),
                            zero_grad=False)
    assert "missing-zero-grad" in [f.id for f in w.findings()]


def test_watcher_api_for_the_trainer_is_quiet_on_a_correct_loop():
    w = _trainer_style_loop(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)), nn.CrossEntropyLoss(),
                            steps=120)
    assert w.findings() == []
    assert w.report()["steps"] == 120


def test_overfit_one_batch_passes_for_a_working_model_and_fails_for_a_broken_one():
    x, y = data(n=64)
    good = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 2))
    r = overfit_one_batch(good, x, y, nn.functional.cross_entropy)
    assert r["ok"] and r["final_loss"] < 0.05 * r["initial_loss"]
    broken = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 2), nn.Softmax(dim=1))
    r = overfit_one_batch(broken, x, y, nn.functional.cross_entropy)
    assert not r["ok"] and r["final_loss"] > 0.3
    assert all(p.grad is None for p in good.parameters())  # the user's model is not touched


def _driven_loop(model, loss_fn, steps=60, *, deep_sleep=0.0, budget=0.01, bad_from=None):
    """The Trainer's way: driven=True, end_step() after every step, a skipped step for a nan loss."""
    import math
    import time

    x, y = data()
    if bad_from is not None:
        x = x.abs()  # sqrt-friendly until step bad_from
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    w = Watcher(deep_first=3, deep_every=10, deep_budget=budget)
    w.attach(model, opt, driven=True)
    w.phase("train")
    deep_steps, hooks_between = [], []
    for step in range(steps):
        if w.is_deep:
            deep_steps.append(step)
            time.sleep(deep_sleep)  # stands for the expensive observations of a big model
        else:
            hooks_between.append(len(model._forward_pre_hooks) + len(opt._optimizer_step_pre_hooks)
                                 + sum(len(m._forward_hooks) for m in model.modules()))
        i = (step * 32) % 608
        xb = -x[i:i + 32] if bad_from is not None and step >= bad_from else x[i:i + 32]
        opt.zero_grad()
        with w.loss_scope():
            loss = loss_fn(model(xb), y[i:i + 32])
        value = loss.item()
        if not math.isfinite(value):
            w.end_step(stepped=False, nonfinite_loss=True, loss=value)
            continue
        w.observe_backward(loss)
        loss.backward()
        opt.step()
        w.end_step(loss=value)
    w.detach()
    return w, deep_steps, hooks_between


def test_driven_watcher_has_no_hook_between_deep_steps_and_still_finds_softmax_before_loss():
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2), nn.Softmax(dim=1))
    w, deep, between = _driven_loop(model, nn.CrossEntropyLoss())
    assert "softmax-before-loss" in [f.id for f in w.findings()]
    assert deep[:3] == [0, 1, 2] and len(between) > 40 and set(between) == {0}
    assert not model._forward_pre_hooks and not any(m._forward_hooks for m in model.modules())


def test_driven_watcher_is_quiet_on_a_correct_loop_and_counts_steps():
    w, _, _ = _driven_loop(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)), nn.CrossEntropyLoss(),
                           steps=120)
    assert w.findings() == []
    assert w.report()["steps"] == 120 and len(w.loss_values()) == 120


def test_driven_watcher_spaces_deep_steps_by_their_measured_cost():
    # Deep steps costing ~5 ms more than a sub-millisecond plain step: the three first ones already
    # spent more than 1% of a 300-step run, so no other comes; allowed half the run's time, deep
    # steps keep coming (each at least deep_every=10 steps after the last).
    model = lambda: nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))  # noqa: E731
    _, thrifty, _ = _driven_loop(model(), nn.CrossEntropyLoss(), steps=300, deep_sleep=0.005, budget=0.01)
    _, lavish, _ = _driven_loop(model(), nn.CrossEntropyLoss(), steps=300, deep_sleep=0.005, budget=0.5)
    assert thrifty == [0, 1, 2]
    assert len(lavish) > 6 and all(b - a >= 10 for a, b in zip(lavish[3:], lavish[4:]))


def test_driven_watcher_hunts_the_module_that_makes_a_nan_after_a_skipped_step():
    class Sqrt(nn.Module):
        def forward(self, x):
            return torch.sqrt(x)

    model = nn.Sequential(Sqrt(), nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2))
    w, deep, _ = _driven_loop(model, nn.CrossEntropyLoss(), steps=40, bad_from=25)
    assert 25 not in deep and 26 in deep  # the nan came in a plain step; the next one looks for its source
    found = {f.id: f for f in w.findings()}
    assert "nonfinite-loss" in found
    assert found["nonfinite-loss"].evidence["culprit"] == "Sequential.0 (Sqrt)"


def test_watch_with_a_given_model_finds_unscaled_accumulation_max_values_and_unused_graphs():
    x, y = data()
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x[:512], y[:512]), batch_size=32, shuffle=True)
    with torchwise.watch(model, opt, print_findings=False, deep_every=1) as w:
        for epoch in range(3):
            for i, (xb, yb) in enumerate(loader):
                nn.functional.cross_entropy(model(xb), yb).backward()   # not divided by the 2 batches
                if i % 2 == 1:
                    opt.step()
                    opt.zero_grad()
            values, _ = model(x[512:]).max(1)                           # with gradients; values, not indices
            print((values == y[512:]).float().mean().item())
    found = {f.id: f for f in w.findings()}
    assert {"accumulation-unscaled", "compare-values-not-indices", "eval-without-no-grad"} <= set(found)
    assert found["accumulation-unscaled"].evidence["batches_per_step"] == 2
    assert found["compare-values-not-indices"].evidence["compared"] == 128
    assert found["eval-without-no-grad"].evidence["forwards"] == 2  # the last one has no step after it


def test_watch_is_quiet_on_scaled_accumulation_and_two_backwards_on_one_batch():
    x, y = data()
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x[:512], y[:512]), batch_size=32, shuffle=True)
    with torchwise.watch(print_findings=False) as w:
        for epoch in range(4):
            for i, (xb, yb) in enumerate(loader):
                if epoch % 2 == 0:  # two batches accumulated per step, each loss divided by 2
                    (nn.functional.cross_entropy(model(xb), yb) / 2).backward()
                    if i % 2 == 0:
                        continue
                else:               # two backward() calls on one batch (a GAN's discriminator does this)
                    out = model(xb)
                    nn.functional.cross_entropy(out[:16], yb[:16]).backward(retain_graph=True)
                    nn.functional.cross_entropy(out[16:], yb[16:]).backward()
                opt.step()
                opt.zero_grad()
            with torch.no_grad():
                _, pred = torch.max(model(x[512:]), 1)
                print((pred == y[512:]).float().mean().item())
    # (the loss curve mixes halved and whole losses: the loss-curve check may speak, these may not)
    assert not {f.id for f in w.findings()} & {"accumulation-unscaled", "compare-values-not-indices",
                                                 "eval-without-no-grad", "symmetric-init"}
    assert w.hits.get("accumulation-unscaled:n", 0) > 20


def test_driven_watcher_finds_symmetric_hidden_units_but_not_a_zero_head():
    def model(constant: bool):
        m = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 2))
        for layer in (m[0], m[2]) if constant else ():
            nn.init.constant_(layer.weight, 0.1)
            nn.init.zeros_(layer.bias)
        nn.init.zeros_(m[4].weight)
        return m

    w, _, _ = _driven_loop(model(True), nn.CrossEntropyLoss(), steps=40)
    found = {f.id: f for f in w.findings()}
    assert "symmetric-init" in found  # seen at the first deep step, confirmed on the weights at the end
    assert found["symmetric-init"].evidence["units"] == 32 and found["symmetric-init"].evidence["layers"] == 2
    w, _, _ = _driven_loop(model(False), nn.CrossEntropyLoss(), steps=40)
    assert w.findings() == []


def test_driven_watcher_leaves_accumulation_to_the_loop_it_is_told_about():
    # the Trainer tells observe_backward() the raw loss and backpropagates it weighted by micro-batch
    # size: only a patched torch.autograd.backward sees the tensor really used, so driven mode does not judge
    x, y = data()
    torch.manual_seed(0)  # 30 steps from an unlucky initialization can leave the loss flat (loss-not-decreasing)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    w = Watcher(deep_first=3, deep_every=10)
    w.attach(model, opt, driven=True)
    w.phase("train")
    for step in range(30):
        opt.zero_grad()
        for half in (slice(0, 16), slice(16, 32)):
            i = (step * 32) % 608
            with w.loss_scope():
                loss = nn.functional.cross_entropy(model(x[i:i + 32][half]), y[i:i + 32][half])
            w.observe_backward(loss)
            (loss * 0.5).backward()
        opt.step()
        w.end_step(loss=loss.item())
    w.detach()
    assert w.findings() == [] and w.accum is None


def test_backward_and_step_inside_autocast_are_found_and_forward_only_autocast_is_quiet():
    x, y = data()
    for inside in (True, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        with torchwise.watch(print_findings=False) as w:
            for epoch in range(2):
                for i in range(0, 600, 40):
                    opt.zero_grad()
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        loss = nn.functional.cross_entropy(model(x[i:i + 40]), y[i:i + 40])
                        if inside:
                            loss.backward()
                            opt.step()
                    if not inside:
                        loss.backward()
                        opt.step()
        found = {f.id: f for f in w.findings()}
        if inside:
            ev = found["backward-in-autocast"].evidence
            assert ev["backward calls in autocast"] == ev["backward calls"] == 30
            assert ev["steps in autocast"] == ev["steps"] == 30 and ev["autocast"] == "cpu, bfloat16"
        else:
            assert found == {} and w.loss_watch.autocast_use["backward"] == w.loss_watch.autocast_use["step"] == 30


def _texts(n=480, seed=0):
    """Token-id texts of different lengths (4..150 tokens, most around 20) with a label each."""
    g = torch.Generator().manual_seed(seed)
    lengths = (torch.randn(n, generator=g) * 0.5 + 3).exp().long().clamp(4, 150)
    labels = torch.randint(0, 2, (n,), generator=g)
    texts = [torch.randint(10, 100, (int(k),), generator=g) for k in lengths]
    for t, label in zip(texts, labels):
        t[0] = 1 + int(label)  # a token that gives the class away
    return list(zip(texts, labels.tolist()))


def _collate(fixed: int | None):
    from torch.nn.utils.rnn import pad_sequence

    def collate(batch):
        x = pad_sequence([t for t, _ in batch], batch_first=True)
        if fixed is not None:  # every batch padded to one length
            x = nn.functional.pad(x[:, :fixed], (0, fixed - min(x.shape[1], fixed)))
        return x, torch.tensor([label for _, label in batch])
    return collate


class _TextNet(nn.Module):
    def __init__(self, conv: bool = True):
        super().__init__()
        self.emb = nn.Embedding(100, 16, padding_idx=0)
        self.conv = nn.Conv1d(16, 16, 3, padding=1) if conv else None
        self.rnn = None if conv else nn.GRU(16, 16, batch_first=True)
        self.fc = nn.Linear(16, 2)

    def forward(self, x):
        h = self.emb(x)
        h = self.conv(h.transpose(1, 2)).amax(2) if self.conv is not None else self.rnn(h)[0][:, -1]
        return self.fc(h)


@pytest.fixture
def restore_benchmark():
    before = torch.backends.cudnn.benchmark
    yield
    torch.backends.cudnn.benchmark = before


def _fit(model, loader, epochs=2):
    """A user's fit(): benchmark mode on for its duration, the process' setting restored at the end."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    torch.backends.cudnn.benchmark = before


def test_cudnn_benchmark_with_varying_shapes_is_read_while_training(restore_benchmark):
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    loader = DataLoader(_texts(), batch_size=16, shuffle=True, collate_fn=_collate(None))
    with torchwise.watch(print_findings=False) as w:
        _fit(_TextNet(), loader)
    assert torch.backends.cudnn.benchmark is False  # restored: only the reads during training saw it on
    found = {f.id: f for f in w.findings()}
    ev = found["cudnn-benchmark-varying-shapes"].evidence
    assert ev["sample shapes"] > 8 and ev["training forwards"] == 60 and ev["device"] == "cpu"
    assert len(ev["first seen at steps"]) == 9 and ev["first seen at steps"] == sorted(ev["first seen at steps"])
    assert "where the flag does nothing" in found["cudnn-benchmark-varying-shapes"].message
    # one padded length, or a model without convolutions: benchmark mode costs nothing there
    for model, collate in ((_TextNet(), _collate(64)), (_TextNet(conv=False), _collate(None))):
        loader = DataLoader(_texts(), batch_size=16, shuffle=True, collate_fn=collate)
        with torchwise.watch(print_findings=False) as w:
            _fit(model, loader)
        assert w.findings() == [], [f.id for f in w.findings()]


def test_driven_watcher_never_reports_cudnn_benchmark(restore_benchmark):
    torch.backends.cudnn.benchmark = True
    model = _TextNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    w = Watcher(deep_first=100, deep_every=1)  # every step deep: the root hook sees every batch
    w.attach(model, opt, driven=True)
    w.phase("train")
    for xb, yb in DataLoader(_texts(), batch_size=16, shuffle=True, collate_fn=_collate(None)):
        opt.zero_grad()
        with w.loss_scope():
            loss = nn.functional.cross_entropy(model(xb), yb)
        w.observe_backward(loss)
        loss.backward()
        opt.step()
        w.end_step(loss=loss.item())
    w.detach()
    assert "cudnn-benchmark-varying-shapes" not in [f.id for f in w.findings()]
    assert w.inputs.bench_shapes["shapes"] == {} and w.steps == 30


def test_trainer_under_a_global_watch_is_reported_for_neither_benchmark_nor_autocast(restore_benchmark):
    # on the CPU the Trainer turns cudnn.benchmark on (no cost there; on a GPU its own shape watch turns it
    # off again) and runs bf16 autocast around forward and loss only: the script-level watch must stay quiet
    torch.manual_seed(0)
    loader = DataLoader(_texts(), batch_size=16, shuffle=True, collate_fn=_collate(None))
    with torchwise.watch(print_findings=False) as w:
        result = torchwise.Trainer(_TextNet(), lambda p: torch.optim.Adam(p, lr=3e-3), train_data=loader,
                                   max_epochs=2, precision="bf16", progress=False).fit()
    ids = {f.id for f in w.findings()} | {f["id"] for f in result.findings}
    assert not ids & {"cudnn-benchmark-varying-shapes", "backward-in-autocast"}, ids
    assert w.steps == 60 and w.loss_watch.autocast_use["backward"] > 0 and w.loss_watch.autocast_use["backward_in"] == 0
