"""`torchwise predict MODEL(.onnx|RUNDIR) INPUT...`: top-k classes from the exported model alone.

Uses onnxruntime, numpy and PIL only: this path never imports torch. An image that cannot be read
does not stop the others: it gets a row with its reason, a summary goes to stderr and the exit
status is 3 (PARTIAL), so a script notices without losing the predictions that were made.
"""
from __future__ import annotations

import argparse
import json
import sys

PARTIAL = 3  # some inputs could not be read; every other one was predicted

EPILOG = (f"exit status: 0 every input predicted; 2 nothing predicted (bad model file, no images, wrong "
          f"input kind: the error says why); {PARTIAL} some inputs could not be read (each has a row with its "
          f"reason, listed on stderr too) and all the others were predicted")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("model", metavar="MODEL", help="a .onnx file from `torchwise export`, or a run directory holding export/model.onnx")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="image files, folders of images, or .csv files")
    parser.add_argument("--top-k", "-k", type=int, default=3, help="how many classes to show per input (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--out", metavar="FILE", default=None,
                        help="also write the results to FILE: .csv (one row per input, with an error column; rows "
                             "of a CSV input keep their row number and the ID columns training recognised) or .json")


def run(args: argparse.Namespace) -> int:
    from torchwise.predict import failures, format_table, predict, write_results

    # The data line (how a CSV file was read) goes to stderr: stdout stays the table or JSON alone.
    results = predict(args.model, args.inputs, top_k=args.top_k, log=lambda line: print(line, file=sys.stderr))
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    if args.out:
        print(f"wrote {write_results(results, args.out)}", file=sys.stderr)
    bad = failures(results)
    if not bad:
        return 0
    print(f"torchwise predict: warning: {len(bad)} of {len(results)} inputs could not be read; "
          f"the other {len(results) - len(bad)} were predicted (exit status {PARTIAL}):", file=sys.stderr)
    for row in bad[:20]:
        print(f"  {row['input']}: {row['error']}", file=sys.stderr)
    if len(bad) > 20:
        print(f"  ... and {len(bad) - 20} more (every one has a row in the results)", file=sys.stderr)
    return PARTIAL
