"""EMA of the weights: the arithmetic by hand, the warm-up, applied() and the state round trip bit for bit,
the buffer policy, wrapped models, and a real training on scikit-learn's digits."""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from torchwise.errors import CheckpointError, TorchwiseError
from torchwise.train.recipes.ema import EMA


def _set(module: nn.Linear, weight: list[float], bias: float) -> None:
    with torch.no_grad():
        module.weight.copy_(torch.tensor([weight]))
        module.bias.fill_(bias)


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def _train_steps(model: nn.Module, ema: EMA | None, steps: int, seed: int = 1) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if ema is not None:
            ema.update(model)


@pytest.mark.parametrize("foreach", [True, False])
def test_the_average_equals_the_hand_computation_exactly(foreach):
    # decay 0.75 and dyadic weights: every product and sum is exact in fp32, whatever the op order
    layer = nn.Linear(2, 1)
    _set(layer, [1.0, -2.0], 0.5)
    ema = EMA(layer, decay=0.75, warmup=False, foreach=foreach)
    hand_w, hand_b = [1.0, -2.0], 0.5
    for weight, bias in (([2.0, 0.0], 1.0), ([0.0, 4.0], -1.0), ([-1.0, 1.0], 0.25)):
        _set(layer, weight, bias)
        ema.update(layer)
        hand_w = [0.75 * s + 0.25 * p for s, p in zip(hand_w, weight)]
        hand_b = 0.75 * hand_b + 0.25 * bias
    assert hand_w == [0.453125, 0.15625] and hand_b == 0.2265625  # worked out on paper
    assert torch.equal(ema.shadow["weight"], torch.tensor([hand_w]))
    assert torch.equal(ema.shadow["bias"], torch.tensor([hand_b]))
    assert ema.updates == 3 and ema.shadow["weight"].dtype == torch.float32


def test_the_warm_up_starts_at_a_tenth_and_reaches_the_decay():
    ema = EMA(nn.Linear(2, 1), decay=0.999)
    assert ema.decay_at(0) == pytest.approx(0.1) and ema.decay_at(1) == pytest.approx(2 / 11)
    assert ema.decay_at(8989) < 0.999 and ema.decay_at(8991) == 0.999 == ema.decay_at(10 ** 6)
    assert EMA(nn.Linear(2, 1), decay=0.999, warmup=False).decay_at(0) == 0.999
    assert EMA(nn.Linear(2, 1), decay=0.5).decay_at(50) == 0.5  # the warm-up only ever lowers the decay


def test_the_warm_up_is_applied_step_by_step():
    layer = nn.Linear(3, 1)
    _set(layer, [0.0, 0.0, 0.0], 0.0)
    ema = EMA(layer, decay=0.9)
    hand = 0.0
    for n, value in enumerate([1.0, 2.0, 3.0, 4.0]):
        _set(layer, [value] * 3, value)
        ema.update(layer)
        d = min(0.9, (1 + n) / (10 + n))
        hand = d * hand + (1 - d) * value
    assert ema.shadow["bias"].item() == pytest.approx(hand, rel=1e-6)
    first = EMA(layer, decay=0.9)
    _set(layer, [10.0] * 3, 10.0)
    first.update(layer)  # d = 0.1 at the first update: 0.1 * 4 + 0.9 * 10
    assert first.shadow["bias"].item() == pytest.approx(9.4, rel=1e-6)


def test_foreach_and_the_per_tensor_loop_give_the_same_bits():
    a, b = _bn_model(), _bn_model()
    ema_a, ema_b = EMA(a, 0.99, foreach=True), EMA(b, 0.99, foreach=False)
    _train_steps(a, ema_a, 5)
    _train_steps(b, ema_b, 5)
    for name in ema_a.shadow:
        assert torch.equal(ema_a.shadow[name], ema_b.shadow[name]), name


def test_applied_swaps_in_the_average_and_restores_the_live_weights_bit_for_bit():
    model = _bn_model()
    ema = EMA(model, decay=0.9)
    _train_steps(model, ema, 6)
    _train_steps(model, None, 2)  # the live weights move on past the last update
    live = _snapshot(model)
    params = [p for p in model.parameters()]
    with ema.applied(model) as inside:
        assert inside is model
        for name, p in model.named_parameters():
            assert torch.equal(p, ema.shadow[name]), name
        assert not torch.equal(model[0].weight, live["0.weight"])
    after = _snapshot(model)
    assert all(torch.equal(after[k], live[k]) for k in live)
    assert [p for p in model.parameters()] == params  # the same Parameter objects (an optimizer keeps them)
    with pytest.raises(RuntimeError, match="inside"):
        with ema.applied(model):
            raise RuntimeError("inside")
    assert all(torch.equal(model.state_dict()[k], live[k]) for k in live)


def test_copy_to_writes_the_average_for_good():
    model = _bn_model()
    ema = EMA(model, decay=0.8)
    _train_steps(model, ema, 4)
    other = _bn_model()
    ema.copy_to(other)
    for name, p in other.named_parameters():
        assert torch.equal(p, ema.shadow[name])
    assert torch.equal(other[1].running_mean, model[1].running_mean)


def test_the_state_dict_round_trip_is_bit_identical_and_resumes_the_same_average():
    model = _bn_model()
    ema = EMA(model, decay=0.95)
    _train_steps(model, ema, 5)
    buffer = io.BytesIO()
    torch.save({"ema": ema.state_dict(), "model": model.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)  # tensors and an int: no pickled objects
    resumed_model = _bn_model()
    resumed_model.load_state_dict(saved["model"])
    resumed = EMA(resumed_model, decay=0.95)
    resumed.load_state_dict(saved["ema"])
    assert resumed.updates == ema.updates == 5
    for kind in ("shadow", "buffers"):
        mine, theirs = getattr(ema, kind), getattr(resumed, kind)
        assert sorted(mine) == sorted(theirs)
        assert all(torch.equal(mine[k], theirs[k]) and mine[k].dtype == theirs[k].dtype for k in mine)
    # both continue identically (same warm-up position, same shadow)
    _train_steps(model, ema, 3, seed=7)
    _train_steps(resumed_model, resumed, 3, seed=7)
    assert all(torch.equal(ema.shadow[k], resumed.shadow[k]) for k in ema.shadow)


def test_buffers_are_copied_from_the_live_model_not_averaged():
    model = _bn_model()
    ema = EMA(model, decay=0.99)
    _train_steps(model, ema, 3)
    bn = model[1]
    assert set(ema.shadow) == {n for n, _ in model.named_parameters()}  # BN's weight and bias are averaged
    assert "1.running_mean" not in ema.shadow and "1.num_batches_tracked" in ema.buffers
    assert torch.equal(ema.buffers["1.running_mean"], bn.running_mean)
    assert torch.equal(ema.buffers["1.running_var"], bn.running_var)
    assert ema.buffers["1.num_batches_tracked"].dtype == torch.int64
    assert ema.buffers["1.num_batches_tracked"].item() == 3
    # a copy, not the live tensor: more forward passes do not change it until the next update
    _train_steps(model, None, 1)
    assert ema.buffers["1.num_batches_tracked"].item() == 3 and bn.num_batches_tracked.item() == 4


def test_low_precision_weights_are_averaged_in_fp32():
    layer = nn.Linear(4, 4).to(torch.bfloat16)
    ema = EMA(layer, decay=0.999, warmup=False)
    start = ema.shadow["weight"].clone()
    with torch.no_grad():
        layer.weight.add_(1.0)
    ema.update(layer)
    assert ema.shadow["weight"].dtype == torch.float32
    # a move of 0.001, far below bf16's resolution near 1, is kept by the fp32 shadow
    moved = ema.shadow["weight"] - start
    assert torch.allclose(moved, (layer.weight.float() - start) * 0.001, rtol=1e-3, atol=1e-7)
    with ema.applied(layer):
        assert layer.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("wrap", ["DataParallel", "torch.compile", "DataParallel(torch.compile)"])
def test_a_wrapped_model_is_averaged_under_its_own_names(wrap):
    inner = _bn_model()
    wrapped = {"DataParallel": nn.DataParallel, "torch.compile": torch.compile,
               "DataParallel(torch.compile)": lambda m: nn.DataParallel(torch.compile(m))}[wrap](inner)
    ema = EMA(wrapped, decay=0.9)
    assert sorted(ema.shadow) == sorted(n for n, _ in inner.named_parameters())
    with torch.no_grad():
        inner[0].weight.add_(1.0)
    ema.update(wrapped)
    plain = EMA(_bn_model(), decay=0.9)
    plain.load_state_dict(ema.state_dict())  # the same names as the unwrapped model's
    live = inner[0].weight.detach().clone()
    with ema.applied(wrapped):
        assert torch.equal(inner[0].weight, ema.shadow["0.weight"])
    assert torch.equal(inner[0].weight, live)


def test_another_model_or_state_is_refused_with_the_names():
    ema = EMA(_bn_model(), decay=0.9)
    with pytest.raises(CheckpointError, match="do not match") as info:
        ema.update(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    assert "1.weight" in str(info.value) and "fix:" in str(info.value)
    with pytest.raises(CheckpointError, match="not an EMA state"):
        ema.load_state_dict({"weight": torch.zeros(1)})
    state = ema.state_dict()
    state["shadow"] = {**state["shadow"], "0.weight": torch.zeros(2, 2)}
    with pytest.raises(CheckpointError, match="another shape"):
        ema.load_state_dict(state)
    for decay in (0, 1, 1.5, True, "0.9"):
        with pytest.raises(TorchwiseError, match="decay"):
            EMA(_bn_model(), decay=decay)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_shadow_follows_the_weights_to_their_device():
    model = _bn_model()
    ema = EMA(model, decay=0.9)  # built on the CPU
    model.cuda()
    ema.update(model)
    assert all(t.is_cuda for t in ema.shadow.values()) and all(t.is_cuda for t in ema.buffers.values())
    state = torch.load(io.BytesIO(_saved(ema.state_dict())), map_location="cpu", weights_only=True)
    again = EMA(model, decay=0.9)
    again.load_state_dict(state)
    assert all(torch.equal(again.shadow[k], ema.shadow[k]) for k in ema.shadow)


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def test_a_real_training_on_digits_gives_a_sane_ema_next_to_the_raw_weights():
    from sklearn.datasets import load_digits

    from torchwise import Trainer

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, val = order[:1400], order[1400:]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))
    ema = EMA(model, decay=0.99)

    class Average:
        def on_step_end(self, trainer, **_):
            ema.update(trainer.model)

    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), train_data=(x[train], y[train]),
                      val_data=(x[val], y[val]), epochs=4, batch_size=32, progress=False, callbacks=[Average()])
    trainer.fit()
    raw = trainer.evaluate()
    with ema.applied(trainer.model):
        averaged = trainer.evaluate()
    print(f"digits val_acc: raw {raw['val_acc']:.4f}, EMA {averaged['val_acc']:.4f}")
    assert ema.updates == trainer.pos.step > 150
    assert raw["val_acc"] > 0.8 and averaged["val_acc"] > 0.8
    assert raw["val_acc"] == trainer.evaluate()["val_acc"]  # applied() gave the live weights back
