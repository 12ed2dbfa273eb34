"""Entry point of the `torchwise` command.

Each subcommand lives in its own module `torchwise.cli.<name>_command` (lr-find: lr_find_command) exposing
`add_arguments(parser)` and `run(args) -> int`. Modules are imported only when their
subcommand is used, so `torchwise --help` stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import importlib.util
import re
import sys

# name -> (module, one-line help). Order is the order shown in --help.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("torchwise.cli.demo_command", "train the embedded digits demo end to end and write a report"),
    "train": ("torchwise.cli.train_command", "train an image folder or a CSV file with no code"),
    "eval": ("torchwise.cli.eval_command", "evaluate a run or checkpoint: accuracy, per-class metrics, confusion matrix"),
    "check": ("torchwise.cli.check_command", "run your own training script and report the silent mistakes in it"),
    "doctor": ("torchwise.cli.doctor_command", "check that torch really computes on every device; versions, driver, workers"),
    "export": ("torchwise.cli.export_command", "export a run or checkpoint to ONNX / TorchScript / .pt2, verified against PyTorch"),
    "predict": ("torchwise.cli.predict_command", "top-k predictions from an exported .onnx model (no torch needed)"),
    "tune": ("torchwise.cli.tune_command", "hyperparameter search (Optuna): every trial a real train run, pruned, resumable"),
    "lr-find": ("torchwise.cli.lr_find_command", "sweep the learning rate, plot loss against it and suggest one (same flags as train)"),
    "summary": ("torchwise.cli.summary_command", "per-layer output shapes, parameters and activation memory of a model"),
    "memory": ("torchwise.cli.memory_command", "where training memory goes per precision; largest batch that fits; checkpointing"),
}


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = (module, help_text)
    return found


def closest(word: str, choices: list[str], n: int = 3) -> list[str]:
    """The choices closest to a mistyped `word`: those it starts (an abbreviation), then look-alikes."""
    starts = sorted(c for c in choices if c.startswith(word) and c != word)
    bare = {c.lstrip("-"): c for c in choices}  # compared without the dashes every flag shares
    alike = [bare[c] for c in difflib.get_close_matches(word.lstrip("-"), list(bare), n=n, cutoff=0.7)]
    # --learning-rate for --lr: the initials of a long spelling
    parts = [p for p in word.lstrip("-").split("-") if p]
    initials = [c for c in choices if len(parts) > 1 and c.lstrip("-") == "".join(p[0] for p in parts)]
    # --target-column for --target: a real flag the word extends
    extends = sorted((c for c in choices if word.startswith(c + "-")), key=len, reverse=True)
    return list(dict.fromkeys(starts[:n] + alike + initials + extends))[:n]


class Parser(argparse.ArgumentParser):
    """argparse with two changes: a flag must be spelled out (an abbreviation that works today would
    silently mean another flag once a longer one is added: it is refused with the flag it stands for),
    and an error names the closest real subcommand or flag."""

    argv: list[str] = []  # the command line being parsed (main), for error messages

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def flags(self) -> list[str]:
        return sorted(o for o in self._option_string_actions if o.startswith("--"))

    def error(self, message: str):  # argparse's errors: exit status 2, as argparse
        match = re.search(r"invalid choice: '([^']*)'", message)
        if match:
            sub = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
            choices = list(sub[0].choices) if sub else []
            guess = closest(match.group(1), choices)
            if guess:
                message += f"\n  did you mean: {', '.join(guess)}"
        elif " required" in message and Parser.argv:
            # an unknown flag is the likelier mistake: say it first (argparse checks required flags first)
            own = set(self._option_string_actions)
            tokens = Parser.argv[:Parser.argv.index("--")] if "--" in Parser.argv else Parser.argv
            unknown = [t for t in tokens if t.startswith("--") and t.split("=", 1)[0] not in own
                       and t.split("=", 1)[0] != self.prog.rpartition(" ")[2]]
            if unknown:
                message = unknown_arguments(self, unknown) + "\n  (and " + message + ")"
        elif "expected one argument" in message:
            message += "\n  fix: give the value right after the flag, e.g. --epochs 3"
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def unknown_arguments(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The error text for arguments no flag of `parser` takes, with the closest real flags."""
    lines = []
    flags = parser.flags() if isinstance(parser, Parser) else sorted(parser._option_string_actions)
    unknown = [x for x in extras if x.startswith("-") and x != "-"]
    if unknown:
        lines.append(f"unknown flag{'s' if len(unknown) > 1 else ''}: {' '.join(unknown)}")
        fixes = []
        for token in unknown:
            name = token.split("=", 1)[0]
            guess = closest(name, flags) if name.startswith("--") else closest("-" + name.lstrip("-"), flags)
            if guess:
                lines.append(f"  {name}: did you mean {' or '.join(guess)}?")
                fixes.append(guess[0])
            else:
                lines.append(f"  {name}: no flag looks like it")
        plain = [x for i, x in enumerate(extras) if x not in unknown
                 and not (i and extras[i - 1] in unknown and "=" not in extras[i - 1])]  # an unknown flag's value
        if plain:
            lines.append(f"  unexpected values: {' '.join(plain)}")
        fix = f"use {', '.join(fixes)}" if fixes else "use one of the flags in the usage above"
    else:
        lines.append(f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}")
        fix = "values go right after their flag (for example --data FILE.csv); see the usage above"
    lines.append(f"  fix: {fix} ({parser.prog} --help lists every flag)")
    return "\n".join(lines)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    from torchwise.version import __version__

    parser = Parser(
        prog="torchwise",
        description="The practical PyTorch training chain, done right.",
    )
    parser.add_argument("--version", action="version", version=f"torchwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module, help_text) in _available().items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sp)
        modules[name] = module
    return parser, modules


def _readable_console() -> None:
    """A file name that is not UTF-8 (b"caf\\xe9.png") is printed as readable text ("café.png"), never
    as raw bytes or a UnicodeEncodeError in the middle of a message."""
    from torchwise.file_names import READABLE

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # a stream that is not a TextIOWrapper
            stream.reconfigure(errors=READABLE)


def main(argv: list[str] | None = None) -> int:
    from torchwise.errors import TorchwiseError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser, modules = build_parser()
    Parser.argv = argv
    args, extras = parser.parse_known_args(argv)
    if extras:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        where = sub.choices.get(args.command, parser) if args.command else parser
        where.print_usage(sys.stderr)
        print(f"{where.prog}: error: {unknown_arguments(where, extras)}", file=sys.stderr)
        return 2
    if not args.command:
        parser.print_help()
        return 0
    if args.command != "check":  # check's console is the user's script's: it is never changed
        _readable_console()
    try:
        return int(importlib.import_module(modules[args.command]).run(args) or 0)
    except TorchwiseError as exc:
        print(f"torchwise {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"torchwise {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # out of memory where no layer said it: an error, not a traceback
        from torchwise.errors import is_out_of_memory, out_of_memory

        if not is_out_of_memory(exc):
            raise
        error = out_of_memory(exc, f"running torchwise {args.command}",
                              fix="give it less at a time (a smaller --batch-size, fewer inputs), or run it where "
                                  "more memory is free; close what else uses the machine's memory (or raise the "
                                  "process' memory limit, ulimit -v)")
        print(f"torchwise {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
