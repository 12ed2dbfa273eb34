"""Calls of the Python API that are refused say so as a torchwise error, complete on its own (what, the
values, the fix), instead of a Python error raised somewhere inside (each of these was a raw TypeError or
AttributeError)."""
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import TorchwiseError


def data():
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x.sum(1) > 0).long())


def trainer(**kwargs):
    return torchwise.Trainer(nn.Linear(4, 2), kwargs.pop("optimizer", None), train_data=data(), progress=False,
                             tensorboard=False, **kwargs)


class Logger:
    def on_step_end(self, **_):
        pass


CASES = {
    # a factory that cannot take the parameters: refused at Trainer(...), not as a TypeError inside fit()
    "optimizer factory without the parameters": (
        lambda tmp: trainer(optimizer=lambda: torch.optim.SGD([], lr=0.1)),
        ["The optimizer factory must take the parameters", "lambda params: torch.optim.AdamW"]),
    "one callback without a list": (
        lambda tmp: trainer(callbacks=Logger()),
        ["callbacks must be a list", "callbacks: Logger", "callbacks=[Logger(...)]"]),
    "a misspelt lr_find setting": (
        lambda tmp: trainer().lr_find(num_step=20),
        ["Unknown lr_find setting 'num_step'", "did you mean: num_steps"]),
    "save_model with a name for the model": (
        lambda tmp: torchwise.save_model("resnet18", tmp / "m.safetensors"),
        ["save_model(model, path) needs the model as a torch.nn.Module", "model: str"]),
    "load_model with its arguments swapped": (
        lambda tmp: torchwise.load_model(nn.Linear(4, 2), tmp / "m.safetensors"),
        ["load_model(path, model) needs the model as a torch.nn.Module", "model: PosixPath"]),
    "seed_everything('0')": (lambda tmp: torchwise.seed_everything("0"), ["integer seed", "seed: '0'"]),
    "seed_everything(1.5)": (lambda tmp: torchwise.seed_everything(1.5), ["integer seed", "seed: 1.5"]),
    "seed_everything(-1)": (lambda tmp: torchwise.seed_everything(-1), ["integer seed", "seed: -1"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_call_raises_a_torchwise_error_complete_on_its_own(case, tmp_path):
    call, words = CASES[case]
    with pytest.raises(TorchwiseError) as info:
        call(tmp_path)
    message = str(info.value)
    assert "\n  fix: " in message, message
    for word in words:
        assert word in message, message


def test_the_optimizer_forms_that_work_are_still_taken(tmp_path):
    for optimizer in (torch.optim.Adam, lambda params: torch.optim.SGD(params, lr=0.1),
                      lambda params, fused=False: torch.optim.AdamW(params, fused=fused or None)):
        assert trainer(optimizer=optimizer, max_steps=1).fit().steps == 1
    assert trainer(callbacks=(Logger(),), max_steps=1).fit().steps == 1
