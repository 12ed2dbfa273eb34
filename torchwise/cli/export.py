"""`torchwise export RUNDIR|CHECKPOINT --format onnx,torchscript,pt2 [--out DIR]`."""
from __future__ import annotations

import argparse
import json


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
