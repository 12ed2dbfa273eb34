"""A training run used by the kill-and-resume tests (run as a subprocess).

usage: resume_run.py OUT_DIR MODE [--kill-at-step K] [--kill-in-checkpoint K] [--resume]
MODE: dataset | loader | loader-workers
"""
import argparse
import os
import random
import signal

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, Dataset

import torchwise


class NoisyDigits(Dataset):
    """Digits with random augmentation drawn from torch, numpy and python RNGs."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i] + 0.05 * torch.randn(64)
        x = x * float(np.random.uniform(0.9, 1.1))
        if random.random() < 0.5:
            x = x.view(8, 8).flip(1).reshape(64)
        return x, self.y[i]


def main():
    # One compute thread: with several, the BLAS may use fewer of them when the machine is busy, and
    # a matrix product summed in another order differs in the last bits. The runs compared here are
    # made at different moments (the reference, the killed run, the resumed one) under whatever load
    # CI has; a run under varying thread counts is not bit-reproducible with or without a resume.
    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("mode", choices=["dataset", "loader", "loader-workers"])
    p.add_argument("--kill-at-step", type=int)
    p.add_argument("--kill-in-checkpoint", type=int)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y)
    train, val = NoisyDigits(x[:1200], y[:1200]), NoisyDigits(x[1200:1500], y[1200:1500])
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10))
    if args.mode == "dataset":
        train_data = train
    else:
        train_data = DataLoader(train, batch_size=16, shuffle=True,
                                num_workers=2 if args.mode == "loader-workers" else 0)

    if args.kill_in_checkpoint is not None:
        # Crash in the middle of writing the checkpoint of that step: weights written, state not yet.
        real_save = torch.save

        def dying_save(obj, f, *a, **kw):
            if str(f).endswith("state.pt") and f"step-{args.kill_in_checkpoint:09d}" in str(f):
                os.kill(os.getpid(), signal.SIGKILL)
            return real_save(obj, f, *a, **kw)

        torch.save = dying_save

    trainer = torchwise.Trainer(
        model, lambda params: torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01), train_data=train,
        val_data=val, max_epochs=3, batch_size=16, seed=7, out_dir=args.out_dir, checkpoint_every=7,
        keep_last=2, resume=args.resume, scheduler="cosine", warmup_steps=10, progress=False,
    ) if args.mode == "dataset" else torchwise.Trainer(
        model, lambda params: torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01), train_data=train_data,
        val_data=val, max_epochs=3, seed=7, out_dir=args.out_dir, checkpoint_every=7, keep_last=2,
        resume=args.resume, scheduler="cosine", warmup_steps=10, progress=False,
    )
    if args.kill_at_step is not None:
        def die(step, **_):
            if step == args.kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)

        trainer.on("step_end", die)
    result = trainer.fit()
    print("steps", result.steps, "best", result.best_metric, "resumed_from", result.resumed_from)


if __name__ == "__main__":
    main()
