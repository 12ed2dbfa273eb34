"""LR finder: the sweep on real models and data, full state restoration, suggestions, plot and CLI."""
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.train.recipes.lr_find import lr_find, run_lr_find, suggest, zero_lag_smooth
from torchwise.errors import TorchwiseError


def digits(n=600):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return TensorDataset(torch.tensor(x[:n], dtype=torch.float32).view(-1, 1, 8, 8) / 16, torch.tensor(y[:n]))


def cnn(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.2),
                         nn.Flatten(), nn.Linear(8 * 64, 10))


def test_sweep_restores_model_optimizer_scheduler_rng_and_marks_the_plot(tmp_path):
    data = digits()
    model = cnn()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=50)
    # A real step first, so that there is optimizer state and a scheduler position to lose.
    nn.functional.cross_entropy(model(data.tensors[0][:32]), data.tensors[1][:32]).backward()
    opt.step()
    sched.step()
    model.eval()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = {i: {k: v.clone() for k, v in s.items()} for i, s in enumerate(opt.state.values())}
    groups = [dict(g, params=None) for g in opt.param_groups]
    sched_state = dict(sched.state_dict())
    grads = [p.grad.clone() for p in model.parameters()]
    torch.manual_seed(123)
    expected_next_random = torch.rand(3)
    torch.manual_seed(123)

    result = lr_find(model, opt, nn.CrossEntropyLoss(), data, batch_size=32, device="cpu", scheduler=sched,
                     num_steps=60, plot=tmp_path / "lr.png")

    for key, value in model.state_dict().items():   # parameters AND BatchNorm statistics
        assert torch.equal(value, weights[key]), key
    for i, state in enumerate(opt.state.values()):
        for k, v in state.items():
            assert torch.equal(v, opt_state[i][k]), k
    assert [dict(g, params=None) for g in opt.param_groups] == groups
    assert sched.state_dict() == sched_state
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert not model.training and not model[3].training          # eval mode kept
    assert torch.equal(torch.rand(3), expected_next_random)        # RNG untouched

    assert len(result.lrs) == len(result.losses) == len(result.raw_losses) >= 30
    assert result.lrs[0] == pytest.approx(1e-7) and all(b > a for a, b in zip(result.lrs, result.lrs[1:]))
    assert result.steepest_lr is not None and 1e-5 < result.steepest_lr < result.min_loss_lr
    assert result.min10_lr == pytest.approx(result.min_loss_lr / 10)
    assert min(result.losses) < result.losses[0] - 0.3             # it found a region where it learns
    # The PNG: a real image, with the suggestion's red line drawn across it.
    import matplotlib.image as mpimg

    image = mpimg.imread(tmp_path / "lr.png")
    assert image.shape[0] > 200 and image.shape[1] > 300
    red = (np.abs(image[..., 0] - 0xd6 / 255) < 0.03) & (np.abs(image[..., 1] - 0x27 / 255) < 0.03) & \
          (np.abs(image[..., 2] - 0x28 / 255) < 0.03)
    assert red.sum() > 200                                          # the marked suggestion
    assert "suggested" in result.report() and "min/10" in result.report()


def test_trainer_lr_find_then_fit_equals_fit_alone(tmp_path):
    data = digits(320)
    finals = []
    for sweep_first in (True, False):
        model = cnn(seed=1)
        trainer = torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=3e-3), train_data=data,
                                    batch_size=32, max_steps=12, progress=False, seed=3, device="cpu")
        if sweep_first:
            result = run_lr_find(trainer, num_steps=40, plot=tmp_path / "trainer.png")
            assert (tmp_path / "trainer.png").stat().st_size > 10_000
            assert result.suggested_lr > 0
        trainer.fit()
        finals.append({k: v.clone() for k, v in model.state_dict().items()})
    for key in finals[0]:
        assert torch.equal(finals[0][key], finals[1][key]), key


def test_suggestions_on_a_known_curve():
    lrs = list(np.logspace(-6, 0, 61))
    x = np.log10(lrs)
    # A logistic fall centred at 1e-3 (steepest there), then a rise after 1e-1.
    losses = list(2.0 - 1.5 / (1 + np.exp(-3 * (x + 3))) + np.where(x > -1, 4 * (x + 1) ** 2, 0))
    steepest, at_min = suggest(lrs, losses)
    assert steepest == pytest.approx(1e-3, rel=0.13)
    assert at_min == pytest.approx(1e-1, rel=0.3)
    # Zero-lag smoothing keeps the steepest point where it is; a one-sided average would shift it right.
    noisy = [v + 0.05 * math.sin(7 * i) for i, v in enumerate(losses)]
    steepest_smoothed, _ = suggest(lrs, zero_lag_smooth(noisy, 0.9))
    assert steepest_smoothed == pytest.approx(1e-3, rel=0.5)


def test_divergence_stops_the_sweep_early():
    torch.manual_seed(0)
    x = torch.randn(512, 4)
    data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))
    model = nn.Linear(4, 1)
    result = lr_find(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), data, batch_size=64,
                     device="cpu", start_lr=1e-4, end_lr=1e3, num_steps=80)
    assert len(result.lrs) < 80
    assert result.stop_reason.startswith(("diverged", "non-finite"))
    assert result.suggested_lr < 1.0   # SGD on this problem diverges above lr ~ 1


def test_bad_settings_are_explained():
    model = nn.Linear(2, 2)
    data = TensorDataset(torch.randn(8, 2), torch.zeros(8, dtype=torch.long))
    with pytest.raises(TorchwiseError, match="start_lr < end_lr"):
        lr_find(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), data,
                start_lr=1.0, end_lr=1e-3, device="cpu")


class TwoInputs(torch.utils.data.Dataset):
    """((x1, x2), y) samples, the documented form of a model with two inputs."""

    def __init__(self, n=256):
        g = torch.Generator().manual_seed(0)
        self.x1, self.x2 = torch.randn(n, 3, generator=g), torch.randn(n, 2, generator=g)
        self.y = (self.x1[:, 0] + self.x2[:, 1] > 0).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return (self.x1[i], self.x2[i]), self.y[i]


class Joined(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 2)

    def forward(self, a, b):
        return self.fc(torch.cat([a, b], dim=1))


def test_the_sweep_calls_a_two_input_model_with_both_inputs():
    torch.manual_seed(0)
    model = Joined()
    result = lr_find(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), TwoInputs(),
                     batch_size=32, device="cpu", num_steps=20)
    assert len(result.lrs) > 0 and all(math.isfinite(v) for v in result.losses[:5])
