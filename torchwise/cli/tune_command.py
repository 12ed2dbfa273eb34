"""`torchwise tune`: hyperparameter search where every trial is a real `torchwise train` run.

    torchwise tune --config run.yaml --space space.yaml --trials 30 --out runs/search
    torchwise tune --config run.yaml --space space.yaml --trials 30 --out runs/search --parallel 2 --pruner halving
    (interrupted? run the same command again: finished trials are kept, the search goes on to 30)

space.yaml maps config keys to distributions:

    train.lr:           {type: loguniform, low: 1.0e-4, high: 1.0e-1}
    train.weight_decay: {type: uniform, low: 0.0, high: 0.1}
    train.batch_size:   {type: int, low: 16, high: 128, step: 16}
    train.scheduler:    [cosine, onecycle]          # categorical

The study directory gets study.db, trials/trial-NNNN/ (one run directory each), trials.csv,
best.yaml (ready for `torchwise train --config`), optimization_history.png,
param_importances.png, intermediate_values.png and summary.json.
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="the run config to start from (YAML, as for `train`)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a key of the run config, e.g. --set train.epochs=5 (repeatable)")
    parser.add_argument("--space", required=True, metavar="FILE",
                        help="search space YAML: config key -> {type: loguniform|uniform|int|categorical, ...}")
    parser.add_argument("--trials", required=True, type=int, metavar="N",
                        help="trials the study should hold when done (rerun to resume up to N)")
    parser.add_argument("--out", metavar="DIR", help="study directory (default: the config's output.dir + '-tune', else ./tune)")
    parser.add_argument("--storage", metavar="URL", help="Optuna storage (default: sqlite:///DIR/study.db)")
    parser.add_argument("--study-name", metavar="NAME", help="study name in the storage (default: torchwise)")
    parser.add_argument("--parallel", type=int, default=1, metavar="K", help="trials run at once, one process each")
    parser.add_argument("--pruner", default="median", metavar="P",
                        help="median (default), halving (successive halving) or none")
    parser.add_argument("--metric", default="val_loss", metavar="NAME",
                        help="validation metric to optimize: val_loss (default), val_acc, val_top5, val_mae")
    parser.add_argument("--direction", metavar="min|max", help="default: from the metric (min for losses)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="sampler seed (default 0)")
    parser.add_argument("--max-failures", type=int, default=5, metavar="N",
                        help="stop when this many trials in a row failed (default 5)")
    parser.add_argument("--apply", metavar="FILE",
                        help="also copy the best config to FILE, ready for `torchwise train --config FILE`")


def run(args: argparse.Namespace) -> int:
    from torchwise.tune.search import tune

    tune(args.config, args.space, trials=args.trials, out=args.out, storage=args.storage,
         study_name=args.study_name, parallel=args.parallel, pruner=args.pruner, metric=args.metric,
         direction=args.direction, seed=args.seed, sets=args.set, max_failures=args.max_failures,
         apply=args.apply, log=lambda text: print(text, flush=True))
    return 0
