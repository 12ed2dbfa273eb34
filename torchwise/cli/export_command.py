"""`torchwise export RUNDIR|CHECKPOINT --format onnx,torchscript,pt2 [--out DIR]`, and the demo's
last step: export, verify, then predict from the .onnx file alone (export_verify_predict).

export_verify_predict composes two layers (export below predict), so it lives here, above both.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Sequence


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="RUNDIR|CHECKPOINT",
                        help="a run directory (final weights), a checkpoint directory inside it, or a .safetensors file")
    parser.add_argument("--format", default="onnx", metavar="FORMATS",
                        help="comma-separated: onnx, torchscript, pt2 (default: onnx)")
    parser.add_argument("--out", default=None, metavar="DIR", help="output directory (default: RUNDIR/export)")
    parser.add_argument("--data", default=None, metavar="PATH",
                        help="image folder/files or CSV to verify on real inputs as well (default: the run's data, if found)")
    parser.add_argument("--dynamic-spatial", action="store_true",
                        help="also make image height/width dynamic (default: only the batch axis)")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's current one)")
    parser.add_argument("--torchscript-method", choices=["auto", "script", "trace"], default="auto",
                        help="auto: script, trace if scripting fails (default)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of the verification (default 1e-4)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance of the verification (default 1e-3)")
    parser.add_argument("--json", action="store_true", help="print the export report as JSON at the end")


def run(args: argparse.Namespace) -> int:
    from torchwise.export.api import export_run

    summary = export_run(args.path, args.out, formats=args.format, data=args.data,
                         dynamic_spatial=args.dynamic_spatial, opset=args.opset,
                         torchscript_method=args.torchscript_method, atol=args.atol, rtol=args.rtol,
                         log=None if args.json else print)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, default=str))
        return 0 if summary.ok else 1
    print()
    for fmt, result in summary.results.items():
        if result.ok:
            v = result.verification
            print(f"{fmt:<12} ok      {result.path}  (max abs err {v.max_abs:.1e}, max rel err {v.max_rel:.1e})"
                  + ("  WITH WARNINGS" if result.warnings else ""))
        else:
            print(f"{fmt:<12} FAILED  {(result.error or '').splitlines()[0]}")
    if summary.onnx_path:
        print(f"\npredict with: torchwise predict {summary.onnx_path} IMAGE_OR_CSV ...")
    return 0 if summary.ok else 1


def export_verify_predict(run_dir: str | Path, inputs: Sequence[str] | None = None, *,
                          formats: str | Sequence[str] = ("onnx",), top_k: int = 3,
                          log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """The end of the demo: export the run to ONNX (verified against PyTorch with onnxruntime), then
    predict `inputs` (default: the run's first validation image) from the .onnx file alone.

    Returns {"ok", "onnx", "max_abs_err", "max_rel_err", "predictions"}; never raises for a failed
    export (ok is False and the reason was logged)."""
    from torchwise import predict
    from torchwise.export.api import export_run

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
