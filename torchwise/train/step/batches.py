"""What a batch looks like to the Trainer: moving any nesting of it to the device, its size, its pieces.

A batch may be a tensor, a tuple or list (a namedtuple too), a dict or any other mapping (a Hugging
Face BatchEncoding), a dataclass, or an object with its own `.to(device)` (a graph batch); they nest.
`move_to` copies every tensor in it to the device and keeps the containers' types; `samples_in` finds
how many samples it holds (the first dimension of its first tensor); `split_parts` cuts it into
micro-batches along that dimension (gradient accumulation, the out-of-memory adaptation).
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping

import torch

from torchwise.errors import TorchwiseError


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _rebuild(obj: Any, items: list[Any]) -> Any:
    """A container of obj's type holding `items` (a namedtuple takes them as positional fields)."""
    return type(obj)(*items) if _is_namedtuple(obj) else type(obj)(items)


def _is_data_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _rebuild_mapping(obj: Mapping, values: dict[Any, Any]) -> Any:
    """A mapping of obj's type when it can be rebuilt from a dict (dict, OrderedDict, BatchEncoding), else a dict."""
    if type(obj) is dict:
        return values
    try:
        return type(obj)(values)
    except Exception:  # noqa: BLE001 - a mapping type with its own constructor: a plain dict says the same
        return values


def move_to(obj: Any, device: torch.device, non_blocking: bool) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, (list, tuple)):
        return _rebuild(obj, [move_to(o, device, non_blocking) for o in obj])
    if isinstance(obj, Mapping):
        return _rebuild_mapping(obj, {k: move_to(v, device, non_blocking) for k, v in obj.items()})
    if _is_data_instance(obj):
        return dataclasses.replace(obj, **{f.name: move_to(getattr(obj, f.name), device, non_blocking)
                                           for f in dataclasses.fields(obj) if f.init})
    to = getattr(obj, "to", None)
    if callable(to) and not isinstance(obj, (str, bytes, type)):  # a batch type of its own (a graph batch)
        try:
            return to(device, non_blocking=non_blocking)
        except TypeError:
            return to(device)
    return obj


def first_tensor(obj: Any) -> torch.Tensor | None:
    """The first tensor in a batch of any nesting (depth first, in the containers' order)."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (list, tuple)):
        children = obj
    elif isinstance(obj, Mapping):
        children = list(obj.values())
    elif _is_data_instance(obj):
        children = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    else:
        return None
    for child in children:
        found = first_tensor(child)
        if found is not None:
            return found
    return None


def samples_in(obj: Any) -> int:
    """How many samples a batch (or its target) holds: the first dimension of its first tensor; a list
    of non-tensors (strings, file names) counts its items; a lone number or a 0-d tensor is one sample."""
    tensor = first_tensor(obj)
    if tensor is not None:
        return int(tensor.shape[0]) if tensor.ndim else 1
    if isinstance(obj, (list, tuple)):
        return len(obj)
    return 1


def batch_size_of(target: Any) -> int:
    """The samples of a micro-batch, counted on its target (its inputs when the target is None)."""
    return samples_in(target)


def split_parts(obj: Any, parts: int) -> list[Any] | None:
    """`obj` cut into `parts` pieces along the batch dimension, every tensor in it alike, each piece of
    obj's own type; None when it cannot be cut (a 0-d tensor, an object of its own kind)."""
    if obj is None:
        return [None] * parts
    if isinstance(obj, torch.Tensor):
        return list(torch.tensor_split(obj, parts)) if obj.ndim else None
    if isinstance(obj, (list, tuple)):
        pieces = [split_parts(o, parts) for o in obj]
        if any(p is None for p in pieces):
            return None
        return [_rebuild(obj, [p[i] for p in pieces]) for i in range(parts)]
    if isinstance(obj, Mapping):
        cut = {k: split_parts(v, parts) for k, v in obj.items()}
        if any(p is None for p in cut.values()):
            return None
        return [_rebuild_mapping(obj, {k: v[i] for k, v in cut.items()}) for i in range(parts)]
    if _is_data_instance(obj):
        fields = [f.name for f in dataclasses.fields(obj) if f.init]
        cut = {name: split_parts(getattr(obj, name), parts) for name in fields}
        if any(p is None for p in cut.values()):
            return None
        return [dataclasses.replace(obj, **{name: v[i] for name, v in cut.items()}) for i in range(parts)]
    return None


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
    if isinstance(batch, (list, tuple)) and len(batch) >= 2 and not _is_namedtuple(batch):
        if len(batch) == 2:
            return _as_inputs(batch[0]), batch[1]
        return tuple(batch[:-1]), batch[-1]
    raise TorchwiseError("Each batch must hold inputs and a target.",
                         values={"batch type": type(batch).__name__,
                                 "length": len(batch) if isinstance(batch, (list, tuple)) else "-"},
                         fix="Make the data set return (input, target) pairs (inputs may be a tuple of tensors), "
                             "a dict the model takes by keyword (a Hugging Face batch), or pass "
                             "compute_loss=fn(model, batch) to the Trainer.")


def split_inputs_only(batch: Any) -> tuple[tuple[Any, ...], Any]:
    """(inputs, target or None) for prediction, where a batch may carry no labels: a lone tensor, or (x,)."""
    if isinstance(batch, torch.Tensor):
        return (batch,), None
    if isinstance(batch, (list, tuple)) and len(batch) == 1 and not _is_namedtuple(batch):
        return _as_inputs(batch[0]), None
    if isinstance(batch, Mapping) and "input" in batch and "target" not in batch:
        return _as_inputs(batch["input"]), None
    return split_batch(batch)


def _as_inputs(inputs: Any) -> tuple[Any, ...]:
    return tuple(inputs) if isinstance(inputs, (list, tuple)) and not _is_namedtuple(inputs) else (inputs,)


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
