"""`torchwise summary`: per layer output shape, parameters (trainable/frozen) and activation memory.

    torchwise summary --run runs/exp1                          the model of a run (no weights needed)
    torchwise summary --model resnet18 --input-size 3,224,224 --classes 10
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from torchwise.errors import TorchwiseError


def add_model_source(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("model")
    src.add_argument("--run", metavar="RUNDIR", help="the model of a `torchwise train` run (its meta.json)")
    src.add_argument("--model", metavar="NAME", help="smallcnn, mlp, a torchvision name or pkg.module:callable")
    src.add_argument("--input-size", metavar="C,H,W", help="one sample's shape: 3,32,32 for images, 20 for 20 features")
    src.add_argument("--classes", type=int, default=10, metavar="K", help="outputs of the model (default 10)")


def load_model_source(args: argparse.Namespace) -> tuple[Any, tuple[int, ...], str]:
    """(model, one sample's shape, a "name:classes:channels:HxW" spec for fresh processes)."""
    from torchwise.models import build_model, read_meta

    if bool(args.run) == bool(args.model):
        raise TorchwiseError("Say which model: either --run RUNDIR or --model NAME --input-size ...",
                             values={"--run": args.run, "--model": args.model},
                             fix="e.g. torchwise summary --model smallcnn --input-size 3,32,32 --classes 10")
    if args.run:
        meta = read_meta(args.run)
        kwargs = {k: v for k, v in meta["model"].items() if k not in ("weights", "freeze_backbone")}
        shape = tuple(int(s) for s in meta["input_size"])
    else:
        if not args.input_size:
            raise TorchwiseError("--model needs --input-size.", values={"--model": args.model},
                                 fix="pass one sample's shape, e.g. --input-size 3,32,32 (or 20 for 20 features)")
        try:
            shape = tuple(int(s) for s in str(args.input_size).replace("x", ",").split(",") if s.strip())
        except ValueError:
            shape = ()
        if not shape or min(shape) < 1:
            raise TorchwiseError("Cannot read --input-size.", values={"--input-size": args.input_size},
                                 fix="write it as C,H,W (3,32,32) or as a feature count (20)")
        if len(shape) == 3:
            kwargs = {"name": args.model, "num_classes": args.classes, "in_channels": shape[0],
                      "input_size": list(shape[1:])}
        elif len(shape) == 1:
            kwargs = {"name": args.model, "num_classes": args.classes, "in_channels": shape[0], "input_size": None}
        else:
            raise TorchwiseError("--input-size must be C,H,W or a feature count.", values={"--input-size": shape},
                                 fix="e.g. --input-size 3,32,32")
    model = build_model(**kwargs)
    size = kwargs.get("input_size")
    spec = f"{kwargs['name']}:{kwargs['num_classes']}:{kwargs['in_channels']}:" + \
        ("x".join(str(s) for s in size) if size else "")
    return model, shape, spec


@contextlib.contextmanager
def shape_errors_explained(shape: tuple[int, ...]):
    """A forward that fails on the given --input-size is the user's input, not a bug: say so."""
    try:
        yield
    except RuntimeError as exc:
        if "out of memory" in str(exc):
            raise
        raise TorchwiseError("The model does not accept an input of this shape.",
                             values={"input size": ",".join(map(str, shape)), "error": str(exc).splitlines()[0]},
                             fix="images need C,H,W (e.g. 3,32,32); feature vectors a single count (e.g. 20)") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_source(parser)
    parser.add_argument("--batch-size", type=int, default=1, help="batch of the example input (default 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the table as JSON")


def run(args: argparse.Namespace) -> int:
    import torch

    from torchwise.toolbox.summary import summary

    model, shape, _ = load_model_source(args)
    with shape_errors_explained(shape):
        result = summary(model, torch.randn(args.batch_size, *shape))
    print(result.table())
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=2))
    return 0
