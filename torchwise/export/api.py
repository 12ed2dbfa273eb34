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

from torchwise import files
from torchwise.errors import OutOfMemory, TorchwiseError, is_out_of_memory, out_of_memory
from torchwise.export.example_inputs import as_tuple
from torchwise.export.onnx import EXPORT_OOM_FIX, ExportOutOfMemory
from torchwise.export.run_dir import example_input_for, find_run_dir, load_for_export, real_inputs_for
from torchwise.export.staged import ExportWriteError
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


@dataclass(frozen=True)
class _Settings:
    """How each format is exported and verified (export_and_verify's keyword arguments)."""
    metadata: Mapping[str, Any] | None
    dynamic_batch: bool
    dynamic_spatial: bool
    opset: int | None
    torchscript_method: str
    atol: float
    rtol: float


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
    from torchwise.export.verify import verification_batches

    say = log or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wanted = _parse_formats(formats)
    example = as_tuple(example_input)
    batches = verification_batches(example, _real_batches(real_inputs), dynamic_spatial=dynamic_spatial)
    settings = _Settings(metadata, dynamic_batch, dynamic_spatial, opset, torchscript_method, atol, rtol)
    results = {fmt: _export_format(fmt, model, example, out / FILE_NAMES[fmt], batches, settings, say)
               for fmt in wanted}
    summary = ExportSummary(out, results)
    # whole or not at all, as the model files: a full disk leaves the previous report
    files.write_text(out / "export_report.json", json.dumps(summary.to_dict(), indent=2, default=str) + "\n")
    return summary


def _real_batches(real_inputs: Any) -> list:
    """The real verification batches: a list of batches as given, or two batches cut from a tensor."""
    from torchwise.export.verify import real_batch_pair

    if isinstance(real_inputs, (list, tuple)) and real_inputs and not isinstance(real_inputs[0], (int, float)):
        return list(real_inputs)
    if real_inputs is not None:
        return real_batch_pair(real_inputs)
    return []


def _export_format(fmt: str, model, example: tuple, path: Path, batches: list, settings: _Settings,
                   say: Callable[[str], None]) -> FormatResult:
    """Export one format and verify the file; a failure is recorded in the result, not raised."""
    result = FormatResult(fmt)
    start = time.perf_counter()
    writers = {"onnx": _write_onnx, "torchscript": _write_torchscript, "pt2": _write_pt2}
    try:
        writers[fmt](result, model, example, path, batches, settings, say)
        result.path = path
        _check_verification(result, say)
    except TorchwiseError as exc:  # ExportError, or a written file that cannot be opened again
        if isinstance(exc, (OutOfMemory, ExportWriteError)):  # the machine's, not this format's: all stop
            raise
        result.error = str(exc)
        say(f"{fmt}: FAILED: {exc}")
    except Exception as exc:  # out of memory in the model's copy, the exporter or the verification
        if not is_out_of_memory(exc):
            raise
        raise out_of_memory(exc, f"exporting to {fmt} and verifying the file", cls=ExportOutOfMemory,
                            fix=EXPORT_OOM_FIX) from exc
    for warning in result.warnings:
        say(f"!! {fmt}: WARNING: {warning}")
    result.seconds = time.perf_counter() - start
    return result


def _write_onnx(result: FormatResult, model, example: tuple, path: Path, batches: list, settings: _Settings,
                say: Callable[[str], None]) -> None:
    from torchwise.export.onnx import export_onnx
    from torchwise.export.verify import verify_onnx

    exported = export_onnx(model, example, path, metadata=settings.metadata, dynamic_batch=settings.dynamic_batch,
                           dynamic_spatial=settings.dynamic_spatial, opset=settings.opset)
    result.details |= {"opset": exported.opset, "dynamic_axes": exported.dynamic_axes}
    result.warnings += exported.notes
    say(f"onnx: wrote {path} (opset {exported.opset}, dynamic axes {exported.dynamic_axes or 'none'}, "
        f"{len(exported.metadata)} metadata entries)")
    result.verification = verify_onnx(model, path, batches, atol=settings.atol, rtol=settings.rtol)


def _write_torchscript(result: FormatResult, model, example: tuple, path: Path, batches: list, settings: _Settings,
                       say: Callable[[str], None]) -> None:
    from torchwise.export.torchscript import export_torchscript

    ts = export_torchscript(model, example, path, method=settings.torchscript_method, extra_batches=batches,
                            atol=settings.atol, rtol=settings.rtol)
    result.verification = ts.verification
    result.warnings += ts.warnings
    result.details |= {"method": ts.method, "script_error": ts.script_error,
                       "tracer_warnings": ts.tracer_warnings, "data_dependent": ts.data_dependent}
    say(f"torchscript: wrote {path} ({'torch.jit.script' if ts.method == 'script' else 'torch.jit.trace'}"
        + (f"; scripting failed: {ts.script_error}" if ts.script_error else "") + ")")


def _write_pt2(result: FormatResult, model, example: tuple, path: Path, batches: list, settings: _Settings,
               say: Callable[[str], None]) -> None:
    from torchwise.export.pt2 import export_pt2

    pt2 = export_pt2(model, example, path, batches=batches, dynamic_batch=settings.dynamic_batch,
                     dynamic_spatial=settings.dynamic_spatial, atol=settings.atol, rtol=settings.rtol)
    result.verification = pt2.verification
    say(f"pt2: wrote {path} (torch.export, dynamic batch)")


def _check_verification(result: FormatResult, say: Callable[[str], None]) -> None:
    """Log the comparisons (all of them for ONNX, the failing ones otherwise) and the summary; a
    failed verification becomes the result's error."""
    verification = result.verification
    for line, comparison in zip(verification.lines(), verification.comparisons):
        if result.format == "onnx" or not comparison.ok:
            say(line)
    say("  " + verification.summary())
    result.ok = verification.ok
    if not result.ok:
        try:
            verification.raise_if_failed()
        except TorchwiseError as exc:
            result.error = str(exc)
            say(f"{result.format}: FAILED: {exc}")


# --------------------------------------------------------------------------- run directories

def export_run(path: str | Path, out_dir: str | Path | None = None, *, formats: str | Sequence[str] = ("onnx",),
               data: str | Path | None = None, real_inputs: Any = None, dynamic_spatial: bool = False,
               opset: int | None = None, torchscript_method: str = "auto", atol: float = DEFAULT_ATOL,
               rtol: float = DEFAULT_RTOL, log: Callable[[str], None] | None = print) -> ExportSummary:
    """Export a run directory (final weights) or a checkpoint, verified; default out_dir: RUN/export."""
    from torchwise.train.state.run_lock import claim_if_inside

    path = Path(path)
    run_dir = find_run_dir(path if path.is_dir() else path.parent)
    out = Path(out_dir) if out_dir else (run_dir or path.parent) / "export"
    # writing into the run folder (its export/): one writer at a time, not while a run writes there
    with claim_if_inside(run_dir, out):
        return _export_run(path, run_dir, out, formats=formats, data=data, real_inputs=real_inputs,
                           dynamic_spatial=dynamic_spatial, opset=opset, torchscript_method=torchscript_method,
                           atol=atol, rtol=rtol, log=log)


def _export_run(path: Path, run_dir: Path | None, out: Path, *, formats: str | Sequence[str], data: Any,
                real_inputs: Any, dynamic_spatial: bool, opset: int | None, torchscript_method: str, atol: float,
                rtol: float, log: Callable[[str], None] | None) -> ExportSummary:
    say = log or (lambda _msg: None)
    model, meta, source = load_for_export(path)
    say(f"exporting {source}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters")
    if real_inputs is None:
        real_inputs, note = real_inputs_for(meta, data, run_dir)
        say(f"verification inputs: random + {note}" if real_inputs is not None else f"verification inputs: random only ({note})")
    example = example_input_for(meta)
    return export_and_verify(model, example, out, formats=formats, metadata=meta, real_inputs=real_inputs,
                             dynamic_spatial=dynamic_spatial, opset=opset, torchscript_method=torchscript_method,
                             atol=atol, rtol=rtol, log=log)
