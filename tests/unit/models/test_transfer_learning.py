"""Transfer learning from a LOCAL pretrained weights file, for torchvision and timm models.

The files are real state dicts of randomly initialised models with their original 1000-class head
(what an ImageNet checkpoint looks like); the models are built for the task's classes and must take
every backbone tensor bit for bit, skip and name the head's, and refuse anything else that does not fit.
"""
from __future__ import annotations

import sys

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from torchwise.errors import CheckpointError, TorchwiseError
from torchwise.models import backbone_parameters, build_model, check_model_name, classification_head, head_parameters, param_groups, timm_input
from testkit.pretrained_files import imagenet_file


pytest.importorskip("timm")


def said(log: list[str]) -> str:
    assert len(log) == 1, log
    return log[0]


def assert_backbone_is_the_file(model: nn.Module, state: dict, head: tuple[str, ...]) -> None:
    own = model.state_dict()
    backbone = [k for k in state if not k.startswith(head)]
    assert backbone and len(backbone) == len([k for k in own if not k.startswith(head)])
    for key in backbone:
        assert own[key].dtype == state[key].dtype and torch.equal(own[key], state[key]), key


@pytest.mark.parametrize("kind", ["safetensors", "pth"])
def test_torchvision_backbone_is_loaded_bit_for_bit_and_the_head_skipped_and_said(kind, tmp_path):
    path, state = imagenet_file(tmp_path, "resnet18", kind)
    log: list[str] = []
    model = build_model("resnet18", 5, weights=str(path), log=log.append)
    assert_backbone_is_the_file(model, state, ("fc.",))
    assert model.fc.weight.shape == (5, 512) and model.fc.bias.shape == (5,)
    text = said(log)
    assert "120 tensors loaded" in text and str(path) in text
    assert "fc.weight: file (1000, 512), model (5, 512)" in text and "fc.bias: file (1000,), model (5,)" in text


@pytest.mark.parametrize("name, head", [("timm:resnet18", "fc."), ("timm:convnext_atto", "head.fc.")])
def test_timm_backbone_is_loaded_bit_for_bit_and_the_head_skipped_and_said(name, head, tmp_path):
    path, state = imagenet_file(tmp_path, name)
    log: list[str] = []
    model = build_model(name, 5, weights=str(path), log=log.append).eval()
    assert model.num_classes == 5 and classification_head(model)[0] == head.rstrip(".")
    assert_backbone_is_the_file(model, state, (head,))
    assert f"{head}weight: file (1000, " in said(log) and f"{head}bias: file (1000,), model (5,)" in said(log)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 5)


@pytest.mark.filterwarnings("ignore:The default weight initialization of GoogleNet")
def test_auxiliary_classifiers_are_skipped_with_the_head(tmp_path):
    """googlenet's aux1/aux2 map to classes too: shaped for 1000 in the file, for the task's in the model."""
    path, state = imagenet_file(tmp_path, "googlenet")
    log: list[str] = []
    model = build_model("googlenet", 5, weights=str(path), log=log.append)
    assert model.aux1.fc2.out_features == 5 and "the head's 6 skipped" in said(log)
    assert "aux2.fc2.weight: file (1000, 1024), model (5, 1024)" in said(log)
    assert torch.equal(model.aux1.fc1.weight, state["aux1.fc1.weight"])


def test_a_file_whose_head_already_fits_is_loaded_whole(tmp_path):
    torch.manual_seed(3)
    source = build_model("timm:resnet18", 5)
    save_file(source.state_dict(), str(tmp_path / "five.safetensors"))
    log: list[str] = []
    model = build_model("timm:resnet18", 5, weights=str(tmp_path / "five.safetensors"), log=log.append)
    assert torch.equal(model.fc.weight, source.fc.weight) and "skipped" not in said(log)


def test_wrapper_prefixes_and_nesting_are_recognised(tmp_path):
    path, state = imagenet_file(tmp_path, "timm:resnet18")
    torch.save({"state_dict": {"module." + k: v for k, v in state.items()}, "epoch": 90}, tmp_path / "ddp.pth")
    torch.save({"state_dict": {"model." + k: v for k, v in state.items()}}, tmp_path / "holder.pth")
    torch.save({"model": {"_orig_mod." + k: v for k, v in state.items()}}, tmp_path / "compiled.pth")
    for name in ("ddp.pth", "holder.pth", "compiled.pth"):
        model = build_model("timm:resnet18", 5, weights=str(tmp_path / name), log=lambda _: None)
        assert_backbone_is_the_file(model, state, ("fc.",))


def test_a_grayscale_stem_gets_the_pretrained_filters_averaged(tmp_path):
    path, state = imagenet_file(tmp_path, "timm:resnet18")
    model = build_model("timm:resnet18", 5, in_channels=1, weights=str(path), log=lambda _: None).eval()
    expected = state["conv1.weight"].mean(dim=1, keepdim=True) * 3  # one channel carries what R, G and B did
    assert torch.allclose(model.conv1.weight, expected) and model.conv1.in_channels == 1
    assert model(torch.randn(2, 1, 32, 32)).shape == (2, 5)


def test_a_file_of_another_architecture_is_refused_with_its_keys(tmp_path):
    path, _ = imagenet_file(tmp_path, "timm:convnext_atto")
    with pytest.raises(CheckpointError, match="does not match this architecture") as info:
        build_model("timm:resnet18", 5, weights=str(path))
    values = info.value.values
    assert "conv1.weight" in values["missing keys"] and values["unexpected keys"]
    assert all(k.startswith(("stem.", "stages.", "head.")) for k in values["unexpected keys"])
    assert values["likely cause"] == "the file comes from a different model architecture"
    assert "--model timm:resnet18" in info.value.fix


def test_a_wrong_shape_outside_the_head_and_a_missing_backbone_tensor_are_refused(tmp_path):
    _, state = imagenet_file(tmp_path, "resnet18")
    bad = dict(state)
    bad["layer1.0.conv1.weight"] = torch.zeros(64, 64, 5, 5)
    save_file(bad, str(tmp_path / "shape.safetensors"))
    with pytest.raises(CheckpointError) as info:
        build_model("resnet18", 5, weights=str(tmp_path / "shape.safetensors"))
    assert info.value.values["shape mismatches"] == ["layer1.0.conv1.weight: file (64, 64, 5, 5) vs model (64, 64, 3, 3)"]
    assert "fc.weight" not in str(info.value)  # the head's shapes are not a mismatch
    partial = {k: v for k, v in state.items() if k != "layer4.1.bn2.weight"}
    save_file(partial, str(tmp_path / "partial.safetensors"))
    with pytest.raises(CheckpointError) as info:
        build_model("resnet18", 5, weights=str(tmp_path / "partial.safetensors"))
    assert info.value.values["missing keys"] == ["layer4.1.bn2.weight"]


def test_a_truncated_file_is_refused_before_anything_is_loaded(tmp_path):
    path, _ = imagenet_file(tmp_path, "timm:resnet18")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        build_model("timm:resnet18", 5, weights=str(path))
    torch.save(load_file(str(imagenet_file(tmp_path, "resnet18")[0])), tmp_path / "r.pth")
    cut = tmp_path / "r.pth"
    cut.write_bytes(cut.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="truncated"):
        build_model("resnet18", 5, weights=str(cut))


def test_timm_names_are_checked_with_did_you_mean_and_never_fetched():
    check_model_name("timm:resnet18")
    with pytest.raises(TorchwiseError, match="Unknown timm model") as info:
        check_model_name("timm:resnet1")
    assert info.value.values["did you mean"].startswith("timm:resnet")
    with pytest.raises(TorchwiseError, match="registry"):
        build_model("timm:hf-hub:timm/resnet18.a1_in1k", 5)


def test_timm_input_is_what_the_pretrained_weights_were_trained_with():
    assert timm_input("timm:vit_tiny_patch16_224") == (224, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    side, mean, _ = timm_input("timm:resnet18")
    assert side == 224 and mean == pytest.approx([0.485, 0.456, 0.406])


def test_a_missing_timm_is_named_with_the_package_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # what an environment without timm gives: ImportError
    with pytest.raises(TorchwiseError, match="needs the timm package") as info:
        build_model("timm:resnet18", 5)
    assert "pip install timm" in info.value.fix
    with pytest.raises(TorchwiseError, match="needs the timm package"):
        timm_input("timm:resnet18")


@pytest.mark.parametrize("name, head", [("timm:convnext_atto", "head.fc"), ("resnet18", "fc"),
                                        ("mobilenet_v3_small", "classifier.3"), ("smallcnn", "head.2")])
def test_head_and_backbone_parameters_split_the_model(name, head):
    model = build_model(name, 4)
    assert classification_head(model)[0] == head
    heads, rest = head_parameters(model), backbone_parameters(model)
    assert [id(p) for p in heads] == [id(p) for p in model.get_submodule(head).parameters()]
    assert {id(p) for p in heads} | {id(p) for p in rest} == {id(p) for p in model.parameters()}
    assert not {id(p) for p in heads} & {id(p) for p in rest}


def test_param_groups_give_the_backbone_a_scaled_rate():
    model = build_model("timm:resnet18", 3)
    groups = param_groups(model, 1e-3, 0.1)
    assert [(g["name"], g["lr"]) for g in groups] == [("head", 1e-3), ("backbone", pytest.approx(1e-4))]
    assert [id(p) for p in groups[0]["params"]] == [id(model.fc.weight), id(model.fc.bias)]
    assert len(groups[1]["params"]) == len(list(model.parameters())) - 2
    optimizer = torch.optim.AdamW(groups)
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, pytest.approx(1e-4)]


def test_param_groups_with_scale_zero_freeze_the_backbone():
    torch.manual_seed(0)
    model = build_model("timm:resnet18", 3).train()
    groups = param_groups(model, 1e-2, 0.0)
    assert [g["name"] for g in groups] == ["head"]
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["fc.weight", "fc.bias"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(groups)
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32) * 3 + 1), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    optimizer.step()
    after = model.state_dict()
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]) and not k.endswith("num_batches_tracked"))
    # the head learned; nothing of the backbone moved, its BatchNorm statistics included
    assert changed == ["fc.bias", "fc.weight"]
    assert all(p.grad is None for p in backbone_parameters(model))


def test_param_groups_refuse_a_bad_rate_or_scale():
    model = build_model("smallcnn", 2)
    with pytest.raises(TorchwiseError, match="backbone_lr_scale"):
        param_groups(model, 1e-3, -0.5)
    with pytest.raises(TorchwiseError, match="learning rate"):
        param_groups(model, 0, 0.1)
