"""`torchwise.summary(model, example_input)`: per layer output shape, parameters and activation memory.

The seed's debugging trick (print each layer's output shape from a forward hook) turned into a
table: one row per leaf module in call order, with its output shape, its trainable and frozen
parameters, and the bytes of the output it produces — the activation that backward keeps alive
until it reaches that layer. In-place layers (ReLU(inplace=True)) write into their input and add
no memory; they show 0. Hooks are removed afterwards, also when the forward fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchwise.errors import TorchwiseError


@dataclass
class LayerRow:
    name: str
    kind: str
    output_shape: str
    trainable: int
    frozen: int
    activation_bytes: int
    calls: int = 1


@dataclass
class ModelSummary:
    rows: list[LayerRow]
    trainable: int
    frozen: int
    param_bytes: int
    buffer_bytes: int
    activation_bytes: int
    input_shape: str
    output_shape: str
    notes: list[str] = field(default_factory=list)

    @property
    def total_params(self) -> int:
        return self.trainable + self.frozen

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.__dict__ for r in self.rows], "trainable": self.trainable, "frozen": self.frozen,
                "param_bytes": self.param_bytes, "buffer_bytes": self.buffer_bytes,
                "activation_bytes": self.activation_bytes, "input_shape": self.input_shape,
                "output_shape": self.output_shape, "notes": self.notes}

    def table(self) -> str:
        header = ("layer", "type", "output shape", "trainable", "frozen", "activations")
        body = [(r.name + (f" (x{r.calls})" if r.calls > 1 else ""), r.kind, r.output_shape, f"{r.trainable:,}",
                 f"{r.frozen:,}", format_bytes(r.activation_bytes)) for r in self.rows]
        widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
        right = {3, 4, 5}

        def line(cells):
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
        out = [line(header), rule, *(line(row) for row in body), rule]
        out.append(f"input {self.input_shape} -> output {self.output_shape}")
        out.append(f"parameters: {self.total_params:,} ({self.trainable:,} trainable, {self.frozen:,} frozen), "
                   f"{format_bytes(self.param_bytes)}; buffers {format_bytes(self.buffer_bytes)}")
        out.append(f"activations (layer outputs, this batch): {format_bytes(self.activation_bytes)}")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)

    __str__ = table


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _shape(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return "x".join(str(d) for d in obj.shape) or "scalar"
    if isinstance(obj, (list, tuple)):
        return "(" + ", ".join(_shape(o) for o in obj) + ")"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in obj.items()) + "}"
    return type(obj).__name__


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _new_bytes(output: Any, inputs: Any) -> int:
    """Bytes of output storage not shared with the inputs (in-place ops and views add nothing)."""
    seen = {t.untyped_storage().data_ptr() for t in _tensors(inputs)}
    total = 0
    for t in _tensors(output):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            total += t.untyped_storage().nbytes()
    return total


def as_inputs(example_input: Any) -> tuple[Any, ...]:
    return tuple(example_input) if isinstance(example_input, (list, tuple)) else (example_input,)


def summary(model: nn.Module, example_input: Any, *, train_mode: bool = True) -> ModelSummary:
    """Run one forward on `example_input` (a tensor or a tuple of tensors, on the model's device)
    and tabulate every leaf layer. The model's train/eval mode is restored afterwards."""
    inputs = as_inputs(example_input)
    if not _tensors(inputs):
        raise TorchwiseError("summary() needs an example input tensor.", values={"example_input": type(example_input).__name__},
                             fix="Pass a batch shaped like the real data, e.g. torch.randn(1, 3, 32, 32).")
    leaves = [(name, m) for name, m in model.named_modules() if not list(m.children())]
    rows: dict[str, LayerRow] = {}
    order: list[str] = []

    def hook_for(name: str, module: nn.Module):
        def hook(mod, args, output):
            row = rows.get(name)
            act = _new_bytes(output, args)
            if row is None:
                trainable = sum(p.numel() for p in mod.parameters(recurse=False) if p.requires_grad)
                frozen = sum(p.numel() for p in mod.parameters(recurse=False) if not p.requires_grad)
                rows[name] = LayerRow(name, type(mod).__name__, _shape(output), trainable, frozen, act)
                order.append(name)
            else:  # a layer called twice (weight sharing, a reused activation module)
                row.calls += 1
                row.activation_bytes += act
        return hook

    was_training = {m: m.training for m in model.modules()}
    handles = [m.register_forward_hook(hook_for(n, m)) for n, m in leaves]
    try:
        model.train(train_mode)
        with torch.no_grad():
            output = model(*inputs)
    finally:
        for h in handles:
            h.remove()
        for m, mode in was_training.items():
            m.training = mode
    ordered = [rows[n] for n in order]
    # Parameters held directly by non-leaf modules (rare: nn.Parameter on a container) still count.
    counted = {id(p) for n, m in leaves if n in rows for p in m.parameters(recurse=False)}
    params = list(model.parameters())
    notes = []
    unseen = [n for n, m in leaves if n not in rows and any(True for _ in m.parameters(recurse=False))]
    if unseen:
        notes.append(f"{len(unseen)} layer(s) with parameters were not called in forward: {', '.join(unseen[:5])}")
    if any(id(p) not in counted for p in params):
        notes.append("some parameters belong to modules that were not called or are not leaves")
    return ModelSummary(
        rows=ordered,
        trainable=sum(p.numel() for p in params if p.requires_grad),
        frozen=sum(p.numel() for p in params if not p.requires_grad),
        param_bytes=sum(p.numel() * p.element_size() for p in params),
        buffer_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        activation_bytes=sum(r.activation_bytes for r in ordered),
        input_shape=_shape(inputs[0] if len(inputs) == 1 else inputs), output_shape=_shape(output), notes=notes)
