"""The classification head of a model: found, replaced for the task's classes, told apart from the backbone.

One rule finds the head everywhere (replacing it, loading pretrained weights around it, freezing
the backbone, the fine-tuning parameter groups), so they always agree on what the head is:

    timm models           model.get_classifier() (two layers for distilled models), replaced
                          through timm's own model.reset_classifier(num_classes)
    torchvision models    the last Linear of model.fc / classifier / heads (resnet.fc,
                          mobilenet classifier[-1], vit heads.head, convnext classifier[2], ...)
    any other model       its last nn.Linear in module order
"""
from __future__ import annotations

from torch import nn

from torchwise.errors import TorchwiseError

TORCHVISION_HEAD_ATTRS = ("fc", "classifier", "heads")


def is_timm_model(model: nn.Module) -> bool:
    """timm's classifier interface (every timm model has both methods)."""
    return callable(getattr(model, "get_classifier", None)) and callable(getattr(model, "reset_classifier", None))


def _last_linear(module: nn.Module, prefix: str = "") -> tuple[str, nn.Module] | None:
    found = [(name, m) for name, m in module.named_modules(prefix=prefix) if isinstance(m, nn.Linear)]
    return found[-1] if found else None


def _timm_heads(model: nn.Module) -> list[tuple[str, nn.Module]]:
    classifier = model.get_classifier()  # type: ignore[operator]
    wanted = list(classifier) if isinstance(classifier, (tuple, list)) else [classifier]
    names = {id(m): name for name, m in model.named_modules()}
    return [(names[id(m)], m) for m in wanted if isinstance(m, nn.Module) and id(m) in names]


def _torchvision_head(model: nn.Module) -> tuple[str, nn.Module] | None:
    if not type(model).__module__.startswith("torchvision."):
        return None
    for attr in TORCHVISION_HEAD_ATTRS:
        part = getattr(model, attr, None)
        if isinstance(part, nn.Module) and (found := _last_linear(part, attr)) is not None:
            return found
    return None


def head_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """[(dotted name, module)] of the layers that map features to classes (one, or two for timm's
    distilled models). A timm model whose head was removed (num_classes=0) has none."""
    if is_timm_model(model):
        return _timm_heads(model)
    found = _torchvision_head(model) or _last_linear(model)
    if found is None:
        raise TorchwiseError("This model has no Linear classification layer to replace.",
                             values={"model": type(model).__name__},
                             fix="use a classification architecture, or your own model via pkg.module:callable")
    return [found]


def classification_head(model: nn.Module) -> tuple[str, nn.Module]:
    """(dotted name, module) of the model's (first) classification layer."""
    heads = head_modules(model)
    if not heads:
        raise TorchwiseError("This timm model has no classifier (it was built with num_classes=0).",
                             values={"model": type(model).__name__},
                             fix="build it with the number of classes of the task")
    return heads[0]


def head_prefixes(model: nn.Module) -> tuple[str, ...]:
    """'fc.', 'head.fc.', ...: the state-dict key prefixes of the head's tensors."""
    return tuple(name + "." for name, _ in head_modules(model))


def _parent_and_attr(model: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    parent = model
    *path, last = dotted.split(".")
    for part in path:
        parent = getattr(parent, part)
    return parent, last


def replace_head(model: nn.Module, num_classes: int) -> None:
    """Give the model `num_classes` outputs: a new, freshly initialised head where the old one has
    another number of outputs (a head that already fits is kept, with whatever it was loaded with)."""
    if is_timm_model(model):
        if getattr(model, "num_classes", None) != num_classes:
            model.reset_classifier(num_classes)  # type: ignore[operator]
        return
    name, head = classification_head(model)
    if not isinstance(head, nn.Linear) or head.out_features == num_classes:
        return
    parent, attr = _parent_and_attr(model, name)
    setattr(parent, attr, nn.Linear(head.in_features, num_classes, bias=head.bias is not None))
