"""Runs one of examples/*.py through its build_trainer(), for the kill-and-resume tests of the examples.

usage: example_run.py EXAMPLE.py OUT_DIR [--epochs N] [--kill-at-step K] [--resume] [--checks]
Prints one line: steps, resumed_from, findings (their ids) and the last evaluation's metrics.
"""
import argparse
import importlib.util
import json
import os
import signal

import torch


def main():
    torch.set_num_threads(1)  # the runs compared are made at different moments: one thread sums in one order
    p = argparse.ArgumentParser()
    p.add_argument("example")
    p.add_argument("out_dir")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--kill-at-step", type=int)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--checks", action="store_true")
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("example", args.example)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    trainer = example.build_trainer(args.out_dir, epochs=args.epochs, resume=args.resume, checkpoint_every=5,
                                    progress=False, checks=args.checks, tensorboard=False)
    if args.kill_at_step is not None:
        def die(step, **_):
            if step == args.kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)

        trainer.on("step_end", die)
    result = trainer.fit()
    print(json.dumps({"steps": result.steps, "resumed_from": str(result.resumed_from),
                      "findings": [f["id"] for f in result.findings], "last": result.history[-1]}))


if __name__ == "__main__":
    main()
