"""`torchwise doctor [--json]`: check that this install really computes, on every device."""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON (for bug reports and CI)")
    parser.add_argument("--workers", type=int, default=2, metavar="N",
                        help="DataLoader workers to start in the worker check (default: 2)")


def run(args: argparse.Namespace) -> int:
    from torchwise.env.doctor import format_report, run_doctor

    progress = None
    if not args.json and sys.stderr.isatty():
        def progress(name: str) -> None:
            print(f"\rchecking {name:<20}", end="", file=sys.stderr, flush=True)
    report = run_doctor(dataloader_workers=args.workers, progress=progress)
    if progress:
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(format_report(report))
    return 0 if report.ok else 1
