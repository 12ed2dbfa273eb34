"""The training recipes on scikit-learn's digits: EMA of the weights, label smoothing, MixUp, CutMix, each
a Trainer setting (ema_decay=, label_smoothing=, mixup=, cutmix=), against the plain run with the same
seeds. One image of the validation set is 0.28 points: differences of a point or less are noise.

    python bench/recipes_digits.py [--epochs 12] [--seeds 0 1 2] [--ema-decay 0.99]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from torchwise import Trainer


def digits() -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0  # N x 1 x 8 x 8 in [0, 1]
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, val = order[:1437], order[1437:]
    return (x[train], y[train]), (x[val], y[val])


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 4 * 4, 10))


RECIPES = {
    "plain": {},
    "EMA (decay {ema})": "ema",
    "label smoothing 0.1": {"label_smoothing": 0.1},
    "MixUp 0.2": {"mixup": 0.2},
    "CutMix 1.0": {"cutmix": 1.0},
    "MixUp 0.2 / CutMix 1.0": {"mixup": 0.2, "cutmix": 1.0},
}


def run_seed(seed: int, epochs: int, ema_decay: float, data) -> dict[str, float]:
    """Each recipe as the Trainer setting it is (ema_decay=, label_smoothing=, mixup=, cutmix=)."""
    (x, y), val = data
    acc = {}
    for name, settings in RECIPES.items():
        if settings == "ema":
            name, settings = name.format(ema=ema_decay), {"ema_decay": ema_decay}
        torch.manual_seed(seed)
        trainer = Trainer(small_cnn(), lambda p: torch.optim.AdamW(p, lr=2e-3), train_data=(x, y), val_data=val,
                          epochs=epochs, batch_size=32, seed=seed, progress=False, checks=False, tensorboard=False,
                          **settings)
        acc[name] = trainer.fit().history[-1]["val_acc"]  # with ema_decay: the average's accuracy
    return acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ema-decay", type=float, default=0.99)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = digits()
    start = time.perf_counter()
    per_seed = [run_seed(seed, args.epochs, args.ema_decay, data) for seed in args.seeds]
    steps = args.epochs * -(-len(data[0][1]) // 32)
    print(f"digits: {len(data[0][1])} train / {len(data[1][1])} val images, small CNN, AdamW lr 2e-3, "
          f"{args.epochs} epochs ({steps} steps), seeds {args.seeds}")
    print(f"{'recipe':<26}{'val acc (mean)':>16}{'vs plain (mean)':>17}{'vs plain per seed':>26}")
    for recipe in per_seed[0]:
        accs = [run[recipe] for run in per_seed]
        diffs = [run[recipe] - run["plain"] for run in per_seed]
        per = " ".join(f"{100 * d:+.1f}" for d in diffs)
        print(f"{recipe:<26}{100 * statistics.mean(accs):>15.2f}%{100 * statistics.mean(diffs):>+16.2f}{per:>26}")
    print(f"({time.perf_counter() - start:.0f} s; accuracy in %, differences in points)")


if __name__ == "__main__":
    main()
