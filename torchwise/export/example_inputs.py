"""The example inputs every exporter traces with (ONNX, TorchScript, pt2), and their dynamic axes.

One place for what the three formats share: inputs as a tuple, a detached CPU copy with a batch of
at least two (torch.export freezes a dimension of size 1 into a constant), and the torch.export
dynamic shapes (batch, and optionally height/width). Torch is imported inside the functions.
"""
from __future__ import annotations

from typing import Any


def as_tuple(example_input: Any) -> tuple:
    if isinstance(example_input, (tuple, list)):
        return tuple(example_input)
    return (example_input,)


def at_least_two(inputs: tuple) -> tuple:
    # torch.export specializes a dimension of size 1 to a constant; an example batch of 1 would
    # silently freeze the batch axis, so duplicate it.
    import torch

    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] == 1:
            t = torch.cat([t, t], dim=0)
        out.append(t)
    return tuple(out)


def cpu_example(example_input: Any) -> tuple:
    """The example as a tuple of detached CPU tensors (other values as they are), batch at least two."""
    import torch

    return at_least_two(tuple(t.detach().cpu() if isinstance(t, torch.Tensor) else t
                              for t in as_tuple(example_input)))


def dynamic_shapes_for(inputs: tuple, *, dynamic_batch: bool, dynamic_spatial: bool):
    import torch
    from torch.export import Dim

    batch = Dim("batch", min=1, max=1 << 20) if dynamic_batch else None
    shapes = []
    for t in inputs:
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            shapes.append(None)
            continue
        spec: dict[int, Any] = {}
        if batch is not None:
            spec[0] = batch
        if dynamic_spatial and t.dim() >= 3:
            names = ["height", "width"] if t.dim() == 4 else ["length"]
            for axis, name in zip(range(2, t.dim()), names):
                spec[axis] = Dim(name, min=2, max=1 << 16)
        shapes.append(spec or None)
    return tuple(shapes)
