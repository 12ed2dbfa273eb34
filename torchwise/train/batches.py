"""What a batch looks like to the Trainer, and moving it to the device."""
from __future__ import annotations

from typing import Any

import torch

from torchwise.errors import TorchwiseError


def move_to(obj: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to(o, device, non_blocking) for o in obj)
    if isinstance(obj, dict):
        return {k: move_to(v, device, non_blocking) for k, v in obj.items()}
    return obj


def split_batch(batch: Any) -> tuple[tuple[Any, ...], Any]:
    """(inputs, target) from `(x, y)`, `(x1, x2, ..., y)` or `{"input": x, "target": y}`."""
    if isinstance(batch, dict):
        if "input" in batch and "target" in batch:
            inputs = batch["input"]
            return (tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)), batch["target"]
        raise TorchwiseError("A dict batch needs 'input' and 'target' keys.", values={"keys": sorted(batch)},
                             fix="Return {'input': x, 'target': y} from the data set, or a tuple (x, y).")
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        inputs = batch[:-1]
        return tuple(inputs), batch[-1]
    raise TorchwiseError("Each batch must hold inputs and a target.",
                         values={"batch type": type(batch).__name__,
                                 "length": len(batch) if isinstance(batch, (list, tuple)) else "-"},
                         fix="Make the data set return (input, target) pairs.")


def batch_size_of(target: Any) -> int:
    if isinstance(target, torch.Tensor):
        return int(target.shape[0]) if target.ndim else 1
    if isinstance(target, (list, tuple)):
        return batch_size_of(target[0]) if target and isinstance(target[0], torch.Tensor) else len(target)
    return 1
