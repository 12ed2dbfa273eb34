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

from torchwise.errors import OutOfMemory, TorchwiseError, is_out_of_memory, out_of_memory
from torchwise.export.example_inputs import cpu_example, dynamic_shapes_for
from torchwise.export.metadata import onnx_metadata
from torchwise.export.staged import staged_export


class ExportError(TorchwiseError):
    """A model that cannot be exported in the requested format (the message says why and what to try)."""


class ExportOutOfMemory(OutOfMemory):
    """Out of memory while exporting or verifying an export."""


EXPORT_OOM_FIX = ("export on a machine (or at a moment) with more free memory: exporting holds a copy of the model "
                  "and its traced graph besides the weights; on the CPU, close what else uses the machine's memory "
                  "(or raise the process' memory limit, ulimit -v)")


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


def explain_export_failure(exc: BaseException, fmt: str) -> TorchwiseError:
    """Turn an exporter exception into an ExportError with the cause named and a fix."""
    if is_out_of_memory(exc):  # not the model's fault: no operator or branch to name
        return out_of_memory(exc, f"exporting to {fmt}", cls=ExportOutOfMemory, fix=EXPORT_OOM_FIX)
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
    import onnx  # noqa: F401  first: without it, an ImportError before the exporter runs (not its failure)
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).to("cpu").eval()
    inputs = cpu_example(example_input)
    with torch.no_grad():
        outputs = model(*inputs)
    n_out = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    input_names = list(input_names or (["input"] if len(inputs) == 1 else [f"input_{i}" for i in range(len(inputs))]))
    output_names = list(output_names or (["logits"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]))
    shapes = dynamic_shapes_for(inputs, dynamic_batch=dynamic_batch, dynamic_spatial=dynamic_spatial)
    proto = _onnx_program(model, inputs, input_names, output_names, opset, shapes).model_proto
    opset_used = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset or 0)
    props = onnx_metadata(metadata, {"torch": torch.__version__, "opset": opset_used,
                                     "input_names": input_names, "output_names": output_names,
                                     "dynamic_batch": dynamic_batch, "dynamic_spatial": dynamic_spatial})
    _set_metadata(proto, props)
    with staged_export(path) as staged:  # whole or not at all: a full disk leaves the previous export
        _save_checked(proto, staged, model)
    dynamic_axes = _dynamic_axes(proto)
    notes = []
    if dynamic_batch and not any(0 in axes for axes in dynamic_axes.values()):
        notes.append("the batch axis came out static: the model fixes its batch size")
    return OnnxExport(path, int(opset_used), [v.name for v in proto.graph.input],
                      [v.name for v in proto.graph.output], dynamic_axes, props, notes)


def _onnx_program(model, inputs: tuple, input_names: list[str], output_names: list[str], opset: int | None,
                  shapes):
    """torch.onnx.export (dynamo) with its console output and logs held back; a failure becomes an
    ExportError that names the cause (TORCHWISE_EXPORT_DEBUG=1 lets the exporter's own error through)."""
    import os

    import torch

    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), quiet_torch_logs(), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.onnx.export(model, inputs, None, input_names=input_names, output_names=output_names,
                                     opset_version=opset, dynamo=True, dynamic_shapes=shapes, verbose=False)
    except Exception as exc:
        if os.environ.get("TORCHWISE_EXPORT_DEBUG"):
            raise
        raise explain_export_failure(exc, "ONNX") from None


def _set_metadata(proto, props: Mapping[str, str]) -> None:
    """Replace the model's metadata_props with `props` and sign it as torchwise's."""
    del proto.metadata_props[:]
    for key, value in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.producer_name = "torchwise"


# protobuf holds at most 2 GB: above this many bytes of weights they go to a side file (model.onnx.data)
EXTERNAL_DATA_BYTES = 1.8e9


def _save_checked(proto, path: Path, model) -> None:
    """Write the model to `path`, checked by onnx.checker."""
    import onnx

    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    weight_bytes += sum(b.numel() * b.element_size() for b in model.buffers())
    if weight_bytes < EXTERNAL_DATA_BYTES:
        onnx.checker.check_model(proto)
        onnx.save(proto, str(path))
    else:  # protobuf cannot hold more than 2 GB: weights go to a side file next to the .onnx
        onnx.save(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data")
        onnx.checker.check_model(str(path))


def _dynamic_axes(proto) -> dict[str, dict[int, str]]:
    """{input name: {axis: symbolic name}} for the graph inputs' dynamic axes."""
    dynamic_axes: dict[str, dict[int, str]] = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        named = {i: d.dim_param for i, d in enumerate(dims) if d.dim_param}
        if named:
            dynamic_axes[value.name] = named
    return dynamic_axes
