"""TorchScript export: script first (it keeps Python control flow), trace as the fallback.

A trace records the operations one example input happened to run. A branch on tensor values
(`if x.sum() > 0:`) becomes whichever side that input took, silently. So after tracing we look for
it twice: the tracer's own TracerWarnings, and the traced module's outputs against eager PyTorch on
inputs with different values (negated, shifted, scaled, zeros, another batch size). Either sign
gives a loud warning; a disagreement fails the export.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from torchwise.export.example_inputs import cpu_example
from torchwise.export.onnx import ExportError
from torchwise.export.staged import in_memory, staged_export
from torchwise.export.verify import DEFAULT_ATOL, DEFAULT_RTOL, Comparison, VerifyReport, verify_callable


@dataclass
class TorchScriptExport:
    path: Path | None
    method: str                          # "script" or "trace"
    verification: VerifyReport | None = None
    script_error: str | None = None      # why scripting failed (when we traced)
    tracer_warnings: list[str] = field(default_factory=list)
    data_dependent: bool = False         # the traced graph does not follow the model on other inputs
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.path is not None and self.verification is not None and self.verification.ok


def probe_inputs(example: tuple, seed: int = 7) -> list[tuple[str, tuple]]:
    """Inputs with the example's shapes but different values: they take other branches if any exist."""
    import torch

    from torchwise.export.verify import random_like

    def each(fn) -> tuple:
        return tuple(fn(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example)

    probes = [
        ("example", example),
        ("negated example", each(lambda t: -t)),
        ("example * 4 + 3", each(lambda t: t * 4 + 3)),
        ("-|example| - 1", each(lambda t: -t.abs() - 1)),
        ("zeros", each(torch.zeros_like)),
    ]
    n = example[0].shape[0] if example and isinstance(example[0], torch.Tensor) and example[0].dim() else 2
    probes.append((f"random, batch {n + 3}", random_like(example, n + 3, seed)))
    probes.append(("random, batch 1", random_like(example, 1, seed + 1)))
    return probes


def _script(model):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(model)


def _trace(model, example: tuple):
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(model, example, check_trace=False)
    tracer = [str(w.message).split("\n")[0].split(". ")[0].rstrip(".") + "." for w in caught
              if issubclass(w.category, torch.jit.TracerWarning)]
    # Dedupe: the tracer repeats a warning for every call site it passes through.
    return traced, list(dict.fromkeys(tracer))


def export_torchscript(model, example_input: Any, path: str | Path, *, method: str = "auto",
                       extra_batches: Sequence[tuple[str, Any]] = (), atol: float = DEFAULT_ATOL,
                       rtol: float = DEFAULT_RTOL) -> TorchScriptExport:
    """Write a TorchScript file; `method` is "auto" (script, else trace), "script" or "trace"."""
    import torch

    if method not in ("auto", "script", "trace"):
        raise ValueError(f"method must be auto, script or trace, not {method!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).to("cpu").eval()
    example = cpu_example(example_input)
    module, result = _script_or_trace(model, example, path, method)
    # Save and reload: verify the file, not the in-memory module.
    with staged_export(path) as staged, warnings.catch_warnings():  # whole or not at all
        warnings.simplefilter("ignore", FutureWarning)
        # Serialized in memory first: torch's zip writer aborts the whole process (a C++ terminate) when the disk
        # refuses a write, where a plain write raises an error that can be said and cleaned up.
        staged.write_bytes(in_memory(torch.jit.save, module))
        loaded = torch.jit.load(str(staged), map_location="cpu")
    batches = list({label: b for label, b in [*probe_inputs(example), *extra_batches]}.items())
    result.verification = verify_callable(f"torchscript ({result.method})", loaded, model, batches, atol=atol, rtol=rtol)
    if result.method == "trace":
        failed = [c for c in result.verification.comparisons if not c.ok]
        result.data_dependent = bool(failed)
        if failed or result.tracer_warnings:
            result.warnings.append(_trace_warning(failed, result.tracer_warnings, result.script_error))
    return result


def _script_or_trace(model, example: tuple, path: Path, method: str):
    """(module, its TorchScriptExport without verification): scripted, or traced when `method` allows
    it and scripting failed. Raises ExportError when neither works."""
    import torch

    script_error = None
    if method in ("auto", "script"):
        try:
            return _script(model), TorchScriptExport(path, "script")
        except Exception as exc:
            script_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            if method == "script":
                raise ExportError("TorchScript scripting failed.", values={"error": script_error},
                                  fix="use --torchscript-method trace (check its warnings), or export to ONNX / pt2 "
                                      "instead; TorchScript is deprecated in recent PyTorch") from None
    try:
        with torch.no_grad():
            module, tracer = _trace(model, example)
    except Exception as exc:
        raise ExportError("TorchScript export failed: both scripting and tracing failed.",
                          values={"script error": script_error or "(not tried)",
                                  "trace error": f"{type(exc).__name__}: {str(exc)[:300]}"},
                          fix="export to ONNX or pt2 instead") from None
    return module, TorchScriptExport(path, "trace", script_error=script_error, tracer_warnings=tracer)


def _trace_warning(failed: Sequence[Comparison], tracer_warnings: Sequence[str], script_error: str | None) -> str:
    """The loud warning for a trace that may have frozen a branch: `failed` comparisons with eager
    PyTorch, or the tracer's own warnings."""
    msg = "TRACED MODEL MAY NOT FOLLOW YOUR CODE: "
    if failed:
        labels = ", ".join(dict.fromkeys(c.label for c in failed))
        msg += (f"the traced module disagrees with eager PyTorch on inputs [{labels}] "
                f"(max abs err {max(c.max_abs for c in failed):.3g}): forward() has data-dependent control "
                "flow (or shape-dependent code) that the trace froze to the example's path.")
    else:
        msg += "the tracer warned that values were turned into constants (outputs still matched on the probes)."
    if tracer_warnings:
        msg += " Tracer said: " + " | ".join(tracer_warnings[:3])
    msg += (" Fix: make forward() scriptable (type annotations, no unsupported Python) so that "
            "torch.jit.script keeps the branch, or use torch.where / torch.cond.")
    if script_error:
        msg += f" Scripting failed with: {script_error}"
    return msg
