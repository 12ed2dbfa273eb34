"""Exported model vs PyTorch, output by output, with tolerances.

Errors reported per batch and output: max |onnx - torch| (max abs) and that divided by
max |torch output| (max rel: relative to the output's scale, which stays meaningful where
individual values are near zero). An element fails when |onnx - torch| > atol + rtol * |torch|
(numpy.allclose's rule); the report names the worst failing output, batch and element.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from torchwise.errors import TorchwiseError
from torchwise.export.example_inputs import as_tuple

DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3


class ExportMismatchError(TorchwiseError):
    """The exported model computes something else than the PyTorch model."""


@dataclass
class Comparison:
    label: str          # e.g. "random, batch 1"
    batch: int
    output: str
    max_abs: float
    max_rel: float
    ok: bool
    worst_index: tuple = ()
    top1_agree: float | None = None   # fraction of rows whose argmax agrees (classification outputs)
    error: str | None = None          # the exported model failed to run on this batch


@dataclass
class VerifyReport:
    target: str          # "onnxruntime", "torchscript", "pt2"
    comparisons: list[Comparison] = field(default_factory=list)
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL

    @property
    def ok(self) -> bool:
        return bool(self.comparisons) and all(c.ok for c in self.comparisons)

    @property
    def max_abs(self) -> float:
        return max((c.max_abs for c in self.comparisons), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((c.max_rel for c in self.comparisons), default=0.0)

    @property
    def worst(self) -> Comparison | None:
        return max(self.comparisons, key=lambda c: (not c.ok, c.max_rel), default=None)

    def lines(self) -> list[str]:
        out = []
        for c in self.comparisons:
            agree = f"  top-1 agree {c.top1_agree * 100:.1f}%" if c.top1_agree is not None else ""
            if c.error:
                out.append(f"  {c.label:<22} output {c.output:<10} FAILED TO RUN: {c.error}")
                continue
            out.append(f"  {c.label:<22} output {c.output:<10} max abs {c.max_abs:.2e}  max rel {c.max_rel:.2e}"
                       f"  {'ok' if c.ok else 'FAIL'}{agree}")
        return out

    def summary(self) -> str:
        verdict = "matches" if self.ok else "DOES NOT match"
        return (f"{self.target} {verdict} PyTorch on {len({c.label for c in self.comparisons})} batches: max abs err "
                f"{self.max_abs:.2e}, max rel err {self.max_rel:.2e} (tolerance atol {self.atol:g} + rtol {self.rtol:g})")

    def raise_if_failed(self) -> None:
        if self.ok:
            return
        worst = self.worst
        if worst.error:
            raise ExportMismatchError(
                f"The {self.target} export fails to run on the {worst.label} batch, where PyTorch works.",
                values={"error": worst.error},
                fix=("the export fixed a size that this input changes (e.g. adaptive pooling to a size > 1 or a "
                     "reshape to constants becomes static): export without --dynamic-spatial, or use global "
                     "pooling (AdaptiveAvgPool2d(1)) / x.flatten(1) in the model"))
        raise ExportMismatchError(
            f"The {self.target} export does not match PyTorch: output '{worst.output}' differs on the {worst.label} batch.",
            values={"max abs err": f"{worst.max_abs:.3e}", "max rel err": f"{worst.max_rel:.3e}",
                    "worst element": str(worst.worst_index), "tolerance": f"atol {self.atol:g} + rtol {self.rtol:g} * |torch|"},
            fix=("check for layers that behave differently in export (custom autograd functions, in-place ops on "
                 "inputs, randomness in forward); compare intermediate outputs; if the error is float noise in a deep "
                 "model, loosen --atol/--rtol"))


def compare_arrays(label: str, name: str, got, ref, atol: float, rtol: float) -> Comparison:
    import numpy as np

    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return Comparison(label, int(ref.shape[0]) if ref.ndim else 1, name, float("inf"), float("inf"), False,
                          (f"shape {got.shape} vs {ref.shape}",))
    top1 = None
    if ref.ndim == 2 and ref.shape[1] > 1 and np.isfinite(ref).all():
        top1 = float((np.nan_to_num(got, nan=-np.inf).argmax(1) == ref.argmax(1)).mean())
    with np.errstate(invalid="ignore"):
        diff = np.abs(got - ref)
    # NaN/inf where PyTorch has the same NaN/inf is agreement; anywhere else it is an infinite error.
    same = (np.isnan(got) & np.isnan(ref)) | (np.isinf(got) & (got == ref))
    diff = np.where(same, 0.0, np.where(np.isfinite(diff), diff, np.inf))
    ref = np.where(np.isfinite(ref), ref, 0.0)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    max_rel = max_abs / max(scale, 1e-12) if max_abs else 0.0
    excess = diff - (atol + rtol * np.abs(ref))
    ok = bool((excess <= 0).all())
    worst_index = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape)) if excess.size else ()
    return Comparison(label, int(ref.shape[0]) if ref.ndim else 1, name, max_abs, max_rel, ok, worst_index, top1)


def _flatten(outputs) -> list:
    import torch

    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, dict):
        return [t for v in outputs.values() for t in _flatten(v)]
    if isinstance(outputs, (tuple, list)):
        return [t for v in outputs for t in _flatten(v)]
    return []


def torch_outputs(model, batch: tuple) -> list:
    import torch

    with torch.no_grad():
        return [t.detach().cpu().float().numpy() for t in _flatten(model(*batch))]


def random_like(example: tuple, batch: int, seed: int) -> tuple:
    """Random inputs shaped like `example` with another batch size (normal for floats, in-range for ints)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in example:
        shape = (batch, *t.shape[1:])
        if t.is_floating_point():
            out.append(torch.randn(shape, generator=gen, dtype=t.dtype))
        else:
            high = int(t.max()) + 1 if t.numel() else 2
            out.append(torch.randint(0, max(high, 1), shape, generator=gen, dtype=t.dtype))
    return tuple(out)


def verification_batches(example_input: Any, real_batches: Sequence[Any] | None = None,
                         sizes: Sequence[int] = (1, 5), dynamic_spatial: bool = False) -> list[tuple[str, tuple]]:
    """(label, inputs) pairs: random inputs at two batch sizes, and real inputs at two batch sizes;
    with dynamic_spatial, also random images of another height and width (an exporter can bake
    the example's size into e.g. adaptive pooling, which only such an input reveals)."""
    import torch

    example = as_tuple(example_input)
    batches = [(f"random, batch {n}", random_like(example, n, seed=100 + n)) for n in sizes]
    if dynamic_spatial and example and isinstance(example[0], torch.Tensor) and example[0].dim() == 4:
        h, w = example[0].shape[2:]
        other = tuple(torch.nn.functional.interpolate(t, size=(h + 8, w + 4)) if t.dim() == 4 else t
                      for t in random_like(example, 2, seed=99))
        batches.append((f"random, batch 2, {h + 8}x{w + 4}", other))
    for i, real in enumerate(real_batches or []):
        real = as_tuple(real)
        batches.append((f"real, batch {real[0].shape[0]}", real))
    return batches


def real_batch_pair(x, sizes: Sequence[int] = (3, 16)) -> list:
    """Two real batches of different sizes (the first rows of `x`, a tensor/array of examples)."""
    import torch

    x = torch.as_tensor(x)
    n = len(x)
    if n == 0:
        return []
    a, b = min(sizes[0], n), min(sizes[1], n)
    if a == b:
        return [x[: max(1, n // 2)], x] if n > 1 else [x]
    return [x[:a], x[:b]]


def verify_onnx(model, onnx_path: str | Path, batches: Sequence[tuple[str, Any]], *, atol: float = DEFAULT_ATOL,
                rtol: float = DEFAULT_RTOL, raise_on_fail: bool = False) -> VerifyReport:
    """Run the .onnx in a real onnxruntime InferenceSession on each batch and compare with `model`."""
    import numpy as np

    from torchwise.export.onnx_file import open_session

    session = open_session(onnx_path)
    names = [i.name for i in session.get_inputs()]
    out_names = [o.name for o in session.get_outputs()]
    model = copy.deepcopy(model).to("cpu").eval()
    report = VerifyReport("onnxruntime", atol=atol, rtol=rtol)
    for label, batch in batches:
        batch = tuple(t.detach().cpu() for t in as_tuple(batch))
        feeds = {name: np.ascontiguousarray(t.numpy()) for name, t in zip(names, batch)}
        ref = torch_outputs(model, batch)
        try:
            got = session.run(None, feeds)
        except Exception as exc:  # onnxruntime rejects the input: a shape baked into the graph
            message = str(exc).split("Status Message:")[-1].strip()[:300]
            report.comparisons.append(Comparison(label, len(batch[0]), out_names[0], float("inf"), float("inf"),
                                                 False, (), None, message))
            continue
        for name, g, r in zip(out_names, got, ref):
            report.comparisons.append(compare_arrays(label, name, g, r, atol, rtol))
    if raise_on_fail:
        report.raise_if_failed()
    return report


def verify_callable(target: str, exported: Callable, model, batches: Sequence[tuple[str, Any]], *,
                    atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL) -> VerifyReport:
    """Compare any exported torch callable (TorchScript module, ExportedProgram.module()) with `model`."""
    model = copy.deepcopy(model).to("cpu").eval()
    report = VerifyReport(target, atol=atol, rtol=rtol)
    for label, batch in batches:
        batch = tuple(t.detach().cpu() for t in as_tuple(batch))
        got = torch_outputs(exported, batch)
        ref = torch_outputs(model, batch)
        names = ["logits"] if len(ref) == 1 else [f"output_{i}" for i in range(len(ref))]
        for name, g, r in zip(names, got, ref):
            report.comparisons.append(compare_arrays(label, name, g, r, atol, rtol))
        if len(got) != len(ref):
            report.comparisons.append(Comparison(label, 0, "outputs", float("inf"), float("inf"), False,
                                                 (f"{len(got)} outputs vs {len(ref)}",)))
    return report
