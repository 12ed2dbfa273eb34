"""The recipes as Trainer settings, end to end: ema_decay, mixup/cutmix, label_smoothing,
gradient_checkpointing and backbone_lr_scale (their arithmetic is tested in test_ema.py,
test_mixing.py and test_label_smoothing.py)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from torchwise import Trainer
from torchwise.errors import TorchwiseError


QUIET = dict(progress=False, checks=False, tensorboard=False)


def digits():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16, torch.tensor(y)


def cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(512, 32), nn.ReLU(),
                         nn.Linear(32, 10))


def test_with_ema_the_average_is_evaluated_kept_and_written_as_final(tmp_path):
    x, y = digits()
    model = cnn()
    trainer = Trainer(model, lambda p: torch.optim.AdamW(p, lr=3e-3), train_data=(x[:600], y[:600]),
                      val_data=(x[600:800], y[600:800]), epochs=2, batch_size=32, ema_decay=0.9,
                      out_dir=tmp_path / "run", **QUIET)
    result = trainer.fit()
    shadow = trainer.ema.state_dict()["shadow"]
    final = load_file(str(tmp_path / "run" / "final" / "model.safetensors"))
    for name, value in shadow.items():
        assert torch.equal(final[name], value.to(final[name].dtype)), f"final/{name} is not the EMA's"
        assert torch.equal(dict(model.named_parameters())[name].detach(), value), f"the model's {name}"
    # the logged validation was of the EMA weights: evaluating the model now (it holds them) agrees
    assert trainer.evaluate()["val_loss"] == pytest.approx(result.history[-1]["val_loss"], abs=1e-6)
    state = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1] / "state.pt", weights_only=True)
    assert state["ema"]["updates"] == result.steps


def _mixed_run(out_dir, stop_at=None, resume=False):
    x, y = digits()
    trainer = Trainer(cnn(), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), train_data=(x[:512], y[:512]),
                      max_steps=12, batch_size=32, mixup=0.4, cutmix=1.0, ema_decay=0.8, checkpoint_every=3,
                      out_dir=out_dir,
                      resume=resume, seed=5, **QUIET)
    if stop_at is not None:
        trainer.on("step_end", lambda step, trainer, **_: trainer.request_stop() if step == stop_at else None)
    trainer.fit()
    return load_file(str(out_dir / "final" / "model.safetensors"))


def test_mixup_cutmix_and_ema_resume_exactly_a_resumed_run_mixes_and_averages_the_same(tmp_path):
    torch.set_num_threads(1)
    whole = _mixed_run(tmp_path / "whole")
    _mixed_run(tmp_path / "split", stop_at=6)
    resumed = _mixed_run(tmp_path / "split", resume=True)
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), f"{name} differs after resume"


def test_mixing_leaves_validation_alone_and_its_labels_checked():
    x, y = digits()
    trainer = Trainer(cnn(), train_data=(x[:256], y[:256]), val_data=(x[256:512], y[256:512]), max_steps=4,
                      batch_size=32, mixup=0.8, **QUIET)
    row = trainer.fit().history[-1]
    assert 0.0 <= row["val_acc"] <= 1.0  # plain labels in validation: accuracy exists (top-5 not with 10 classes)
    assert "val_top5" not in row
    bad = Trainer(cnn(), train_data=(x[:64], (y[:64] + 20)), max_steps=1, batch_size=32, mixup=0.8, **QUIET)
    with pytest.raises(TorchwiseError) as err:  # the first batch's labels are checked, not the mix's
        bad.fit()
    assert "label" in str(err.value).lower()


def test_label_smoothing_goes_to_the_default_loss():
    x, y = digits()
    trainer = Trainer(cnn(), train_data=(x[:64], y[:64]), label_smoothing=0.1, **QUIET)
    assert trainer.loss_fn.label_smoothing == 0.1
    with pytest.raises(TorchwiseError) as err:
        Trainer(cnn(), train_data=(x[:64], y[:64]), label_smoothing=1.5, **QUIET)
    assert "label_smoothing" in str(err.value)


def test_gradient_checkpointing_trains_to_the_same_weights():
    x, y = digits()

    def final(**setting):
        model = nn.Sequential(nn.Flatten(), *[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(4)],
                              nn.Linear(64, 10))
        torch.manual_seed(0)
        for p in model.parameters():
            nn.init.normal_(p, std=0.1)
        Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), train_data=(x[:256], y[:256]), max_steps=5,
                batch_size=32, **setting, **QUIET).fit()
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(final(), final(gradient_checkpointing=True)):
        assert torch.allclose(a, b, atol=1e-6)


def test_backbone_lr_scale_gives_the_head_and_the_backbone_their_rates():
    x, y = digits()
    trainer = Trainer(cnn(), lambda p: torch.optim.AdamW(p, lr=2e-3), train_data=(x[:64], y[:64]), max_steps=1,
                      batch_size=32, backbone_lr_scale=0.1, **QUIET)
    trainer.fit()
    rates = {g.get("name"): g["lr"] for g in trainer.optimizer.param_groups}
    assert rates == {"head": pytest.approx(2e-3), "backbone": pytest.approx(2e-4)}
    frozen = cnn()
    Trainer(frozen, train_data=(x[:64], y[:64]), max_steps=1, batch_size=32, backbone_lr_scale=0, **QUIET).fit()
    assert not any(p.requires_grad for p in frozen[0].parameters()) and frozen[5].weight.requires_grad
    model = cnn()
    with pytest.raises(TorchwiseError) as err:
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), train_data=(x[:64], y[:64]), max_steps=1,
                backbone_lr_scale=0.1, **QUIET).fit()
    assert "factory" in str(err.value)
