"""cudnn.benchmark only where it pays: convolutions fed fixed input shapes.

Benchmark mode times every convolution algorithm the first time it meets an input shape and keeps
the fastest. With fixed shapes that one search buys 5-20% for the rest of the run. With shapes that
keep changing (images of different sizes, texts padded to each batch's longest) it searches again
for every new shape, and the run gets slower instead; the seed article's advice is to leave it off
then. The Trainer turns it on (fast kernels) and lets this watch turn it off once the samples
(the inputs without their batch dimension) have shown more than `limit` different shapes. The batch
dimension is left out: a short last batch and the halved micro-batches of on_oom="adapt" add a
bounded few searches, not one per step. A data set bucketed into a few sizes stays under the limit
too (each bucket is searched once and cached).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchwise.models.structure import has_convolutions


LIMIT = 8  # more different sample shapes than this, and benchmark mode searches more than it saves
SAMPLE_SHAPES_KEPT = 1000  # distinct per-sample input shapes the checker remembers (it needs LIMIT + 1 to judge)


class ShapeWatch:
    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self.shapes: dict[tuple, None] = {}  # a dict keeps the order they were first seen, for the message
        self.batches = 0
        self.tripped = False

    def see(self, inputs: tuple[Any, ...]) -> str | None:
        """Record one batch's input shapes. Returns, once, why benchmark mode should go off."""
        if self.tripped:
            return None
        self.batches += 1
        key = sample_shape_key(inputs)
        if key in self.shapes:
            return None
        self.shapes[key] = None
        if len(self.shapes) <= self.limit:
            return None
        self.tripped = True
        examples = ", ".join(show_shape(k) for k in list(self.shapes)[:3])
        return (f"the training inputs change shape ({len(self.shapes)} different sample shapes in {self.batches} "
                f"batches, e.g. {examples}), so cudnn.benchmark is switched off: it would search the convolution "
                f"algorithms again for every new shape. Resize or pad the inputs to a few fixed sizes to keep it")


def sample_shape_key(inputs: tuple[Any, ...]) -> tuple:
    """The shapes of a batch's tensor inputs without their batch dimension: what benchmark mode keys on,
    less the batch size (a short last batch is not a new shape)."""
    return tuple(tuple(x.shape[1:]) for x in inputs if isinstance(x, torch.Tensor))


def wanted(model: nn.Module, device: torch.device) -> bool:
    """Only a CUDA run with convolutions and benchmark mode on has anything to lose."""
    return (device.type == "cuda" and torch.backends.cudnn.benchmark
            and has_convolutions(model))


def show_shape(key: tuple) -> str:
    """((3, 16, 40),) -> '3x16x40'; several inputs -> '(3x16x40, 5)'."""
    shapes = ["x".join(map(str, s)) or "scalar" for s in key]
    return shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
