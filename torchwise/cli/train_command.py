"""`torchwise train`: an image folder or a CSV file to a trained, evaluated, reported run.

    torchwise train --data images/ --out runs/exp1 --epochs 5
    torchwise train --data table.csv --target price --out runs/price
    torchwise train --config run.yaml --set train.lr=0.003
    torchwise train --out runs/exp1 --resume --epochs 10 --extend-schedule restart   (train a finished run longer)

The run directory gets config.yaml, split.json, data_stats.json, meta.json (written once every
check has passed and the checkpoint, on resume, is loaded: before the first training step, so an
interrupted run can still be evaluated), and from the Trainer metrics.csv, tb/, checkpoints/ and
final/; then eval.json and report.html. A refused command changes nothing on disk: every check
(the --out path, the run already there, the settings, the model name, the data) runs first.

This module reads the flags into a RunConfig and prints; the run itself is the library's
torchwise.run.train_run.train_run (also what `torchwise tune` runs as each trial).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Every flag defaults to None: only what the user typed overrides --config (see config.FLAG_KEYS).
    # Values are plain text checked by torchwise.config (not argparse choices), so a typo gets the
    # same "allowed values / did you mean" answer from a flag, a --set or a YAML file.
    data = parser.add_argument_group("data")
    data.add_argument("--data", metavar="PATH", help="image folder (class folders, or train/ and val/) or a CSV file")
    data.add_argument("--target", metavar="COLUMN", help="CSV: the column to predict")
    data.add_argument("--problem", metavar="P", help="CSV: auto (default), classification or regression")
    data.add_argument("--val-fraction", metavar="F", help="held out per class without a val/ folder (default 0.2)")
    data.add_argument("--image-size", metavar="N", help="square input side (default: 224 for torchvision models, "
                                                        "the images' median side up to 64 for smallcnn/mlp)")
    data.add_argument("--missing", metavar="HOW", help="CSV rows with missing values: drop (default) or impute")
    data.add_argument("--decimal", metavar="MARK", help="CSV: the decimal mark of number columns: auto (default), "
                                                         "point or comma")
    data.add_argument("--num-workers", metavar="N", help="DataLoader workers (default auto)")
    model = parser.add_argument_group("model")
    model.add_argument("--model", metavar="NAME", help="auto (default), smallcnn, mlp, resnet18, mobilenet_v3_small, "
                                                       "efficientnet_b0, ..., timm:NAME (timm:convnext_atto) or pkg.module:callable")
    model.add_argument("--weights", metavar="FILE", help="LOCAL pretrained state dict (.safetensors/.pt)")
    model.add_argument("--freeze-backbone", action="store_const", const=True,
                       help="train only the new classification head")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", metavar="N", help="default 10")
    train.add_argument("--max-steps", metavar="N", help="stop after N optimizer steps")
    train.add_argument("--batch-size", metavar="N", help="default 64")
    train.add_argument("--lr", metavar="LR", help="peak learning rate (default 1e-3)")
    train.add_argument("--seed", metavar="N", help="default 0")
    train.add_argument("--precision", metavar="P", help="auto (default), fp32, bf16 or fp16")
    train.add_argument("--device", metavar="DEV", help="auto (default), cpu, cuda, cuda:1, mps")
    train.add_argument("--checkpoint-every", metavar="STEPS", help="default: every epoch")
    train.add_argument("--fast", metavar="PARTS", help="speed switches: auto (default), off, or parts joined by "
                                                       "commas (channels_last, tf32, fused_optimizer, compile, "
                                                       "prefetch, sync_free, cuda_graph); each is reported at start")
    train.add_argument("--profile", metavar="STEPS", help="profile STEPS optimizer steps after a warm-up: a table "
                                                          "of the top operators and a trace for TensorBoard/Perfetto")
    train.add_argument("--resume", action="store_const", const=True,
                       help="continue the run in --out from its last complete checkpoint (uses its config.yaml)")
    train.add_argument("--extend-schedule", metavar="HOW", help="--resume longer than a onecycle/cosine schedule "
                                                                "was laid out for: restart or keep_end")
    out = parser.add_argument_group("output and configuration")
    out.add_argument("--out", metavar="RUNDIR", help="run directory (required)")
    out.add_argument("--config", metavar="FILE", help="YAML file with sections data/model/train/output")
    out.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     help="override any configuration key, e.g. --set train.scheduler=onecycle (repeatable)")
    out.add_argument("--show-config", action="store_true", help="print the resolved configuration and every key; "
                                                                 "do not train")
    out.add_argument("--quiet", action="store_true", help="no progress bars")
    dist = parser.add_argument_group("several processes (DDP through torchrun)")
    dist.add_argument("--nproc", type=int, metavar="N", help="processes on this machine (one per GPU; gloo on CPU)")
    dist.add_argument("--nnodes", type=int, default=1, metavar="M", help="machines taking part (default 1)")
    dist.add_argument("--node-rank", type=int, default=0, metavar="R", help="this machine's rank, 0..M-1")
    dist.add_argument("--master", metavar="HOST:PORT", help="rank 0's machine (default: 127.0.0.1 and a free port)")


# ----------------------------------------------------------------------------- configuration


def resolve_config(args: argparse.Namespace):
    from torchwise import config as cfg

    flags = {dest: getattr(args, dest, None) for dest in cfg.FLAG_KEYS}
    base = None
    # --resume continues with the run's own saved configuration, so the user does not have to repeat
    # every flag; what is given now (a --config file, flags, --set) goes on top, and plan_resume
    # decides which of those changes a resumed run can take.
    if getattr(args, "resume", None) and args.out and (Path(args.out) / "config.yaml").is_file():
        base = cfg.load_yaml(Path(args.out) / "config.yaml")
    config = cfg.resolve(config_file=args.config, base=base, flags=flags, sets=args.set)
    if getattr(args, "quiet", False):
        config = cfg.apply_overrides(config, {"output.progress": False})
    return config


# ----------------------------------------------------------------------------- the command


LAUNCH_FLAGS = {"--nproc": 1, "--nnodes": 1, "--node-rank": 1, "--master": 1}


def _launch(args: argparse.Namespace) -> int:
    """Re-run this same command on N processes through torchrun, without the launch flags."""
    from torchwise.train.distributed.process_group import launch

    argv, rest = [], list(sys.argv[1:])
    while rest:
        item = rest.pop(0)
        name = item.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            if "=" not in item:
                rest.pop(0)
            continue
        argv.append(item)
    return launch(["torchwise", *argv], nproc=args.nproc, nnodes=args.nnodes, node_rank=args.node_rank,
                  master=args.master)


def run(args: argparse.Namespace) -> int:
    import os

    if args.nproc and "LOCAL_RANK" not in os.environ:
        return _launch(args)
    config = resolve_config(args)
    if args.show_config:
        from torchwise import config as cfg
        import yaml

        print(yaml.safe_dump(config.to_dict(), sort_keys=False))
        print("# every key (set with --set section.key=value):")
        print("\n".join("# " + line for line in cfg.describe().splitlines()))
        return 0
    from torchwise.run.train_run import train_run
    from torchwise.train.distributed.process_group import leave

    succeeded = False
    try:
        train_run(config)
        succeeded = True
    except KeyboardInterrupt as exc:
        if not getattr(exc, "resume_said", False):  # interrupted before training (data scan, set-up)
            _say_how_to_resume(config)
        raise  # the CLI's own answer to Ctrl-C: exit status 130
    finally:
        leave(together=succeeded)  # under torchrun: every rank leaves the group before the interpreter ends
    return 0


def _say_how_to_resume(config) -> None:
    """After Ctrl-C: the exact command that continues the run, when it has a checkpoint to continue from."""
    from torchwise.run.resume import resume_command
    from torchwise.train.state import checkpoint as ckpt

    if config.output.dir and os.environ.get("RANK", "0") == "0":
        found = ckpt.list_checkpoints(Path(config.output.dir) / "checkpoints")
        if found:
            print(f"torchwise train: interrupted; {found[-1].name} is saved. Continue with:\n"
                  f"  {resume_command(config)}", file=sys.stderr)
