"""A training run for the distributed tests; start it with torchrun or as a plain process.

usage: ddp_run.py OUT_DIR [--batch B] [--epochs E] [--nan-rank R --nan-call C] [--die-rank R --die-step S]
                  [--checkpoint-every N] [--resume]
"""
import argparse
import json
import math
import os
import signal

import torch
from safetensors.torch import save_file
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import torchwise


def data():
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y)
    return TensorDataset(x[:1536], y[:1536]), TensorDataset(x[1536:1637], y[1536:1637])  # 101 val samples


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--nan-rank", type=int)
    p.add_argument("--nan-call", type=int)
    p.add_argument("--die-rank", type=int)
    p.add_argument("--die-step", type=int)
    p.add_argument("--checkpoint-every", type=int)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--strategy", default="auto")
    p.add_argument("--max-steps", type=int)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", 0))
    calls = {"n": 0}

    def loss_fn(out, target):
        calls["n"] += 1
        loss = nn.functional.cross_entropy(out, target)
        if rank == args.nan_rank and calls["n"] == args.nan_call:
            loss = loss * math.nan
        return loss

    train, val = data()
    net = model()
    trainer = torchwise.Trainer(net, lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9), loss_fn,
                                train_data=train, val_data=val, batch_size=args.batch, max_epochs=args.epochs, max_steps=args.max_steps,
                                out_dir=args.out_dir, checkpoint_every=args.checkpoint_every, resume=args.resume,
                                progress=True, dist_timeout_s=60, strategy=args.strategy)
    if args.die_rank is not None:
        def die(step, **_):
            if rank == args.die_rank and step == args.die_step:
                os.kill(os.getpid(), signal.SIGKILL)
        trainer.on("step_end", die)
    result = trainer.fit()
    if args.strategy != "fsdp":  # under FSDP each rank holds only shards; final/ has the gathered weights
        save_file({k: v.contiguous() for k, v in net.state_dict().items()},
                  os.path.join(args.out_dir, f"rank{rank}.safetensors"))
    if rank == 0:
        with open(os.path.join(args.out_dir, "result.json"), "w") as fh:
            json.dump({"steps": result.steps, "skipped": result.skipped_steps, "history": result.history,
                       "world_size": int(os.environ.get("WORLD_SIZE", 1))}, fh)
    print(f"rank {rank} done: steps {result.steps} skipped {result.skipped_steps}")


if __name__ == "__main__":
    main()
