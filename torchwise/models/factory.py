"""build_model: a model for the task by name (built in, torchvision, timm or the user's callable),
with its head for the task's classes and, optionally, pretrained weights from a local file."""
from __future__ import annotations

import importlib
import inspect
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from torch import nn

from torchwise.errors import CheckpointError, TorchwiseError
from torchwise.models.builtin import MLP, SmallCNN
from torchwise.models.finetune import freeze_backbone as freeze_all_but_head
from torchwise.models.heads import replace_head
from torchwise.models.input_channels import adapt_first_conv
from torchwise.models.names import model_family, timm_architecture, torchvision_names, unknown_model
from torchwise.models.pretrained import load_pretrained


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


def _timm_model(name: str) -> nn.Module:
    """timm's architecture with its own default head; pretrained=False always: timm would download."""
    from torchwise.models.names import import_timm

    return import_timm().create_model(timm_architecture(name), pretrained=False)


def _architecture(name: str, num_classes: int, in_channels: int, input_size: tuple[int, int] | None) -> nn.Module:
    family = model_family(name)
    if family == "timm":
        return _timm_model(name)
    if family == "user":
        return _user_model(name, num_classes, in_channels, input_size)
    if name == "smallcnn":
        return SmallCNN(in_channels, num_classes, input_size)
    if name == "mlp":
        return MLP(in_channels * (math.prod(input_size) if input_size else 1), num_classes)
    from torchvision import models as tvm

    if name not in torchvision_names():
        raise unknown_model(name)
    return tvm.get_model(name, weights=None, num_classes=num_classes)  # weights=None: nothing is downloaded


def _rank0_print(line: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(line)


def build_model(name: str, num_classes: int, in_channels: int = 3, input_size: tuple[int, int] | None = None,
                weights: str | None = None, freeze_backbone: bool = False,
                log: Callable[[str], None] | None = None) -> nn.Module:
    """A model mapping inputs of `in_channels` x `input_size` (or `in_channels` features) to `num_classes` outputs.

    In order: the architecture; its head for `num_classes` (timm's reset_classifier, else a new last
    Linear); the `weights` file (its backbone loaded, its head skipped where shaped for other classes,
    said through `log`, default print on rank 0); a torchvision/timm stem adapted to `in_channels`
    (from the loaded RGB filters); the backbone frozen if asked."""
    if num_classes < 1:
        raise TorchwiseError("A model needs at least one output.", values={"num_classes": num_classes},
                             fix="check the data: a classification task needs two or more classes")
    input_size = tuple(input_size) if input_size else None  # type: ignore[assignment]
    model = _architecture(name, num_classes, in_channels, input_size)
    replace_head(model, num_classes)
    if weights:
        loaded = load_pretrained(model, weights, num_classes=num_classes, model_name=name)
        (log or _rank0_print)(loaded.summary())
    if in_channels != 3 and model_family(name) in ("torchvision", "timm"):
        adapt_first_conv(model, in_channels)
    if freeze_backbone:
        freeze_all_but_head(model)
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
    from torchwise.weights import load_state_dict, strip_wrapper_prefixes

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
    state = strip_wrapper_prefixes(load_state_dict(str(path)), model)  # renamed only where a wrapper's prefix keeps a key from fitting
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError("The weights do not fit the model recorded in meta.json.",
                              values={"weights": str(path), "missing": result.missing_keys[:8],
                                      "unexpected": result.unexpected_keys[:8]},
                              fix="use weights from this run (its final/ or checkpoints/ folder)")
    return model.eval(), meta
