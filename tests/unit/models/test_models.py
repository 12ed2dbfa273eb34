"""Model factory: built-ins, torchvision heads, local weights, frozen backbones, user callables."""
from __future__ import annotations

import json
import sys

import pytest
import torch
from torch import nn

from torchwise.errors import CheckpointError, TorchwiseError
from torchwise.models import build_model, classification_head, model_from_run


def test_builtin_models_shapes():
    assert build_model("smallcnn", 10, 1, (8, 8))(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    assert build_model("smallcnn", 3, 3, (32, 32))(torch.randn(1, 3, 32, 32)).shape == (1, 3)
    assert build_model("mlp", 1, 7)(torch.randn(1, 7)).shape == (1, 1)  # batch of one: LayerNorm is fine
    assert build_model("mlp", 4, 1, (8, 8))(torch.randn(5, 1, 8, 8)).shape == (5, 4)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0"])
def test_torchvision_head_is_replaced(name):
    model = build_model(name, 5, in_channels=1).eval()
    assert classification_head(model)[1].out_features == 5
    assert model(torch.randn(1, 1, 64, 64)).shape == (1, 5)


def test_local_weights_load_then_head_replaced_and_backbone_frozen(tmp_path):
    source = build_model("resnet18", 1000)  # shaped like an ImageNet checkpoint
    torch.save({"state_dict": source.state_dict()}, tmp_path / "resnet18.pth")
    model = build_model("resnet18", 4, weights=str(tmp_path / "resnet18.pth"), freeze_backbone=True)
    assert torch.equal(model.conv1.weight, source.conv1.weight)
    assert model.fc.out_features == 4
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["fc.weight", "fc.bias"]


def test_weights_of_another_architecture_are_refused(tmp_path):
    from safetensors.torch import save_file

    save_file(build_model("smallcnn", 3).state_dict(), str(tmp_path / "small.safetensors"))
    with pytest.raises(CheckpointError, match="does not match") as info:
        build_model("resnet18", 3, weights=str(tmp_path / "small.safetensors"))
    assert info.value.values["missing keys"]


def test_unknown_name_suggests(tmp_path):
    with pytest.raises(TorchwiseError) as info:
        build_model("mobilenetv3_small", 3)
    assert info.value.values["did you mean"] == "mobilenet_v3_small"


def test_user_callable(tmp_path, monkeypatch):
    (tmp_path / "mynets.py").write_text(
        "from torch import nn\n"
        "def tiny(num_classes, in_channels):\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n"
        "def not_a_model(num_classes):\n"
        "    return 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_model("mynets:tiny", 6, in_channels=2)
    assert model(torch.randn(3, 2, 4, 4)).shape == (3, 6)
    with pytest.raises(TorchwiseError, match="did not return an nn.Module"):
        build_model("mynets:not_a_model", 2)
    with pytest.raises(TorchwiseError, match="not in that module"):
        build_model("mynets:missing", 2)
    with pytest.raises(TorchwiseError, match="Cannot import"):
        build_model("no_such_module_xyz:f", 2)
    sys.modules.pop("mynets", None)


def test_model_from_run_round_trip(tmp_path):
    from safetensors.torch import save_file

    model = build_model("smallcnn", 3, 1, (8, 8)).eval()
    (tmp_path / "final").mkdir()
    save_file(model.state_dict(), str(tmp_path / "final" / "model.safetensors"))
    meta = {"task": "image", "problem": "classification", "class_names": ["a", "b", "c"],
            "model": {"name": "smallcnn", "num_classes": 3, "in_channels": 1, "input_size": [8, 8]}}
    (tmp_path / "final" / "meta.json").write_text(json.dumps(meta))
    loaded, read = model_from_run(tmp_path)
    x = torch.randn(2, 1, 8, 8)
    assert read["class_names"] == ["a", "b", "c"] and not loaded.training
    assert torch.equal(loaded(x), model(x))
    with pytest.raises(CheckpointError):
        model_from_run(tmp_path / "nowhere")


def test_model_is_a_plain_module():
    assert isinstance(build_model("smallcnn", 2), nn.Module)


def test_frozen_backbone_keeps_batchnorm_statistics():
    model = build_model("resnet18", 3, freeze_backbone=True).train()
    before = model.bn1.running_mean.clone()
    model(torch.randn(4, 3, 32, 32) * 5 + 2)
    assert torch.equal(model.bn1.running_mean, before)


def test_a_user_model_whose_only_child_is_named_module_round_trips_through_a_run(tmp_path, monkeypatch):
    """`module` here is the user's own attribute (EMA-style wrappers name it so), not a DDP prefix."""
    from torchwise.weights import save_model

    (tmp_path / "wrapnets.py").write_text(
        "from torch import nn\n"
        "class Holder(nn.Module):\n"
        "    def __init__(self, num_classes, in_channels):\n"
        "        super().__init__()\n"
        "        self.module = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 16, num_classes))\n"
        "    def forward(self, x):\n"
        "        return self.module(x)\n"
        "def holder(num_classes, in_channels):\n"
        "    return Holder(num_classes, in_channels)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_model("wrapnets:holder", 3, in_channels=1).eval()
    save_model(model, tmp_path / "run" / "final" / "model.safetensors")
    meta = {"task": "image", "problem": "classification", "class_names": ["a", "b", "c"],
            "model": {"name": "wrapnets:holder", "num_classes": 3, "in_channels": 1, "input_size": [4, 4]}}
    (tmp_path / "run" / "final" / "meta.json").write_text(json.dumps(meta))
    loaded, _ = model_from_run(tmp_path / "run")
    x = torch.randn(2, 1, 4, 4)
    assert torch.equal(loaded(x), model(x))
    again = build_model("wrapnets:holder", 3, in_channels=1, weights=str(tmp_path / "run" / "final" / "model.safetensors"))
    assert torch.equal(again.module[1].weight, model.module[1].weight)
    sys.modules.pop("wrapnets", None)
