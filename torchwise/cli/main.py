"""Entry point of the `torchwise` command.

Each subcommand lives in its own module `torchwise.cli.<name>` exposing
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only when their
subcommand is used, so `torchwise --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

# name -> (module, one-line help). Order is the order shown in --help.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("torchwise.cli.demo", "train the embedded digits demo end to end and write a report"),
    "train": ("torchwise.cli.train", "train an image folder or a CSV file with no code"),
    "eval": ("torchwise.cli.eval", "evaluate a run or checkpoint: accuracy, per-class metrics, confusion matrix"),
    "check": ("torchwise.cli.check", "run your own training script and report the silent mistakes in it"),
    "doctor": ("torchwise.cli.doctor", "check that torch really computes on every device; versions, driver, workers"),
    "export": ("torchwise.cli.export", "export a run or checkpoint to ONNX / TorchScript / .pt2, verified against PyTorch"),
    "predict": ("torchwise.cli.predict", "top-k predictions from an exported .onnx model (no torch needed)"),
    "tune": ("torchwise.cli.tune", "hyperparameter search (Optuna): every trial a real train run, pruned, resumable"),
    "lr-find": ("torchwise.cli.lr_find", "sweep the learning rate, plot loss against it and suggest one (same flags as train)"),
    "summary": ("torchwise.cli.summary", "per-layer output shapes, parameters and activation memory of a model"),
    "memory": ("torchwise.cli.memory", "where training memory goes per precision; largest batch that fits; checkpointing"),
}


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = (module, help_text)
    return found


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    import torchwise

    parser = argparse.ArgumentParser(
        prog="torchwise",
        description="The practical PyTorch training chain, done right.",
    )
    parser.add_argument("--version", action="version", version=f"torchwise {torchwise.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module, help_text) in _available().items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sp)
        modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    from torchwise.errors import TorchwiseError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    try:
        return int(importlib.import_module(modules[args.command]).run(args) or 0)
    except TorchwiseError as exc:
        print(f"torchwise {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"torchwise {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
