"""Staged fine-tuning on one Trainer: the head first with the backbone frozen, then everything at a
lower learning rate. Each fit() call is a stage: the step count, metrics.csv, the best metric and the
checkpoints go on, and a script run again with resume=True skips the stages already done and resumes
inside the one it was stopped in. Data: scikit-learn's digits; the "pretrained" backbone is a small
CNN trained here on the digits 0-4 (standing in for weights from a file), fine-tuned on all ten.

    python examples/staged_finetuning.py RUN_DIR [--resume]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    return (torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16)[perm], torch.tensor(y)[perm]


def backbone() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten())


def pretrained_model(x: torch.Tensor, y: torch.Tensor) -> nn.Module:
    """A backbone trained on digits 0-4 with a 5-class head, then given a new 10-class head."""
    import torchwise

    torch.manual_seed(0)
    model = nn.Sequential(backbone(), nn.Linear(128, 5))
    few = y < 5
    torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=3e-3), train_data=(x[few][:600], y[few][:600]),
                      epochs=2, batch_size=32, progress=False, checks=False, tensorboard=False).fit()
    model[1] = nn.Linear(128, 10)
    return model


def train_in_stages(out_dir: str | Path, *, resume: bool = False, callbacks: Iterable[Any] = (),
                    **settings) -> list[Any]:
    import torchwise

    x, y = digits()
    model = pretrained_model(x, y)
    trainer = torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=3e-3), train_data=(x[:1400], y[:1400]),
                                val_data=(x[1400:], y[1400:]), batch_size=32, out_dir=out_dir, resume=resume,
                                callbacks=callbacks, seed=0, **settings)
    for p in model[0].parameters():  # stage 0: the new head only
        p.requires_grad = False
    head = trainer.fit(epochs=2)
    for p in model[0].parameters():  # stage 1: everything, ten times slower
        p.requires_grad = True
    whole = trainer.fit(epochs=2, optimizer=lambda p: torch.optim.AdamW(p, lr=3e-4))
    return [head, whole]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    head, whole = train_in_stages(args.out_dir, resume=args.resume)
    print(f"head only: val_acc {head.history[-1]['val_acc']:.4f} after {head.steps} steps")
    print(f"all layers: val_acc {whole.history[-1]['val_acc']:.4f} after {whole.steps} steps")


if __name__ == "__main__":
    main()
