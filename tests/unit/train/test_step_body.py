"""The one training step body (torchwise/train/step/body.py: StepRunner.body) and the wrappers around it.

- the body is bit-identical to the plain hand-written loop (accumulation 1 and 3 with a short last
  micro-batch, fp32 and bf16 autocast on the CPU, with and without clipping);
- the memory measurement, the overfit check and lr-find run that body (counted through a real
  subclass of StepRunner), and nothing else in the package calls optimizer.step / scaler.step;
- the wrappers compose in one place (compose_step) with the Trainer's call interface.
"""
from __future__ import annotations

import ast
import contextlib
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import torchwise.train.step.body as step_module
from torchwise.train.step.precision import choose_precision
from torchwise.train.step.body import OVERFLOW, StepRunner
from torchwise.train.step.step_wrappers import CompileFallback, OOMGuard, compose_step, find_layer
from conftest import REPO_ROOT


ROOT = REPO_ROOT / "torchwise"


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.25), nn.Linear(12, 3))


def batches(sizes: list[int], seed: int) -> list[tuple[tuple[torch.Tensor], torch.Tensor, int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        x = torch.randn(n, 6, generator=g)
        out.append(((x,), (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), n))
    return out


def reference_step(model, optimizer, micro, dtype, clip):
    """The seed's loop, written out by hand: what the body must equal bit for bit."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    total = sum(n for _, _, n in micro)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for (x,), y, n in micro:
        with torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(model(x), y)
        (loss * (n / total) if n != total else loss).backward()
        loss_sum += loss.item() * n
    if clip is not None:
        norm = float(nn.utils.clip_grad_norm_(params, clip))
    else:
        norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params]))))
    if math.isfinite(norm):
        optimizer.step()
    return loss_sum / total, norm


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("sizes", [[16], [8, 8, 5]], ids=["accumulate1", "accumulate3_short_last"])
@pytest.mark.parametrize("clip", [None, 0.05])
def test_the_body_equals_the_hand_written_loop_bit_for_bit(precision, sizes, clip):
    prec = choose_precision(precision, torch.device("cpu"))
    runs = []
    for use_body in (False, True):
        model = net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        runner = StepRunner(model, opt, nn.functional.cross_entropy, prec, torch.device("cpu"), clip)
        torch.manual_seed(1)  # the same dropout masks for both
        seen = []
        for step in range(4):
            micro = batches(sizes, seed=step)
            if use_body:
                result = runner.run(micro, measure_norm=True)
                assert result.skipped is None and result.samples == sum(sizes)
                seen.append((result.loss, result.grad_norm))
            else:
                seen.append(reference_step(model, opt, micro, prec.autocast_dtype, clip))
        runs.append((seen, {k: v.clone() for k, v in model.state_dict().items()}))
    (ref_seen, ref_w), (body_seen, body_w) = runs
    assert body_seen == ref_seen
    assert all(torch.equal(body_w[k], ref_w[k]) for k in ref_w)


def test_accumulated_micro_batches_equal_one_big_batch_even_with_a_short_last_one():
    grads = []
    for sizes in ([29], [8, 8, 8, 5]):
        model = net().eval()  # no dropout: the two must see the same function
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        runner = StepRunner(model, opt, nn.functional.cross_entropy, choose_precision("fp32", torch.device("cpu")),
                            torch.device("cpu"), None)
        whole = batches([29], seed=3)[0]
        x, y = whole[0][0], whole[1]
        micro, at = [], 0
        for n in sizes:
            micro.append(((x[at:at + n],), y[at:at + n], n))
            at += n
        runner.run(micro, measure_norm=False)
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_the_sync_free_body_trains_like_the_eager_one():
    weights = []
    for sync_free in (False, True):
        model = net()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        runner = StepRunner(model, opt, nn.functional.cross_entropy, choose_precision("fp32", torch.device("cpu")),
                            torch.device("cpu"), 0.1)
        runner.sync_free = sync_free
        torch.manual_seed(1)
        for step in range(3):
            assert runner.run(batches([8, 8, 5], seed=step), measure_norm=False).skipped is None
        weights.append(model.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_fp16_loss_scaling_in_the_same_body():
    cpu = torch.device("cpu")
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    runner = StepRunner(model, opt, lambda out, y: nn.functional.cross_entropy(out, y) * 1e4,
                        choose_precision("fp16", cpu), cpu, None)
    assert runner.scaler is runner.amp and runner.amp.is_enabled()
    before = runner.amp.get_scale()
    result = runner.run(batches([16], seed=0), measure_norm=False)
    assert result.skipped == OVERFLOW and runner.amp.get_scale() < before  # overflow: the scale is lowered
    scale = runner.amp.get_scale()
    (x,), y, n = batches([16], seed=1)[0]
    result = runner.run([((x * math.nan,), y, n)], measure_norm=False)
    assert result.skipped == "non-finite loss (nan)" and runner.amp.get_scale() == scale  # not backward's fault
    # and without loss scaling the scaler is a disabled pass-through, invisible to checkpoints
    plain = StepRunner(model, opt, nn.functional.cross_entropy, choose_precision("fp32", cpu), cpu, None)
    assert plain.scaler is None and not plain.amp.is_enabled()


class CountingRunner(StepRunner):
    """A real StepRunner that counts the bodies it runs."""

    bodies = 0

    def body(self, *args, **kwargs):
        CountingRunner.bodies += 1
        return super().body(*args, **kwargs)


@pytest.fixture
def counting(monkeypatch):
    CountingRunner.bodies = 0
    monkeypatch.setattr(step_module, "StepRunner", CountingRunner)
    return CountingRunner


def test_the_overfit_check_runs_the_shared_body(counting):
    from torchwise.script_check.sanity import overfit_one_batch

    (x,), y, _ = batches([16], seed=0)[0]
    result = overfit_one_batch(net(), x, y, nn.functional.cross_entropy, steps=40, lr=1e-2)
    assert counting.bodies == result["steps"] > 1


def test_the_memory_measurement_runs_the_shared_body(counting):
    from torchwise.toolbox.memory import _train_steps

    model = net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for precision in ("fp32", "bf16"):
        _train_steps(model, (torch.randn(8, 6),), precision, "adamw", "classification", None, 2)
    assert counting.bodies == 4
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # it really trained


def test_lr_find_runs_the_shared_body(counting):
    from torch.utils.data import TensorDataset

    from torchwise.train.recipes.lr_find import lr_find

    (x,), y, _ = batches([64], seed=0)[0]
    model = net()
    result = lr_find(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy,
                     TensorDataset(x, y), batch_size=16, device="cpu", precision="fp32", num_workers=0,
                     num_steps=8, start_lr=1e-4, end_lr=1.0)
    assert counting.bodies == len(result.raw_losses) >= 3


def _step_calls(path: Path) -> list[int]:
    """Lines calling <optimizer>.step(...) or <scaler>.step(...) (scheduler.step() is not an update)."""
    names = {"opt", "optimizer", "scaler", "amp"}
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name in names:
                lines.append(node.lineno)
    return lines


def test_one_place_in_the_package_calls_the_optimizer_step():
    found = {str(p.relative_to(ROOT)): _step_calls(p) for p in ROOT.rglob("*.py")}
    found = {path: lines for path, lines in found.items() if lines}
    assert list(found) == ["train/step/body.py"] and len(found["train/step/body.py"]) == 1, found


def test_compose_step_puts_the_wrappers_together_with_the_trainers_call():
    cpu = torch.device("cpu")
    model = net()
    core = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy,
                      choose_precision("fp32", cpu), cpu, None)
    step = compose_step(core, on_oom="adapt", accumulate=2, device_steps="eager")
    assert isinstance(step, OOMGuard) and find_layer(step, StepRunner) is core and step.scaler is None
    assert step.run(batches([8, 8], seed=0), measure_norm=True).grad_norm is not None
    with pytest.raises(Exception, match="Unknown device_steps"):
        compose_step(core, device_steps="fast")


class BackendCompilerFailed(RuntimeError):
    """Named as torch.compile's own failure: what the compile fallback recognises."""


class FailsCompiled(nn.Module):
    def forward(self, x):
        raise BackendCompilerFailed("backend exploded")


def test_the_compile_fallback_layer_retries_the_step_on_the_eager_model():
    cpu = torch.device("cpu")
    eager = net()
    core = StepRunner(FailsCompiled(), torch.optim.SGD(eager.parameters(), lr=0.1), nn.functional.cross_entropy,
                      choose_precision("fp32", cpu), cpu, None)
    told = []
    step = compose_step(core, eager_model=eager, on_compile_fallback=lambda exc, reason: told.append(reason))
    assert isinstance(step, CompileFallback) and find_layer(step, OOMGuard) is step.inner
    result = step.run(batches([8], seed=0), measure_norm=False)
    assert result.skipped is None and core.model is eager
    assert told == ["BackendCompilerFailed: backend exploded"]
    step.run(batches([8], seed=1), measure_norm=False)
    assert len(told) == 1
