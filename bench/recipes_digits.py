"""The training recipes on scikit-learn's digits: EMA of the weights, label smoothing, MixUp, CutMix, each
against the plain run, with the real torchwise Trainer and fixed seeds.

    python bench/recipes_digits.py [--epochs 12] [--seeds 0 1 2] [--ema-decay 0.99]

Every recipe is applied by hand with the library's modules, through what the Trainer accepts today:

- EMA (torchwise.train.ema.EMA): a callback whose on_step_end calls ema.update(trainer.model), and the
  validation under `with ema.applied(trainer.model): trainer.evaluate(val)`. It only reads the weights, so
  it rides on the plain run: its "vs plain" is the same training trajectory, averaged.
- label smoothing: loss=nn.CrossEntropyLoss(label_smoothing=0.1).
- MixUp / CutMix (torchwise.train.mixing.BatchMix): the Trainer's batch_augment sees only the images, so
  the images are mixed there (BatchMix called with the batch positions as labels: its MixedTarget's `b` is
  then the partner permutation) and the loss mixes the labels with the same permutation and lam. This
  relies on the loss of a training batch being computed right after its augmentation, true on the CPU
  (no prefetching); the Trainer's own mixup= / cutmix= settings make the hand wiring unnecessary.

Digits: 1,797 8x8 grey images, 10 classes; 1,437 for training and 360 for validation (one seed-0 split),
the same for every run. 360 validation images means one image is 0.28 points of accuracy: read differences
of a point or two over a few seeds as noise, not as a ranking of the recipes.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

from torchwise import Trainer
from torchwise.train.ema import EMA
from torchwise.train.mixing import BatchMix, MixedTarget, mixed_loss


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


class AverageWeights:
    """The EMA as a Trainer callback: one update after every optimizer step."""

    def __init__(self, ema: EMA):
        self.ema = ema

    def on_step_end(self, trainer: Trainer, **_: Any) -> None:
        self.ema.update(trainer.model)


class MixThroughTheLoss:
    """MixUp / CutMix with today's Trainer: `augment` is its batch_augment (images only), the object itself
    its loss; the partner permutation and lam of the last mixed batch go from the one to the other."""

    def __init__(self, mix: BatchMix, loss: Callable[..., torch.Tensor]):
        self.mix, self.loss = mix, loss
        self.pending: tuple[torch.Tensor, float] | None = None
        self.mixed_batches = 0

    def augment(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        positions = torch.arange(images.shape[0], device=images.device)
        mixed, target = self.mix(images, positions, generator)
        self.pending = (target.b, target.lam)  # b = positions[perm] = perm
        return mixed

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.pending is None:  # a validation batch: never mixed
            return self.loss(output, target)
        perm, lam = self.pending
        self.pending = None
        if perm.shape[0] != target.shape[0]:
            raise RuntimeError("the mixed batch and the loss's batch differ: the hand wiring lost track")
        self.mixed_batches += 1
        return mixed_loss(self.loss, output, MixedTarget(target, target[perm], lam))


def train(seed: int, epochs: int, data, *, loss=None, batch_augment=None,
          ema_decay: float | None = None) -> tuple[Trainer, EMA | None]:
    (x, y), val = data
    torch.manual_seed(seed)
    model = small_cnn()
    ema = EMA(model, decay=ema_decay) if ema_decay else None
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4), loss,
                      train_data=(x, y), val_data=val, epochs=epochs, batch_size=32, seed=seed, progress=False,
                      batch_augment=batch_augment, callbacks=[AverageWeights(ema)] if ema else ())
    trainer.fit()
    return trainer, ema


def run_seed(seed: int, epochs: int, ema_decay: float, data) -> dict[str, float]:
    val = data[1]
    acc: dict[str, float] = {}
    plain, ema = train(seed, epochs, data, ema_decay=ema_decay)
    acc["plain"] = plain.evaluate(val)["val_acc"]
    with ema.applied(plain.model):
        acc[f"EMA (decay {ema_decay})"] = plain.evaluate(val)["val_acc"]
    smoothed, _ = train(seed, epochs, data, loss=nn.CrossEntropyLoss(label_smoothing=0.1))
    acc["label smoothing 0.1"] = smoothed.evaluate(val)["val_acc"]
    for name, mix in (("MixUp 0.2", BatchMix(mixup=0.2)), ("CutMix 1.0", BatchMix(cutmix=1.0)),
                      ("MixUp 0.2 / CutMix 1.0", BatchMix(mixup=0.2, cutmix=1.0))):
        wiring = MixThroughTheLoss(mix, nn.CrossEntropyLoss())
        trainer, _ = train(seed, epochs, data, loss=wiring, batch_augment=wiring.augment)
        if wiring.mixed_batches != trainer.pos.step:
            raise RuntimeError(f"{name}: {wiring.mixed_batches} mixed losses for {trainer.pos.step} steps")
        acc[name] = trainer.evaluate(val)["val_acc"]
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
