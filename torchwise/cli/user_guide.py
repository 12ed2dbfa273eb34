"""docs/guide.md's generated parts: the commands and their flags, the CLI's settings and the Trainer's.

The guide is hand-written prose with generated blocks between markers:

    <!-- generated: NAME (python -m torchwise.cli.user_guide rewrites this block) -->
    ...
    <!-- end: NAME -->

Each block is made from the code's own definitions: the commands from the CLI's parser (the help
texts `torchwise COMMAND --help` shows), the CLI's settings from torchwise.config's dataclass fields
(their help metadata and limits), the Trainer's from torchwise.train.settings' sections. So a setting
added or changed in the code changes the guide, and tests/unit/cli/test_user_guide.py fails until
the guide is regenerated:

    python -m torchwise.cli.user_guide            # rewrites docs/guide.md's generated blocks in place
    python -m torchwise.cli.user_guide --check    # exit 1 when docs/guide.md is out of date
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) [^\n]*-->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.DOTALL)
MARK_NOTE = "(python -m torchwise.cli.user_guide rewrites this block)"


def _cell(text: Any) -> str:
    """Text for a markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def yaml_word(value: Any) -> str:
    """A default as it is written in a YAML config or after --set."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _allowed(tp: Any, meta: typing.Mapping[str, Any]) -> str:
    """What a CLI setting accepts: its choices and its type, with its limits."""
    parts, choices = [], []
    for arg in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,):
        if typing.get_origin(arg) is typing.Literal:
            choices += [str(a) for a in typing.get_args(arg)]
        elif arg is type(None):
            choices.append("none")
        else:
            parts.append({int: "integer", float: "number", bool: "true/false", str: "text"}.get(arg, str(arg)))
    low, high = meta.get("min"), meta.get("max")
    if parts and low is not None and high is not None:
        parts[-1] += f" in {'(' if meta.get('min_open') else '['}{low}, {high}{')' if meta.get('max_open') else ']'}"
    elif parts and low is not None:
        parts[-1] += f" {'>' if meta.get('min_open') else '>='} {low}"
    return ", ".join(parts + choices)


def cli_settings() -> str:
    """One table per section of the run config (`--set section.key=value`, or the YAML file's keys)."""
    from torchwise import config

    out = []
    for section, cls in config.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        out += [f"### {section}", "", "| key | default | accepts | meaning |", "| --- | --- | --- | --- |"]
        for f in dataclasses.fields(cls):
            out.append(f"| `{section}.{f.name}` | `{yaml_word(f.default)}` | {_cell(_allowed(hints[f.name], f.metadata))}"
                       f" | {_cell(f.metadata.get('help', ''))} |")
        out.append("")
    return "\n".join(out)


def trainer_settings() -> str:
    """One table per section of TrainerConfig: the keyword, its type, default and meaning."""
    from torchwise.train import settings

    out = []
    for section, cls in settings.SECTIONS.items():
        doc = (cls.__doc__ or "").strip()
        header = f"### {section} (`{cls.__name__}`)"
        out += [header, ""] + ([doc, ""] if doc and not doc.startswith(cls.__name__ + "(") else [])
        out += ["| keyword | type | default | meaning |", "| --- | --- | --- | --- |"]
        for f in dataclasses.fields(cls):
            out.append(f"| `{f.name}` | `{_cell(f.type)}` | `{f.default!r}` | {_cell(f.metadata.get('help', ''))} |")
        out.append("")
    aliases = ", ".join(f"`{old}=` (now `{new}=`)" for old, new in settings.ALIASES.items())
    out.append(f"Old names still accepted: {aliases}.")
    return "\n".join(out) + "\n"


def _flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """A command's arguments as they are typed (`--epochs EPOCHS`, `inputs`) -> their help texts."""
    rows = {}
    for action in parser._actions:  # argparse keeps a parser's arguments only here
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        value = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
        name = ", ".join(action.option_strings) + value if action.option_strings else action.metavar or action.dest
        rows[name] = action.help or ""
    return rows


def commands() -> str:
    """Every `torchwise` command: what it does, then its flags with their help texts (a command that takes
    all of an earlier command's flags lists only its own, after a line saying so)."""
    from torchwise.cli.main import SUBCOMMANDS, build_parser

    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = ["| command | what it does |", "| --- | --- |"]
    out += [f"| `torchwise {name}` | {_cell(help_text)} |" for name, (_, help_text) in SUBCOMMANDS.items()]
    out.append("")
    seen: dict[str, dict[str, str]] = {}
    for name, (_, help_text) in SUBCOMMANDS.items():
        flags = _flags(sub.choices[name])
        base = next((other for other, theirs in seen.items() if len(theirs) > 3 and theirs.items() <= flags.items()),
                    None)
        out += [f"### torchwise {name}", "", help_text[0].upper() + help_text[1:] + ".", ""]
        if base:
            out += [f"Every flag of `torchwise {base}`, and:", ""]
            flags = {k: v for k, v in flags.items() if k not in seen[base]}
        out += ["| flag | meaning |", "| --- | --- |", *(f"| `{k}` | {_cell(v)} |" for k, v in flags.items()), ""]
        seen[name] = _flags(sub.choices[name])
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {"commands": commands, "cli-settings": cli_settings,
                                            "trainer-settings": trainer_settings}


def render(text: str) -> str:
    """`text` with every generated block made anew; a block with an unknown name is an error."""
    def fill(match: re.Match) -> str:
        name = match.group("name")
        if name not in GENERATORS:
            raise KeyError(f"docs/guide.md has a generated block {name!r}; known: {', '.join(GENERATORS)}")
        return f"<!-- generated: {name} {MARK_NOTE} -->\n{GENERATORS[name]().rstrip()}\n\n<!-- end: {name} -->"

    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[args.index("--guide") + 1]) if "--guide" in args else GUIDE
    old = path.read_text(encoding="utf-8")
    new = render(old)
    if "--check" in args:
        if new != old:
            print(f"{path} is out of date: run python -m torchwise.cli.user_guide", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    if new != old:
        path.write_text(new, encoding="utf-8")
    print(f"{path}: {len(BLOCK.findall(new))} generated blocks {'rewritten' if new != old else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
