"""examples/staged_finetuning.py run for the staged kill-and-resume test.

usage: staged_run.py OUT_DIR [--kill-at-step K] [--resume]
Prints one JSON line: each stage's steps and resumed_from.
"""
import argparse
import importlib.util
import json
import os
import signal
from pathlib import Path

import torch


class KillAt:
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, **_):
        if step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--kill-at-step", type=int)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()
    example = Path(__file__).resolve().parents[2] / "examples" / "staged_finetuning.py"
    spec = importlib.util.spec_from_file_location("example", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    callbacks = [KillAt(args.kill_at_step)] if args.kill_at_step is not None else []
    stages = module.train_in_stages(args.out_dir, resume=args.resume, callbacks=callbacks, checkpoint_every=10,
                                    progress=False, checks=False, tensorboard=False)
    print(json.dumps([{"steps": s.steps, "resumed_from": str(s.resumed_from), "rows": len(s.history)}
                      for s in stages]))


if __name__ == "__main__":
    main()
