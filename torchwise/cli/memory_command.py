"""`torchwise memory`: where the memory of a training step goes, per precision; batch-size finder.

    torchwise memory --model smallcnn --input-size 3,64,64 --batch-size 128 --measure
    torchwise memory --run runs/exp1 --batch-size 256 --optimizer sgd_momentum
    torchwise memory --model resnet18 --input-size 3,224,224 --find-batch-size --budget 8GB
    torchwise memory --model smallcnn --input-size 3,64,64 --checkpointing     (measured saving)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchwise.cli.summary_command import add_model_source, load_model_source, shape_errors_explained


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_source(parser)
    parser.add_argument("--batch-size", type=int, default=32, help="batch to account for (default 32)")
    parser.add_argument("--optimizer", default="adamw", help="adamw (default), adam, sgd, sgd_momentum, "
                                                             "sgd_nesterov, rmsprop, adagrad, ...")
    parser.add_argument("--precision", action="append", choices=["fp32", "bf16", "fp16"],
                        help="repeatable; default: fp32 and each AMP mode of the device")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, auto")
    parser.add_argument("--measure", action="store_true", help="also measure real training steps (CUDA allocator "
                                                               "counters; on CPU the peak RSS of a fresh process)")
    parser.add_argument("--find-batch-size", action="store_true", help="the largest batch that fits "
                                                                       "(CUDA: real steps; CPU: against --budget)")
    parser.add_argument("--budget", metavar="SIZE", help="memory budget, e.g. 4GB (CPU default: 80%% of available)")
    parser.add_argument("--checkpointing", action="store_true",
                        help="measure the peak without and with gradient checkpointing")
    parser.add_argument("--threads", type=int, help="CPU threads for torch ops")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def run(args: argparse.Namespace) -> int:
    import torch

    from torchwise.toolbox.memory import bytes_from_text, checkpointing_saving, memory_estimate
    from torchwise.toolbox.summary import format_bytes

    if args.threads:
        torch.set_num_threads(args.threads)
    model, shape, _ = load_model_source(args)
    example = torch.randn(1, *shape)
    out: dict = {}
    with shape_errors_explained(shape):
        from torchwise.toolbox.summary import summary

        summary(model, example)  # one cheap forward: a wrong --input-size is reported before any measuring
    report = memory_estimate(model, example, batch_size=args.batch_size, optimizer=args.optimizer,
                             precisions=tuple(args.precision) if args.precision else None, device=args.device,
                             measure=args.measure, threads=args.threads)
    print(report.table())
    out["memory"] = report.to_dict()
    if args.checkpointing:
        saving = checkpointing_saving(model, example, batch_size=args.batch_size, optimizer=args.optimizer,
                                      precision=(args.precision or ["fp32"])[0], device=args.device,
                                      threads=args.threads)
        print(f"gradient checkpointing ({saving['precision']}, batch {saving['batch_size']}): measured peak "
              f"{format_bytes(saving['without'])} -> {format_bytes(saving['with'])} "
              f"({100 * saving['saving']:.0f}% less)")
        out["checkpointing"] = saving
    if args.find_batch_size:
        from torchwise.toolbox.batch_size import find_batch_size

        found = find_batch_size(model, example, device=args.device, precision=(args.precision or ["fp32"])[0],
                                optimizer=args.optimizer, budget=bytes_from_text(args.budget) if args.budget else None)
        print(found.report())
        out["batch_size"] = {"batch_size": found.batch_size, "criterion": found.criterion, "tried": found.tried}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0
