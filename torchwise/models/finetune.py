"""The classic fine-tuning recipe: a new head learns at the full rate, the pretrained backbone slower or not at all.

    optimizer = torch.optim.AdamW(param_groups(model, lr=1e-3, backbone_lr_scale=0.1))

The head is the one heads.py finds (the layer build_model replaced for the task's classes).
"""
from __future__ import annotations

from typing import Any

from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.models.heads import head_modules


def head_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of the classification head (each once, in module order)."""
    seen: set[int] = set()
    out = []
    for _, module in head_modules(model):
        for param in module.parameters():
            if id(param) not in seen:
                seen.add(id(param))
                out.append(param)
    return out


def backbone_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter of the model that is not the head's (a weight shared with the head counts as the head's)."""
    head = {id(p) for p in head_parameters(model)}
    return [p for p in model.parameters() if id(p) not in head]


def freeze_backbone(model: nn.Module) -> None:
    """Train only the head: every other parameter stops receiving gradients, and BatchNorm layers
    outside the head keep their running statistics."""
    head = {id(p) for p in head_parameters(model)}
    for param in model.parameters():
        param.requires_grad_(id(param) in head)
    # A frozen backbone must stay as loaded, but BatchNorm updates its running statistics in train
    # mode (which the Trainer sets), so a few batches of a small data set would silently overwrite
    # the pretrained ones. momentum=0 keeps them: running = (1 - 0) * running + 0 * batch.
    in_head = {id(m) for _, h in head_modules(model) for m in h.modules()}
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and id(module) not in in_head:
            module.momentum = 0.0


def param_groups(model: nn.Module, lr: float, backbone_lr_scale: float = 1.0) -> list[dict[str, Any]]:
    """Optimizer parameter groups: the head at `lr`, the backbone at `lr * backbone_lr_scale`.

    A scale of 0 freezes the backbone (freeze_backbone: no gradients, BatchNorm statistics kept)
    rather than giving it a learning rate of 0, which would still compute its gradients, let weight
    decay shrink it and let BatchNorm move. Parameters already frozen (requires_grad False) stay out
    of the groups, and a group with nothing to train is left out."""
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or lr <= 0:
        raise TorchwiseError("The learning rate must be a positive number.", values={"lr": lr}, fix="e.g. lr=1e-3")
    if not isinstance(backbone_lr_scale, (int, float)) or isinstance(backbone_lr_scale, bool) or backbone_lr_scale < 0:
        raise TorchwiseError("backbone_lr_scale must be a number >= 0.", values={"backbone_lr_scale": backbone_lr_scale},
                             fix="use e.g. 0.1 (the backbone learns 10x slower than the head), 0 to freeze it, "
                                 "1 for one rate")
    if backbone_lr_scale == 0:
        freeze_backbone(model)
    groups = [{"name": "head", "params": [p for p in head_parameters(model) if p.requires_grad], "lr": float(lr)},
              {"name": "backbone", "params": [p for p in backbone_parameters(model) if p.requires_grad],
               "lr": float(lr) * float(backbone_lr_scale)}]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise TorchwiseError("The model has no trainable parameters to optimize.",
                             values={"model": type(model).__name__, "parameters": sum(1 for _ in model.parameters())},
                             fix="unfreeze the head (requires_grad_(True)) or build the model again")
    return groups
