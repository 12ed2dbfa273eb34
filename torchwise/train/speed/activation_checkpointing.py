"""Gradient checkpointing switch: `enable_checkpointing(model)` trades compute for activation memory.

Each block's forward runs under `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`:
its inner activations are dropped after the forward and recomputed during backward, so only the
blocks' inputs stay alive. Blocks are found automatically:

- repeated blocks: the children of an `nn.ModuleList`/`nn.Sequential` that are themselves made
  of layers (transformer layers, ResNet stages' BasicBlocks, ...);
- otherwise a flat `nn.Sequential` of single layers (a plain CNN) is cut into about sqrt(n)
  segments, never starting a segment with an in-place layer.

The model is not restructured: forwards are swapped on the instances, so state_dict keys,
parameters and hooks stay as they were, and `handle.remove()` switches it off again. In eval mode
or under no_grad the original forward runs (there is nothing to save).

BatchNorm inside a checkpointed block would update its running statistics twice (once in the
forward, once in the recomputation); the recomputation here restores them, so training with and
without checkpointing gives the same model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from torchwise.errors import TorchwiseError


@dataclass
class CheckpointHandle:
    model: nn.Module
    names: list[str]                       # the checkpointed blocks (or "name[i:j]" segments)
    patched: list[nn.Module] = field(default_factory=list)

    def remove(self) -> None:
        for module in self.patched:
            module.__dict__.pop("forward", None)
        self.patched.clear()


def _batchnorms(modules: Iterable[nn.Module]) -> list[nn.Module]:
    return [m for mod in modules for m in mod.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def _run_checkpointed(fn: Callable[..., Any], bns: list[nn.Module], *args: Any, **kwargs: Any) -> Any:
    calls = [0]

    def body(*a: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1 or not bns:
            return fn(*a, **kw)
        saved = [(m, m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in bns
                 if m.training]
        try:
            return fn(*a, **kw)
        finally:  # the recomputation must not count the batch a second time
            with torch.no_grad():
                for m, mean, var, count in saved:
                    m.running_mean.copy_(mean)
                    m.running_var.copy_(var)
                    m.num_batches_tracked.copy_(count)

    return checkpoint(body, *args, use_reentrant=False, **kwargs)


def _patch_block(block: nn.Module) -> None:
    original = type(block).forward.__get__(block)
    bns = _batchnorms([block])

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not (torch.is_grad_enabled() and block.training):
            return original(*args, **kwargs)
        return _run_checkpointed(original, bns, *args, **kwargs)

    block.forward = forward  # instance attribute: wins over the class's forward, leaves state_dict alone


def _patch_segments(seq: nn.Sequential, segments: int) -> list[tuple[int, int]]:
    layers = list(seq)
    size = max(1, math.ceil(len(layers) / segments))
    bounds, start = [], 0
    while start < len(layers):
        end = min(len(layers), start + size)
        while end < len(layers) and getattr(layers[end], "inplace", False):
            end += 1  # an in-place layer would overwrite the segment input that checkpoint keeps
        bounds.append((start, end))
        start = end
    groups = [(layers[a:b], _batchnorms(layers[a:b])) for a, b in bounds]
    original = type(seq).forward.__get__(seq)

    def run_group(group: list[nn.Module]) -> Callable[[Any], Any]:
        def run(x: Any) -> Any:
            for layer in group:
                x = layer(x)
            return x
        return run

    def forward(x: Any) -> Any:
        if not (torch.is_grad_enabled() and seq.training):
            return original(x)
        for group, bns in groups:
            x = _run_checkpointed(run_group(group), bns, x)
        return x

    seq.forward = forward
    return bounds


def find_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Top-most containers' children that are blocks (have sub-layers), searched top-down."""
    found: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, module: nn.Module) -> None:
        children = list(module.named_children())
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(children) >= 2 and \
                sum(1 for _, c in children if any(True for _ in c.children())) >= 2:
            found.extend((f"{prefix}{n}", c) for n, c in children if any(True for _ in c.children()))
            return
        for name, child in children:
            visit(f"{prefix}{name}.", child)

    visit("", model)
    return found


def _flat_sequentials(model: nn.Module) -> list[tuple[str, nn.Sequential]]:
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.Sequential) and len(m) >= 4 and all(not list(c.children()) for c in m)]


def enable_checkpointing(model: nn.Module, blocks: str | list[str] = "auto", segments: int | None = None
                         ) -> CheckpointHandle:
    """Checkpoint `blocks` ("auto", or a list of module names) of `model`; returns a handle whose
    .remove() switches it off."""
    handle = CheckpointHandle(model, [])
    modules = dict(model.named_modules())
    if blocks == "auto":
        chosen = find_blocks(model)
        if not chosen:
            flats = _flat_sequentials(model)
            if not flats:
                raise TorchwiseError("No blocks to checkpoint were found in this model.",
                                     values={"model": type(model).__name__},
                                     fix="Pass the block names: enable_checkpointing(model, blocks=['encoder.0', "
                                         "'encoder.1']); blocks are modules whose forward is worth recomputing.")
            for name, seq in flats:
                bounds = _patch_segments(seq, segments or max(2, round(math.sqrt(len(seq)))))
                handle.patched.append(seq)
                handle.names += [f"{name}[{a}:{b}]" for a, b in bounds]
            return handle
    else:
        missing = [n for n in blocks if n not in modules]
        if missing:
            raise TorchwiseError("Unknown block names.", values={"missing": missing,
                                                                 "some names": ", ".join(list(modules)[1:12])},
                                 fix="Use names from model.named_modules().")
        chosen = [(n, modules[n]) for n in blocks]
    for name, block in chosen:
        _patch_block(block)
        handle.patched.append(block)
        handle.names.append(name)
    return handle
