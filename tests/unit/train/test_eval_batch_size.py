"""eval_batch_size: validation, evaluate() and predict() batches of their own size, same results."""
from __future__ import annotations


import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import torchwise
from torchwise.errors import ConfigError


class Samples(Dataset):
    """A plain map-style Dataset (served sample by sample and collated, unlike a TensorDataset)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    return x, y


def _model() -> nn.Module:
    torch.manual_seed(0)  # BatchNorm and Dropout: eval mode matters, and so would a wrong batch split
    return nn.Sequential(nn.Linear(6, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))


def _eval_batch_sizes(model: nn.Module) -> list[int]:
    """Batch sizes of every forward the model makes in eval mode (validation, evaluate, predict)."""
    sizes: list[int] = []
    model.register_forward_hook(lambda module, args, out: None if module.training else sizes.append(len(args[0])))
    return sizes


@pytest.mark.parametrize("kind", ["tensors", "dataset"])
def test_larger_eval_batches_give_the_same_metrics(kind):
    make = TensorDataset if kind == "tensors" else Samples
    train, val = make(*_data(160, seed=1)), make(*_data(120, seed=2))
    runs = {}
    for eval_batch_size in (None, 50):
        model = _model()
        sizes = _eval_batch_sizes(model)
        trainer = torchwise.Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), train_data=train, val_data=val,
                                    max_epochs=2, batch_size=16, eval_batch_size=eval_batch_size, device="cpu",
                                    progress=False, tensorboard=False)
        result = trainer.fit()
        fit_sizes = list(sizes)
        metrics = trainer.evaluate()
        outputs, targets = trainer.predict(val)
        runs[eval_batch_size] = dict(history=result.history, fit_sizes=fit_sizes, all_sizes=list(sizes),
                                     metrics=metrics, outputs=outputs, targets=targets)

    # the validation loader really uses the asked size: 120 samples as 50 + 50 + 20 (16 x 7 + 8 without it),
    # once per epoch during fit(), then once for evaluate() and once for predict()
    assert runs[50]["fit_sizes"] == [50, 50, 20] * 2
    assert runs[None]["fit_sizes"] == ([16] * 7 + [8]) * 2
    assert runs[50]["all_sizes"] == [50, 50, 20] * 4
    assert runs[None]["all_sizes"] == ([16] * 7 + [8]) * 4

    plain, big = runs[None], runs[50]
    assert len(plain["history"]) == len(big["history"]) == 2
    for a, b in zip(plain["history"], big["history"]):
        assert a["train_loss"] == b["train_loss"]  # validation never changes the training trajectory
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5, abs=1e-7)
        assert b["val_acc"] == a["val_acc"]
    for key, value in plain["metrics"].items():
        assert big["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    torch.testing.assert_close(big["outputs"], plain["outputs"], rtol=1e-5, atol=1e-6)
    assert torch.equal(big["targets"], plain["targets"])


def test_eval_batch_size_none_is_the_training_batch_size_and_a_users_loader_keeps_its_own():
    x, y = _data(40, seed=3)
    model = _model()
    sizes = _eval_batch_sizes(model)
    trainer = torchwise.Trainer(model, train_data=TensorDataset(x, y), batch_size=16, device="cpu", progress=False)
    assert trainer.eval_batch_size is None
    trainer.predict(TensorDataset(x, y))
    assert sizes == [16, 16, 8]

    sizes.clear()
    trainer = torchwise.Trainer(model, train_data=TensorDataset(x, y), batch_size=16, eval_batch_size=64,
                                device="cpu", progress=False)
    trainer.predict(TensorDataset(x, y))
    assert sizes == [40]
    sizes.clear()
    trainer.predict(DataLoader(TensorDataset(x, y), batch_size=10))  # a DataLoader's batch_size is the user's
    assert sizes == [10, 10, 10, 10]


@pytest.mark.parametrize("bad", [0, -8, 2.5, True, "64", 128.0])
def test_bad_eval_batch_size_is_a_clear_error(bad):
    x, y = _data(8, seed=0)
    with pytest.raises(ConfigError) as info:
        torchwise.Trainer(_model(), train_data=TensorDataset(x, y), eval_batch_size=bad)
    error = info.value
    assert error.what == "eval_batch_size must be None or an integer >= 1."
    assert error.values == {"eval_batch_size": bad}
    assert "eval_batch_size=256" in error.fix
