"""Small questions the checker asks about tensors and torch's state, cheaply and without side effects.

Shared by the watcher's hooks and the detectors (they import nothing of the checker from here).
"""
from __future__ import annotations

import math

import torch

_is_exporting = getattr(torch.compiler, "is_exporting", lambda: False)


def compiling() -> bool:
    """Inside torch.compile's, torch.export's or torch.jit.trace's tracing our hooks must do nothing: the
    tracer would try to trace them, and a forward made to trace a model is not training or evaluation."""
    return torch.compiler.is_compiling() or _is_exporting() or torch.jit.is_tracing()


def quiet():
    """Our own tensor operations inside hooks must not go through our TorchFunctionMode."""
    return torch._C.DisableTorchFunction()


def all_finite(t: torch.Tensor) -> bool:
    """Whether every value of `t` is finite. A sum is finite only if every value is (NaN and inf propagate;
    +inf and -inf make NaN), and on the CPU it is tens of times faster than isfinite(t).all(), which builds
    a bool tensor as large as t; only a sum that overflowed (or found a NaN/inf) is looked at value by value."""
    if not t.is_floating_point():
        return not t.is_complex() or bool(torch.isfinite(t).all())
    if t.numel() == 0:
        return True
    return math.isfinite(t.detach().sum().item()) or bool(torch.isfinite(t).all())


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast casts to on `device_type` right now, or None when autocast is off there."""
    try:
        if not torch.is_autocast_enabled(device_type):  # per device type since torch 2.4, our minimum
            return None
        return torch.get_autocast_dtype(device_type)
    except RuntimeError:  # a device type autocast does not know (meta)
        return None


def first_dense_input(args: tuple) -> torch.Tensor | None:
    """A forward's first dense tensor argument (or, when its first argument is a list or tuple, the first dense
    tensor in it): what a model's input is read from. A sparse one (a graph network's adjacency) has no data
    pointer and no rows to hash or take statistics of."""
    x = next((a for a in args if isinstance(a, torch.Tensor) and a.layout == torch.strided), None)
    if x is None and args and isinstance(args[0], (tuple, list)):
        x = next((a for a in args[0] if isinstance(a, torch.Tensor) and a.layout == torch.strided), None)
    return x
