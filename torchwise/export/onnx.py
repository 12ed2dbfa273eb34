"""ONNX export through torch.export (the dynamo exporter), with a dynamic batch axis and the run's
metadata inside the file.

Export failures are turned into one readable message: which operator has no ONNX translation,
which line of `forward` branches on tensor values, or which dimension the model hard-codes, and
what to try instead. We do not fall back to the legacy tracing exporter: on a data-dependent branch
it silently records one side of it and produces a wrong model.
"""
from __future__ import annotations

import contextlib
import copy
import io
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from torchwise.errors import TorchwiseError
from torchwise.export.metadata import onnx_metadata


class ExportError(TorchwiseError):
    """A model that cannot be exported in the requested format (the message says why and what to try)."""


class UnsupportedOperatorError(ExportError):
    def __init__(self, operators: Sequence[str], **kwargs):
        self.operators = list(operators)
        super().__init__(**kwargs)


@dataclass
class OnnxExport:
    path: Path
    opset: int
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    metadata: dict[str, str]
    notes: list[str] = field(default_factory=list)


def as_tuple(example_input: Any) -> tuple:
    if isinstance(example_input, (tuple, list)):
        return tuple(example_input)
    return (example_input,)


def _at_least_two(inputs: tuple) -> tuple:
    # torch.export specializes a dimension of size 1 to a constant; an example batch of 1 would
    # silently freeze the batch axis, so duplicate it.
    import torch

    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] == 1:
            t = torch.cat([t, t], dim=0)
        out.append(t)
    return tuple(out)


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


@contextlib.contextmanager
def quiet_torch_logs():
    """Silence torch's own logging during export: torch.export dumps whole graphs at WARNING level
    on a failure we are about to explain in one message anyway."""
    import logging

    saved = {}
    for name in [n for n in list(logging.root.manager.loggerDict) if n == "torch" or n.startswith("torch.")]:
        logger = logging.getLogger(name)
        saved[name] = logger.level
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _chain(exc: BaseException) -> str:
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return _ANSI.sub("", "\n".join(parts))


_OP_PATTERNS = [
    re.compile(r"No ONNX function found for <OpOverload\(op='([\w.:]+)'"),
    re.compile(r"Exporting the operator '?([\w.:]+)'? to ONNX opset version \d+ is not supported"),
    re.compile(r"Unsupported: ONNX export of operator ([\w.:]+)"),
    re.compile(r"No decompositions registered for .*?'([\w.:]+)'"),
]


def unsupported_operators(text: str) -> list[str]:
    found: list[str] = []
    for pattern in _OP_PATTERNS:
        for name in pattern.findall(text):
            if name not in found:
                found.append(name)
    return found


def _user_line(text: str) -> str | None:
    """The first 'File ..., line N, in forward' frame and its code line, from torch.export's message."""
    match = re.search(r'File "([^"]+)", line (\d+), in (\w+)\n\s+(.+)', text)
    if match:
        return f"{match.group(1)}:{match.group(2)} in {match.group(3)}: {match.group(4).strip()}"
    match = re.search(r"# File: ([^\n]+?) in (\w+), code: ([^\n]+)", text)
    if match:
        return f"{match.group(1)} in {match.group(2)}: {match.group(3).strip()}"
    return None


def explain_export_failure(exc: BaseException, fmt: str) -> ExportError:
    """Turn an exporter exception into an ExportError with the cause named and a fix."""
    text = _chain(exc)
    ops = unsupported_operators(text)
    if ops:
        names = ", ".join(ops)
        pretty = ", ".join(_torch_name(op) for op in ops)
        return UnsupportedOperatorError(
            ops,
            what=f"{fmt} export failed: ONNX has no translation for the operator {names} ({pretty}).",
            values={"operator": names, "exporter message": _first_line(text, ops[0]) or _first_line(text)},
            fix=(f"replace {pretty} in forward() with operations ONNX supports (or move it out of the model, e.g. "
                 "into numpy pre/post-processing); or register an ONNX Script translation for it with "
                 "torch.onnx.export(..., custom_translation_table={...}); or export with --format torchscript "
                 "or --format pt2, which do not need ONNX operators"))
    if "data-dependent" in text or "GuardOnDataDependentSymNode" in text or "DataDependentOutputException" in text:
        where = _user_line(text)
        return ExportError(
            what=f"{fmt} export failed: forward() branches on the values of a tensor (data-dependent control flow), "
                 "which a static graph cannot express.",
            values={"where": where or "(see the exporter message)",
                    "exporter message": _first_line(text, "data-dependent") or _first_line(text)},
            fix=("rewrite the branch without Python control flow on tensor values: torch.where(cond, a, b) for "
                 "element-wise choices, torch.cond(pred, true_fn, false_fn, (x,)) for whole branches; or export "
                 "with --format torchscript (scripting keeps the branch)"))
    match = re.search(r"Constraints violated \(([^)]*)\)", text)
    if match or "specialized it to be a constant" in text or "Not all values of" in text:
        return ExportError(
            what=f"{fmt} export failed: the model fixes a dimension that was asked to be dynamic "
                 f"({match.group(1) if match else 'batch/spatial'}).",
            values={"exporter message": _first_line(text, "Constraints violated") or _first_line(text)},
            fix=("do not hard-code the batch size or image size in forward(): use x.flatten(1) or "
                 "x.view(x.size(0), -1) instead of x.view(32, -1); for spatial sizes, use an adaptive pooling "
                 "layer before the classifier; or export without --dynamic-spatial"))
    return ExportError(what=f"{fmt} export failed: {type(exc).__name__}.",
                       values={"exporter message": _first_line(text)},
                       fix="rerun with TORCHWISE_EXPORT_DEBUG=1 for the full exporter trace; try --format torchscript "
                           "or --format pt2")


def _torch_name(op: str) -> str:
    name = op.replace("::", ".")
    for prefix in ("aten.", "prims."):
        if name.startswith(prefix):
            base = name[len(prefix):]
            base = re.sub(r"_ex$", "", base).lstrip("_")
            if base.startswith("linalg_"):
                return "torch.linalg." + base[len("linalg_"):]
            if base.startswith("special_") or prefix == "prims.":
                return "torch.special." + base.replace("special_", "")
            return "torch." + base
    return name


def _first_line(text: str, containing: str | None = None) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and (containing is None or containing in line):
            return line[:400]
    if containing is not None:
        return ""
    return text.strip().splitlines()[0][:400] if text.strip() else ""


def export_onnx(model, example_input: Any, path: str | Path, *, metadata: Mapping[str, Any] | None = None,
                dynamic_batch: bool = True, dynamic_spatial: bool = False, opset: int | None = None,
                input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None) -> OnnxExport:
    """Export `model` (in eval mode, on a CPU copy: the caller's model is not changed) to `path`.

    `metadata` (a run's meta.json content) goes into the file's metadata_props; see
    torchwise.export.metadata. Raises ExportError (UnsupportedOperatorError) with the cause named.
    """
    import os

    import onnx
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).to("cpu").eval()
    inputs = _at_least_two(tuple(t.detach().to("cpu") if isinstance(t, torch.Tensor) else t
                                 for t in as_tuple(example_input)))
    with torch.no_grad():
        outputs = model(*inputs)
    n_out = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    input_names = list(input_names or (["input"] if len(inputs) == 1 else [f"input_{i}" for i in range(len(inputs))]))
    output_names = list(output_names or (["logits"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]))
    shapes = dynamic_shapes_for(inputs, dynamic_batch=dynamic_batch, dynamic_spatial=dynamic_spatial)
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), quiet_torch_logs(), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, inputs, None, input_names=input_names, output_names=output_names,
                                        opset_version=opset, dynamo=True, dynamic_shapes=shapes, verbose=False)
    except Exception as exc:
        if os.environ.get("TORCHWISE_EXPORT_DEBUG"):
            raise
        raise explain_export_failure(exc, "ONNX") from None
    proto = program.model_proto
    opset_used = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset or 0)
    props = onnx_metadata(metadata, {"torch": torch.__version__, "opset": opset_used,
                                     "input_names": input_names, "output_names": output_names,
                                     "dynamic_batch": dynamic_batch, "dynamic_spatial": dynamic_spatial})
    del proto.metadata_props[:]
    for key, value in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.producer_name = "torchwise"
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    weight_bytes += sum(b.numel() * b.element_size() for b in model.buffers())
    if weight_bytes < 1.8e9:
        onnx.checker.check_model(proto)
        onnx.save(proto, str(path))
    else:  # protobuf cannot hold more than 2 GB: weights go to a side file next to the .onnx
        onnx.save(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data")
        onnx.checker.check_model(str(path))
    dynamic_axes: dict[str, dict[int, str]] = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        named = {i: d.dim_param for i, d in enumerate(dims) if d.dim_param}
        if named:
            dynamic_axes[value.name] = named
    notes = []
    if dynamic_batch and not any(0 in axes for axes in dynamic_axes.values()):
        notes.append("the batch axis came out static: the model fixes its batch size")
    return OnnxExport(path, int(opset_used), [v.name for v in proto.graph.input],
                      [v.name for v in proto.graph.output], dynamic_axes, props, notes)
