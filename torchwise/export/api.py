"""One call from a model (or a run directory) to verified export files.

    export_and_verify(model, example_input, out_dir, formats=("onnx", "torchscript", "pt2"),
                      metadata=meta, real_inputs=x_val)
    export_run(run_dir_or_checkpoint, out_dir=None, formats=("onnx",), data=None)

Each format is exported, reloaded from disk and compared with the PyTorch model on random inputs
and (when given) real inputs, at two batch sizes. One format failing does not stop the others.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from torchwise.errors import TorchwiseError
from torchwise.export.verify import DEFAULT_ATOL, DEFAULT_RTOL, VerifyReport

FORMATS = ("onnx", "torchscript", "pt2")
FILE_NAMES = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt", "pt2": "model.pt2"}


@dataclass
class FormatResult:
    format: str
    path: Path | None = None
    ok: bool = False
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    verification: VerifyReport | None = None
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        v = self.verification
        return {"format": self.format, "path": str(self.path) if self.path else None, "ok": self.ok,
                "error": self.error, "warnings": self.warnings, "seconds": round(self.seconds, 2),
                "max_abs_err": v.max_abs if v else None, "max_rel_err": v.max_rel if v else None,
                "comparisons": [c.__dict__ for c in v.comparisons] if v else [], **self.details}


@dataclass
class ExportSummary:
    out_dir: Path
    results: dict[str, FormatResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results.values())

    @property
    def onnx_path(self) -> Path | None:
        r = self.results.get("onnx")
        return r.path if r and r.ok else None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "out_dir": str(self.out_dir), "formats": {k: r.to_dict() for k, r in self.results.items()}}


def _parse_formats(formats: str | Sequence[str]) -> list[str]:
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    items = [f.strip().lower() for f in items if f.strip()]
    aliases = {"ts": "torchscript", "jit": "torchscript", "export": "pt2", "torch.export": "pt2"}
    items = [aliases.get(f, f) for f in items]
    bad = [f for f in items if f not in FORMATS]
    if bad or not items:
        raise TorchwiseError("Unknown export format.", values={"given": bad or formats, "known": list(FORMATS)},
                             fix="use --format onnx,torchscript,pt2 (any of them, comma-separated)")
    return list(dict.fromkeys(items))


def export_and_verify(model, example_input: Any, out_dir: str | Path, *,
                      formats: str | Sequence[str] = ("onnx",), metadata: Mapping[str, Any] | None = None,
                      real_inputs: Any = None, dynamic_batch: bool = True, dynamic_spatial: bool = False,
                      opset: int | None = None, torchscript_method: str = "auto", atol: float = DEFAULT_ATOL,
                      rtol: float = DEFAULT_RTOL, log: Callable[[str], None] | None = print) -> ExportSummary:
    """Export `model` to each format under `out_dir` and verify each file against it.

    example_input: a tensor (or tuple) with the model's input shape, batch first.
    real_inputs: a tensor of real, pre-processed examples (e.g. the validation split), or a list of
    batches; two batches of different sizes are taken from it.
    Returns an ExportSummary; never raises for a format that fails (see .ok and each .error).
    """
    import torch

    from torchwise.export.onnx import ExportError, as_tuple, export_onnx
    from torchwise.export.verify import real_batch_pair, verification_batches, verify_onnx

    say = log or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wanted = _parse_formats(formats)
    if isinstance(real_inputs, (list, tuple)) and real_inputs and not isinstance(real_inputs[0], (int, float)):
        real = list(real_inputs)
    elif real_inputs is not None:
        real = real_batch_pair(real_inputs)
    else:
        real = []
    example = as_tuple(example_input)
    batches = verification_batches(example, real, dynamic_spatial=dynamic_spatial)
    results: dict[str, FormatResult] = {}
    for fmt in wanted:
        result = FormatResult(fmt)
        results[fmt] = result
        path = out / FILE_NAMES[fmt]
        start = time.perf_counter()
        try:
            if fmt == "onnx":
                exported = export_onnx(model, example, path, metadata=metadata, dynamic_batch=dynamic_batch,
                                       dynamic_spatial=dynamic_spatial, opset=opset)
                result.details |= {"opset": exported.opset, "dynamic_axes": exported.dynamic_axes}
                result.warnings += exported.notes
                say(f"onnx: wrote {path} (opset {exported.opset}, dynamic axes {exported.dynamic_axes or 'none'}, "
                    f"{len(exported.metadata)} metadata entries)")
                result.verification = verify_onnx(model, path, batches, atol=atol, rtol=rtol)
            elif fmt == "torchscript":
                from torchwise.export.torchscript import export_torchscript

                ts = export_torchscript(model, example, path, method=torchscript_method, extra_batches=batches,
                                        atol=atol, rtol=rtol)
                result.verification = ts.verification
                result.warnings += ts.warnings
                result.details |= {"method": ts.method, "script_error": ts.script_error,
                                   "tracer_warnings": ts.tracer_warnings, "data_dependent": ts.data_dependent}
                say(f"torchscript: wrote {path} ({'torch.jit.script' if ts.method == 'script' else 'torch.jit.trace'}"
                    + (f"; scripting failed: {ts.script_error}" if ts.script_error else "") + ")")
            else:
                from torchwise.export.pt2 import export_pt2

                pt2 = export_pt2(model, example, path, batches=batches, dynamic_batch=dynamic_batch,
                                 dynamic_spatial=dynamic_spatial, atol=atol, rtol=rtol)
                result.verification = pt2.verification
                say(f"pt2: wrote {path} (torch.export, dynamic batch)")
            result.path = path
            for line, comparison in zip(result.verification.lines(), result.verification.comparisons):
                if fmt == "onnx" or not comparison.ok:
                    say(line)
            say("  " + result.verification.summary())
            result.ok = result.verification.ok
            if not result.ok:
                try:
                    result.verification.raise_if_failed()
                except TorchwiseError as exc:
                    result.error = str(exc)
                    say(f"{fmt}: FAILED: {exc}")
        except TorchwiseError as exc:  # ExportError, or a written file that cannot be opened again
            result.error = str(exc)
            say(f"{fmt}: FAILED: {exc}")
        for warning in result.warnings:
            say(f"!! {fmt}: WARNING: {warning}")
        result.seconds = time.perf_counter() - start
    summary = ExportSummary(out, results)
    (out / "export_report.json").write_text(json.dumps(summary.to_dict(), indent=2, default=str))
    return summary


# --------------------------------------------------------------------------- run directories

def _find_run_dir(path: Path) -> Path | None:
    for candidate in (path, *path.parents):
        if (candidate / "final" / "meta.json").is_file():
            return candidate
    return None


def load_for_export(path: str | Path):
    """(model in eval mode, meta, description) from a run directory, a checkpoint directory or a
    .safetensors file inside a run."""
    from torchwise.models import model_from_run

    path = Path(path)
    if not path.exists():
        raise TorchwiseError("The run directory or checkpoint does not exist.", values={"path": str(path)},
                             fix="pass a run directory written by `torchwise train` (it holds final/meta.json)")
    run_dir = _find_run_dir(path if path.is_dir() else path.parent)
    if run_dir is None:
        raise TorchwiseError("No final/meta.json found in or above this path, so the model cannot be rebuilt.",
                             values={"path": str(path)},
                             fix="pass a run directory written by `torchwise train` or a checkpoint inside one")
    weights: Path | None = None
    if path.is_file():
        weights = path
    elif path.resolve() != run_dir.resolve():
        weights = path / "model.safetensors"
        if not weights.is_file():
            raise TorchwiseError("The checkpoint directory has no model.safetensors.", values={"path": str(path)},
                                 fix="pass a checkpoint directory such as RUN/checkpoints/step-000000123")
    model, meta = model_from_run(run_dir, weights_file=weights)
    source = f"checkpoint {weights}" if weights else f"run {run_dir} (final weights)"
    return model.eval(), meta, source


def example_input_for(meta: Mapping[str, Any], batch: int = 2):
    import torch

    size = meta.get("input_size")
    if not size:
        raise TorchwiseError("meta.json has no input_size, so the input shape is unknown.",
                             values={"keys": sorted(meta)}, fix="pass the model and an example input to export_and_verify()")
    return torch.randn(batch, *[int(s) for s in size], generator=torch.Generator().manual_seed(0))


def _data_candidates(meta: Mapping[str, Any], run_dir: Path | None) -> list[str]:
    found = []
    for key in ("data", "data_path", "data_dir", "dataset"):
        value = meta.get(key)
        if isinstance(value, dict):
            value = value.get("path") or value.get("root")
        if isinstance(value, str):
            found.append(value)
    if run_dir is not None and (run_dir / "config.json").is_file():
        try:
            config = json.loads((run_dir / "config.json").read_text())
        except ValueError:
            config = {}
        for key in ("data", "data_path", "data_dir"):
            value = config.get(key) if isinstance(config, dict) else None
            if isinstance(value, dict):
                value = value.get("path") or value.get("root")
            if isinstance(value, str):
                found.append(value)
    return found


def real_inputs_for(meta: Mapping[str, Any], data: str | Path | None, run_dir: Path | None = None, limit: int = 64):
    """Pre-processed real examples (a tensor) from image files/folders or a CSV, or None."""
    import numpy as np
    import torch

    from torchwise import predict
    from torchwise.export.metadata import preprocess_spec

    spec = preprocess_spec(meta)
    if spec is None:
        return None, "no pre-processing known for this task"
    if not data and spec["kind"] == "image" and run_dir is not None and (run_dir / "split.json").is_file():
        # The run's own validation images: real inputs the model never trained on.
        try:
            split = json.loads((run_dir / "split.json").read_text())
            root = Path(split["root"])
            files = [str(root / item[0]) for item in split.get("val", [])]
            files = [f for f in files if Path(f).is_file()]
        except (ValueError, KeyError, TypeError, IndexError):
            files = []
        if files:
            step = max(1, len(files) // limit)
            x, _good, _bad = predict.preprocess_readable(files[::step][:limit], spec)
            if x is not None:
                return torch.from_numpy(x), f"{len(x)} validation images of the run ({root})"
    candidates = [str(data)] if data else _data_candidates(meta, run_dir)
    for candidate in candidates:
        path = Path(candidate)
        if not path.exists():
            continue
        if spec["kind"] == "image":
            files = predict.collect_images([str(path)])
            if not files:
                continue
            step = max(1, len(files) // limit)
            # An unreadable image is left out: verification needs real inputs, not every one of them.
            x, _good, _bad = predict.preprocess_readable(files[::step][:limit], spec)
            if x is None:
                continue
        else:
            x, _rows = predict.preprocess_csv(str(path), meta, spec)
            x = x[:limit]
        return torch.from_numpy(np.ascontiguousarray(x)), f"{len(x)} real examples from {path}"
    return None, "no data given (use --data to verify on real inputs too)"


def export_run(path: str | Path, out_dir: str | Path | None = None, *, formats: str | Sequence[str] = ("onnx",),
               data: str | Path | None = None, real_inputs: Any = None, dynamic_spatial: bool = False,
               opset: int | None = None, torchscript_method: str = "auto", atol: float = DEFAULT_ATOL,
               rtol: float = DEFAULT_RTOL, log: Callable[[str], None] | None = print) -> ExportSummary:
    """Export a run directory (final weights) or a checkpoint, verified; default out_dir: RUN/export."""
    say = log or (lambda _msg: None)
    path = Path(path)
    model, meta, source = load_for_export(path)
    run_dir = _find_run_dir(path if path.is_dir() else path.parent)
    out = Path(out_dir) if out_dir else (run_dir or path.parent) / "export"
    say(f"exporting {source}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters")
    if real_inputs is None:
        real_inputs, note = real_inputs_for(meta, data, run_dir)
        say(f"verification inputs: random + {note}" if real_inputs is not None else f"verification inputs: random only ({note})")
    example = example_input_for(meta)
    return export_and_verify(model, example, out, formats=formats, metadata=meta, real_inputs=real_inputs,
                             dynamic_spatial=dynamic_spatial, opset=opset, torchscript_method=torchscript_method,
                             atol=atol, rtol=rtol, log=log)


def export_verify_predict(run_dir: str | Path, inputs: Sequence[str] | None = None, *,
                          formats: str | Sequence[str] = ("onnx",), top_k: int = 3,
                          log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """The end of the demo: export the run to ONNX (verified against PyTorch with onnxruntime), then
    predict `inputs` (default: the run's first validation image) from the .onnx file alone.

    Returns {"ok", "onnx", "max_abs_err", "max_rel_err", "predictions"}; never raises for a failed
    export (ok is False and the reason was logged)."""
    from torchwise import predict

    say = log or (lambda _msg: None)
    run_dir = Path(run_dir)
    summary = export_run(run_dir, formats=formats, log=log)
    result: dict[str, Any] = {"ok": summary.ok, "onnx": summary.onnx_path, "max_abs_err": None,
                              "max_rel_err": None, "predictions": []}
    onnx_result = summary.results.get("onnx")
    if onnx_result and onnx_result.verification:
        result["max_abs_err"] = onnx_result.verification.max_abs
        result["max_rel_err"] = onnx_result.verification.max_rel
    if summary.onnx_path is None:
        return result
    if not inputs:
        inputs = _first_val_input(run_dir)
    if inputs:
        result["predictions"] = predict.predict(summary.onnx_path, list(inputs), top_k=top_k)
        say(f"prediction from {summary.onnx_path.name} alone (onnxruntime, no torch):")
        say(predict.format_table(result["predictions"]))
    return result


def _first_val_input(run_dir: Path) -> list[str]:
    try:
        split = json.loads((run_dir / "split.json").read_text())
        if split.get("kind") == "image" and split.get("val"):
            return [str(Path(split["root"]) / split["val"][0][0])]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    return []
