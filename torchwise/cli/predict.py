"""`torchwise predict MODEL(.onnx|RUNDIR) INPUT...`: top-k classes from the exported model alone.

Uses onnxruntime, numpy and PIL only: this path never imports torch.
"""
from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a .onnx file from `torchwise export`, or a run directory holding export/model.onnx")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders of images, or .csv files")
    parser.add_argument("--top-k", "-k", type=int, default=3, help="how many classes to show per input (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from torchwise.predict import format_table, predict

    results = predict(args.model, args.inputs, top_k=args.top_k)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0
