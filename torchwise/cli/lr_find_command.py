"""`torchwise lr-find`: the learning-rate sweep for a run, with the same flags and config as `train`.

    torchwise lr-find --data images/ --batch-size 64
    torchwise lr-find --config run.yaml --apply        (writes the suggestion into run.yaml's train.lr)

Writes lr_find.png (loss against lr, both suggestions marked) and lr_find.json to --out (default
./lr_find). Nothing is trained for real: the model is built, swept and thrown away.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchwise import files
from torchwise.cli import train_command as train_cli
from torchwise.errors import TorchwiseError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    train_cli.add_arguments(parser)
    group = parser.add_argument_group("lr-find")
    group.add_argument("--start-lr", type=float, default=1e-7, help="first learning rate (default 1e-7)")
    group.add_argument("--end-lr", type=float, default=10.0, help="last learning rate (default 10)")
    group.add_argument("--steps", type=int, default=100, help="sweep steps (default 100)")
    group.add_argument("--rule", choices=["steepest", "min10"], default="steepest",
                       help="which suggestion --apply uses: steepest descent (default) or min/10")
    group.add_argument("--apply", action="store_true",
                       help="write the suggested lr into the run config: the --config file, or "
                            "OUT/config.yaml when there is none")


def run(args: argparse.Namespace) -> int:
    from torchwise.train.state import run_lock

    config = train_cli.resolve_config(args)
    out = Path(config.output.dir or "lr_find")
    # it writes lr_find.* (and, with --apply, config.yaml) into --out, which may be a run folder: one writer
    with run_lock.claim(out):
        return _sweep(args, config, out)


def _sweep(args: argparse.Namespace, config, out: Path) -> int:
    import torch

    from torchwise.data.tasks import prepare_task
    from torchwise.models import build_model
    from torchwise.run.trainer_setup import make_trainer
    from torchwise.train.recipes.lr_find import run_lr_find
    from torchwise.train.state.reproducibility import seed_everything

    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    task = prepare_task(config, None)
    seed_everything(config.train.seed)
    model = build_model(**task.model_kwargs, weights=config.model.weights)
    trainer = make_trainer(config, task, model, None, task.meta())
    result = run_lr_find(trainer, plot=out / "lr_find.png", start_lr=args.start_lr, end_lr=args.end_lr,
                         num_steps=args.steps, rule=args.rule)
    files.write_text(out / "lr_find.json", json.dumps(result.to_dict(), indent=2), root=out)
    print(result.report())
    print(f"  curve: {out / 'lr_find.json'}")
    if args.apply:
        path = apply_lr(config, result.suggested_lr, Path(args.config) if args.config else out / "config.yaml",
                        root=None if args.config else out)
        print(f"applied: train.lr = {result.suggested_lr:.3g} written to {path}; train with: "
              f"torchwise train --config {path}" + ("" if config.output.dir else " --out RUNDIR"))
    return 0


def apply_lr(config, lr: float, path: Path, root: Path | None = None) -> Path:
    """Set train.lr in the YAML file at `path` (other keys kept); a new file gets the whole config. `root`: the
    run folder `path` lies in (written atomically, never through a link out of it); without one, the user's
    own file is written where it is (a link of theirs followed, as they meant)."""
    import yaml

    from torchwise import safe_yaml

    lr = float(f"{lr:.3g}")
    if path.is_file():
        data = safe_yaml.load(path.read_text(), source=str(path)) or {}
        if not isinstance(data, dict):
            raise TorchwiseError("The config file is not a mapping of sections.", values={"path": str(path)},
                                 fix="start the file with sections such as `train:`")
        section = data.setdefault("train", {}) or {}
        section["lr"] = lr
        data["train"] = section
    else:
        data = config.to_dict()
        data["train"]["lr"] = lr
        data["train"]["resume"] = False
    from torchwise import config as cfg

    cfg.from_dict(data)  # validate before writing
    if root is not None:
        files.write_text(path, yaml.safe_dump(data, sort_keys=False), root=root)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
