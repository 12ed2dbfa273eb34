"""fit() puts back the process-wide torch switches it turns, so the rest of a script computes as before."""
import os

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import ConfigError
from torchwise.train.speed.process_switches import ProcessSwitches


def data(n=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x.sum(1) > 0).long())


def trainer(**kwargs):
    torch.manual_seed(0)
    return torchwise.Trainer(nn.Linear(4, 2), train_data=data(), batch_size=16, progress=False, **kwargs)


@pytest.fixture
def clean_switches():
    saved = ProcessSwitches.capture()
    yield
    saved.restore()


def switches_during_fit(t):
    seen = []
    t.on("step_end", lambda **_: seen.append((torch.are_deterministic_algorithms_enabled(),
                                               torch.backends.cudnn.benchmark,
                                               torch.backends.cuda.matmul.allow_tf32)))
    return seen


def test_fit_restores_the_switches_it_turned(clean_switches):
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    t = trainer(deterministic=True, fast=["tf32"])
    seen = switches_during_fit(t)
    t.fit()
    assert seen and all(s == (True, False, True) for s in seen), seen  # turned on during the run...
    assert not torch.are_deterministic_algorithms_enabled()  # ...and back as the script had them
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ

    t = trainer(deterministic=False)  # the fast default turns cudnn.benchmark on for the run only
    seen = switches_during_fit(t)
    t.fit()
    assert seen and all(s[1] is True for s in seen)
    assert torch.backends.cudnn.benchmark is False


def test_a_script_that_chose_deterministic_kernels_keeps_them(clean_switches):
    torch.use_deterministic_algorithms(True, warn_only=True)
    t = trainer()  # deterministic=None: as the process has it
    seen = switches_during_fit(t)
    t.fit()
    assert all(s[0] for s in seen)
    assert "your script turned them on" in t.determinism_note
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()

    t = trainer(deterministic=False)  # asked for explicitly: off for the run, restored afterwards
    seen = switches_during_fit(t)
    t.fit()
    assert seen and not any(s[0] for s in seen)
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()


def test_switches_are_restored_when_fit_raises(clean_switches):
    torch.use_deterministic_algorithms(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    t = trainer(deterministic=True, fast=["tf32"])

    def boom(**_):
        raise RuntimeError("stop here")

    t.on("step_end", boom)
    with pytest.raises(RuntimeError, match="stop here"):
        t.fit()
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cuda.matmul.allow_tf32 is False


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch without fp32_precision")
def test_tf32_set_through_the_newer_api_is_left_alone(clean_switches):
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # reading the older flag now raises in torch
    try:
        t = trainer(fast=["tf32"])
        t.fit()
        assert "tf32" not in t.fast_plan.on
        assert "per-backend fp32_precision" in t.fast_plan.why_off["tf32"]
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    finally:
        torch.backends.cuda.matmul.fp32_precision = "ieee"  # a value the older flag can read again
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_deterministic_must_be_a_bool_or_none():
    with pytest.raises(ConfigError, match="deterministic must be None, True or False"):
        trainer(deterministic="yes")
