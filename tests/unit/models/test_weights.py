"""Weights on disk: safetensors, wrapper prefixes, and loading that never runs pickled code."""
import collections

import pytest
import torch
from safetensors import safe_open
from torch import nn

import torchwise
from torchwise.errors import CheckpointError


def small():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))


def assert_same(a, b):
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_save_and_load_round_trip_with_metadata(tmp_path):
    model = small()
    path = torchwise.save_model(model, tmp_path / "m.safetensors", {"classes": ["a", "b"]})
    with safe_open(str(path), "pt") as fh:
        assert fh.metadata()["classes"] == '["a", "b"]'
    fresh = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    assert_same(torchwise.load_model(path, fresh), model)


def test_tied_weights_are_saved(tmp_path):
    model = small()
    model[2].weight = nn.Parameter(torch.randn(2, 5))
    model.add_module("tied", nn.Linear(5, 2))
    model.tied.weight = model[2].weight  # shares storage: plain safetensors refuses this
    torchwise.save_model(model, tmp_path / "t.safetensors")
    loaded = torchwise.load_state_dict(tmp_path / "t.safetensors")
    assert torch.equal(loaded["tied.weight"], loaded["2.weight"])


def test_ddp_style_module_prefix_loads_into_the_plain_model(tmp_path):
    model = small()
    wrapped = nn.DataParallel(model)  # on CPU a pass-through, but its state dict has 'module.' keys
    assert next(iter(wrapped.state_dict())).startswith("module.")
    torch.save(wrapped.state_dict(), tmp_path / "ddp.pt")
    fresh = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    assert_same(torchwise.load_model(tmp_path / "ddp.pt", fresh), model)


def test_compiled_model_prefix_loads_into_the_plain_model(tmp_path):
    model = small()
    compiled = torch.compile(model)  # wrapping only; nothing is compiled until it is called
    assert next(iter(compiled.state_dict())).startswith("_orig_mod.")
    torch.save({"model_state_dict": compiled.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    fresh = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    assert_same(torchwise.load_model(tmp_path / "ckpt.pt", fresh), model)
    # and saving a wrapped model writes clean keys
    torchwise.save_model(compiled, tmp_path / "clean.safetensors")
    assert set(torchwise.load_state_dict(tmp_path / "clean.safetensors")) == set(model.state_dict())


class Payload:
    def __reduce__(self):
        return (print, ("this would run on load",))


def test_pickled_code_is_never_executed(tmp_path, capsys):
    torch.save({"state_dict": collections.OrderedDict(), "evil": Payload()}, tmp_path / "evil.pt")
    capsys.readouterr()
    with pytest.raises(CheckpointError, match="cannot be loaded as plain weights") as info:
        torchwise.load_state_dict(tmp_path / "evil.pt")
    assert "this would run on load" not in capsys.readouterr().out
    assert "torchwise.save_model" in str(info.value)


def test_key_mismatch_is_a_readable_list(tmp_path):
    torchwise.save_model(small(), tmp_path / "small.safetensors")
    other = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2), nn.ReLU(), nn.Linear(2, 2))
    with pytest.raises(CheckpointError) as info:
        torchwise.load_model(tmp_path / "small.safetensors", other)
    text = str(info.value)
    assert "missing in file: 4.weight, 4.bias" in text and "unexpected in file: none" in text
    assert "only part of the model" in text


def test_missing_file_and_non_weights_file(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        torchwise.load_state_dict(tmp_path / "nope.safetensors")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds no state dict"):
        torchwise.load_state_dict(tmp_path / "list.pt")


def test_a_leading_model_holder_is_dropped_only_where_it_makes_keys_fit(tmp_path):
    model = small()
    torch.save({"state_dict": {"model." + k: v for k, v in model.state_dict().items()}}, tmp_path / "held.pt")
    fresh = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
    assert_same(torchwise.load_model(tmp_path / "held.pt", fresh), model)
    holder = nn.Module()
    holder.model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))  # its own attribute `model`
    torchwise.load_model(tmp_path / "held.pt", holder)
    assert_same(holder.model, model)
