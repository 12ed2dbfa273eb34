"""Model factory: built-in small models, torchvision architectures, or the user's own callable.

    build_model("smallcnn", num_classes=10, in_channels=1)
    build_model("resnet18", num_classes=5, weights="resnet18-imagenet.pth", freeze_backbone=True)
    build_model("mypkg.nets:make_net", num_classes=3)
    model, meta = model_from_run("runs/exp1")

torchvision models are always built with weights=None: nothing is ever downloaded. Pretrained
weights come only from a LOCAL file given with `weights=`; they are loaded into the
architecture's original shape first, and the classification head is replaced afterwards, so an
ImageNet state dict (1000 classes) fits a 5-class model.
"""
from __future__ import annotations

import importlib
import inspect
import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchwise.errors import CheckpointError, TorchwiseError

BUILTIN = ("smallcnn", "mlp")


class SmallCNN(nn.Module):
    """Three conv blocks (conv-BN-ReLU x2) with pooling while the map is still large, then global
    average pooling: fine for 8x8 digits up to ~64x64 images, in a few seconds per epoch on a CPU."""

    def __init__(self, in_channels: int, num_classes: int, input_size: tuple[int, int] | None = None,
                 widths: tuple[int, ...] = (32, 64, 128), dropout: float = 0.1):
        super().__init__()
        side = min(input_size) if input_size else 32
        layers: list[nn.Module] = []
        channels = in_channels
        for width in widths:
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                       nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            if side >= 4:  # stop halving at 2x2: smaller maps throw away the spatial layout
                layers.append(nn.MaxPool2d(2))
                side //= 2
            channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(channels, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))


class MLP(nn.Module):
    """Flatten -> (Linear-LayerNorm-ReLU-Dropout) x len(hidden) -> Linear: tabular data and tiny images.

    LayerNorm rather than BatchNorm: the last batch of an epoch may hold a single row, which
    BatchNorm1d rejects in training mode."""

    def __init__(self, in_features: int, num_classes: int, hidden: tuple[int, ...] = (256, 128),
                 dropout: float = 0.1):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            width = size
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def torchvision_names() -> list[str]:
    from torchvision import models as tvm

    return sorted(tvm.list_models(module=tvm))


def check_model_name(name: str) -> None:
    """Refuse a model name that build_model cannot build (with did-you-mean), before any data is read.
    A `pkg.module:callable` is checked when it is imported."""
    if ":" not in name and name not in BUILTIN and name not in torchvision_names():
        raise _unknown_model(name)


def _unknown_model(name: str) -> TorchwiseError:
    import difflib

    names = list(BUILTIN) + torchvision_names()
    guess = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    values: dict[str, Any] = {"model": name, "built in": ", ".join(BUILTIN),
                              "torchvision": ", ".join(n for n in names if n not in BUILTIN)}
    if guess:
        values["did you mean"] = guess[0]
    return TorchwiseError("Unknown model name.", values=values,
                          fix=(f"use --model {guess[0]}" if guess else "use one of the names listed")
                          + ", or 'package.module:function' for your own model")


def _parent_and_attr(model: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    parent = model
    *path, last = dotted.split(".")
    for part in path:
        parent = getattr(parent, part)
    return parent, last


def classification_head(model: nn.Module) -> tuple[str, nn.Linear]:
    """The last nn.Linear in module order: resnet.fc, mobilenet/efficientnet classifier[-1],
    vit heads.head, convnext classifier[2], ... (the layer that maps features to classes)."""
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not found:
        raise TorchwiseError("This model has no Linear classification layer to replace.",
                             values={"model": type(model).__name__},
                             fix="use a classification architecture, or your own model via pkg.module:callable")
    return found[-1]


def _replace_head(model: nn.Module, num_classes: int) -> None:
    name, head = classification_head(model)
    if head.out_features == num_classes:
        return
    parent, attr = _parent_and_attr(model, name)
    setattr(parent, attr, nn.Linear(head.in_features, num_classes, bias=head.bias is not None))


def _adapt_first_conv(model: nn.Module, in_channels: int) -> None:
    """Give a 3-channel stem `in_channels` inputs; pretrained filters are averaged over RGB so a
    grayscale image gets the response an RGB image of the same intensity would."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            if module.in_channels == in_channels:
                return
            new = nn.Conv2d(in_channels, module.out_channels, module.kernel_size, module.stride, module.padding,
                            module.dilation, module.groups, module.bias is not None, module.padding_mode)
            with torch.no_grad():
                mean = module.weight.mean(dim=1, keepdim=True)
                new.weight.copy_(mean.expand(-1, in_channels, -1, -1) * (3.0 / in_channels))
                if module.bias is not None:
                    new.bias.copy_(module.bias)
            parent, attr = _parent_and_attr(model, name)
            setattr(parent, attr, new)
            return


def _read_weights(path: str) -> dict[str, torch.Tensor]:
    from torchwise.weights import load_state_dict  # the one place that opens weight files

    return load_state_dict(path)


def _load_pretrained(model: nn.Module, path: str) -> None:
    """Load a local state dict; the head may differ (it is replaced next), nothing else may."""
    state = _read_weights(path)
    from torchwise.weights import strip_wrapper_prefixes

    state = strip_wrapper_prefixes(state, model)  # only where a wrapper put a prefix: matched to the model's keys
    own = model.state_dict()
    head_name, _ = classification_head(model)
    mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape
                  and not k.startswith(head_name + ".")]
    missing = [k for k in own if k not in state and not k.startswith(head_name + ".")]
    unexpected = [k for k in state if k not in own]
    if mismatched or missing or unexpected:
        raise CheckpointError(
            "The weights file does not match this architecture.",
            values={"file": path, "model": type(model).__name__, "missing keys": missing[:8],
                    "unexpected keys": unexpected[:8],
                    "shape mismatches": [f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
                                         for k in mismatched[:8]]},
            fix="pass weights saved from the same architecture (--model must match the file)")
    head_ok = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(head_ok, strict=False)


def _freeze_all_but_head(model: nn.Module) -> None:
    head_name, head = classification_head(model)
    for param in model.parameters():
        param.requires_grad_(False)
    for param in head.parameters():
        param.requires_grad_(True)
    # A frozen backbone must stay as loaded, but BatchNorm updates its running statistics in train
    # mode (which the Trainer sets), so a few batches of a small data set would silently overwrite
    # the pretrained ones. momentum=0 keeps them: running = (1 - 0) * running + 0 * batch.
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module is not head:
            module.momentum = 0.0


def _user_model(spec: str, num_classes: int, in_channels: int, input_size: tuple[int, int] | None) -> nn.Module:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TorchwiseError("Cannot import the module of your model.", values={"model": spec, "error": str(exc)},
                             fix="make the module importable (pip install -e . or set PYTHONPATH) "
                                 "and write --model package.module:function") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise TorchwiseError("The model callable is not in that module.",
                             values={"model": spec, "module has": [n for n in dir(module) if not n.startswith("_")][:30]},
                             fix="write --model package.module:function with a function or nn.Module class")
    offered = {"num_classes": num_classes, "in_channels": in_channels, "input_size": input_size}
    try:
        params = inspect.signature(factory).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = offered if takes_any else {k: v for k, v in offered.items() if k in params}
    except (TypeError, ValueError):
        kwargs = {"num_classes": num_classes}
    model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise TorchwiseError("Your model callable did not return an nn.Module.",
                             values={"model": spec, "returned": type(model).__name__},
                             fix="return the model instance from the function")
    return model


def build_model(name: str, num_classes: int, in_channels: int = 3, input_size: tuple[int, int] | None = None,
                weights: str | None = None, freeze_backbone: bool = False) -> nn.Module:
    """A model mapping inputs of `in_channels` x `input_size` (or `in_channels` features) to `num_classes` outputs."""
    if num_classes < 1:
        raise TorchwiseError("A model needs at least one output.", values={"num_classes": num_classes},
                             fix="check the data: a classification task needs two or more classes")
    input_size = tuple(input_size) if input_size else None  # type: ignore[assignment]
    if ":" in name:
        model = _user_model(name, num_classes, in_channels, input_size)
        if weights:
            _load_pretrained(model, weights)
    elif name == "smallcnn":
        model = SmallCNN(in_channels, num_classes, input_size)
        if weights:
            _load_pretrained(model, weights)
    elif name == "mlp":
        features = in_channels * (math.prod(input_size) if input_size else 1)
        model = MLP(features, num_classes)
        if weights:
            _load_pretrained(model, weights)
    else:
        from torchvision import models as tvm

        if name not in torchvision_names():
            raise _unknown_model(name)
        if weights:
            model = tvm.get_model(name, weights=None)  # original shape, so the file's keys fit
            _load_pretrained(model, weights)
        else:
            model = tvm.get_model(name, weights=None, num_classes=num_classes)
        if in_channels != 3:
            _adapt_first_conv(model, in_channels)
    _replace_head(model, num_classes)
    if freeze_backbone:
        _freeze_all_but_head(model)
    return model


def read_meta(run_dir: str | Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    for candidate in (run_dir / "final" / "meta.json", run_dir / "meta.json"):
        if candidate.is_file():
            return json.loads(candidate.read_text())
    raise CheckpointError("This is not a torchwise run directory (no final/meta.json).",
                          values={"path": str(run_dir)},
                          fix="pass the --out directory of a `torchwise train` run")


def model_from_run(run_dir: str | Path, weights_file: str | Path | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """(model in eval mode with the run's final weights, or `weights_file`; the run's meta.json)."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    kwargs = dict(meta["model"])
    kwargs.pop("weights", None)
    kwargs.pop("freeze_backbone", None)
    model = build_model(**kwargs)
    path = Path(weights_file) if weights_file else run_dir / "final" / "model.safetensors"
    if not path.exists():
        raise CheckpointError("The run has no final weights yet.", values={"looked for": str(path)},
                              fix="let the training finish, or pass --checkpoint RUN/checkpoints/step-...")
    state = _read_weights(str(path))
    from torchwise.weights import strip_wrapper_prefixes

    state = strip_wrapper_prefixes(state, model)  # only where a wrapper put a prefix: matched to the model's keys
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError("The weights do not fit the model recorded in meta.json.",
                              values={"weights": str(path), "missing": result.missing_keys[:8],
                                      "unexpected": result.unexpected_keys[:8]},
                              fix="use weights from this run (its final/ or checkpoints/ folder)")
    return model.eval(), meta
