"""What a batch looks like to the Trainer, and moving it to the device."""
from __future__ import annotations

import difflib
from typing import Any, Mapping

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
    """(inputs, target) of a batch as docs/CONTRACTS.md documents them; the model is called `model(*inputs)`.

    `(x, y)` -> model(x); `((x1, x2), y)` -> model(x1, x2) (inputs given as a tuple or list of tensors);
    `(x1, x2, y)` -> model(x1, x2); `{"input": x or (x1, x2), "target": y}` likewise."""
    if isinstance(batch, Mapping):
        missing = [k for k in ("input", "target") if k not in batch]
        if missing:
            raise TorchwiseError("A dict batch needs 'input' and 'target' keys.",
                                 values={"keys": sorted(map(str, batch)), "missing": missing},
                                 fix="Return {'input': x, 'target': y} from the data set, or a tuple (x, y)."
                                     + _key_hint(batch))
        return _as_inputs(batch["input"]), batch["target"]
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        if len(batch) == 2:
            return _as_inputs(batch[0]), batch[1]
        return tuple(batch[:-1]), batch[-1]
    raise TorchwiseError("Each batch must hold inputs and a target.",
                         values={"batch type": type(batch).__name__,
                                 "length": len(batch) if isinstance(batch, (list, tuple)) else "-"},
                         fix="Make the data set return (input, target) pairs (inputs may be a tuple of tensors).")


def _as_inputs(inputs: Any) -> tuple[Any, ...]:
    return tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


INPUT_LIKE = ("inputs", "x", "image", "images", "img", "features", "data", "pixel_values", "input_ids", "inp")
TARGET_LIKE = ("targets", "y", "label", "labels", "class", "classes", "mask", "masks", "target_ids", "tgt")


def _key_hint(batch: Mapping) -> str:
    keys = [str(k) for k in batch]
    hints = []
    for want, like in (("input", INPUT_LIKE), ("target", TARGET_LIKE)):
        found = [k for k in keys if k.lower() in like] or \
            [k for k in difflib.get_close_matches(want, keys, n=1, cutoff=0.6) if k != want]
        if found and want not in keys:
            hints.append(f"'{found[0]}' looks like the {want}")
    return (" (" + "; ".join(hints) + ")") if hints else ""


def batch_size_of(target: Any) -> int:
    if isinstance(target, torch.Tensor):
        return int(target.shape[0]) if target.ndim else 1
    if isinstance(target, (list, tuple)):
        return batch_size_of(target[0]) if target and isinstance(target[0], torch.Tensor) else len(target)
    return 1
