"""A two-input model trained with compute_loss: are two handwritten digits the same digit?

The batch is a dict of two images and a 0/1 target ("left", "right", "same"), not an (x, y) pair;
the model takes both images; `compute_loss(model, batch)` says how a batch becomes a loss and returns
(loss, logits, targets) so that the Trainer's accuracy and any metric see the predictions. Mixed
precision, accumulation, clipping, the non-finite skip, checkpoints and exact resume work as for any
other model. Data: scikit-learn's digits, paired.

    python examples/two_input_compute_loss.py RUN_DIR [--epochs 3] [--resume]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset


class DigitPairs(Dataset):
    """Pairs of 8x8 digits, half of them the same digit; fixed by the seed."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        by_class = [torch.nonzero(labels == c).flatten() for c in range(10)]
        left = torch.randint(len(labels), (n,), generator=g)
        same = torch.rand(n, generator=g) < 0.5
        right = torch.randint(len(labels), (n,), generator=g)
        for i in torch.nonzero(same).flatten().tolist():  # a partner of the same class
            pool = by_class[int(labels[left[i]])]
            right[i] = pool[torch.randint(len(pool), (1,), generator=g)]
        self.left, self.right = images[left], images[right]
        self.same = (labels[left] == labels[right]).float()

    def __len__(self) -> int:
        return len(self.same)

    def __getitem__(self, i: int) -> dict:
        return {"left": self.left[i], "right": self.right[i], "same": self.same[i]}


class PairNet(nn.Module):
    """One shared encoder for both images; the pair's logit from the two embeddings."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 32))
        self.head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        a, b = self.encoder(left), self.encoder(right)
        return self.head(torch.cat([(a - b).abs(), a * b], dim=1)).squeeze(1)


def compute_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = model(batch["left"], batch["right"])
    return F.binary_cross_entropy_with_logits(logits, batch["same"]), logits, batch["same"]


def load_pairs(seed: int = 0) -> tuple[DigitPairs, DigitPairs]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16
    labels = torch.tensor(y)
    return DigitPairs(images[:1400], labels[:1400], 2400, seed), DigitPairs(images[1400:], labels[1400:], 600, seed + 1)


def build_trainer(out_dir: str | Path | None, *, epochs: int = 3, resume: bool = False, **settings):
    import torchwise

    train, val = load_pairs()
    torch.manual_seed(0)
    return torchwise.Trainer(PairNet(), lambda params: torch.optim.AdamW(params, lr=2e-3), train_data=train,
                             val_data=val, compute_loss=compute_loss, epochs=epochs, batch_size=64, out_dir=out_dir,
                             resume=resume, seed=0, **settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    result = build_trainer(args.out_dir, epochs=args.epochs, resume=args.resume).fit()
    print(f"val_acc {result.history[-1]['val_acc']:.4f} steps {result.steps} findings {len(result.findings)}")


if __name__ == "__main__":
    main()
