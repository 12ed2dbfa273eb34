"""Training from a stream: an IterableDataset with no length (samples made on the fly, as a reader of
log files, a socket or a generator would give them). The run's length is max_steps; the stream is read
again when it runs out; checkpoints record the position, and a resumed run reads the epoch's batches
again up to it (exact for a stream that yields the same samples in the same order on every pass, as
this one does; the run says so when it resumes).

    python examples/stream_iterable.py RUN_DIR [--resume]
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import IterableDataset


class Waves(IterableDataset):
    """Noisy sine waves of three frequencies, 64 samples each; the class is the frequency."""

    def __init__(self, samples: int, seed: int):
        self.samples, self.seed = samples, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        t = torch.linspace(0, 2 * math.pi, 64)
        for _ in range(self.samples):
            label = int(torch.randint(3, (1,), generator=g))
            phase = float(torch.rand(1, generator=g)) * 2 * math.pi
            wave = torch.sin((label + 1) * t + phase) + 0.3 * torch.randn(64, generator=g)
            yield wave, label


def build_trainer(out_dir: str | Path | None, *, epochs: int = 1, resume: bool = False, **settings):
    import torchwise

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
    # `epochs` cannot size a stream: max_steps does (the stream's 1,000 samples are 32 batches of 32)
    return torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=2e-3), train_data=Waves(1000, seed=0),
                             val_data=Waves(300, seed=1), batch_size=32, max_steps=80 * epochs, eval_every=40,
                             out_dir=out_dir, resume=resume, seed=0, **settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    result = build_trainer(args.out_dir, resume=args.resume).fit()
    print(f"val_acc {result.history[-1]['val_acc']:.4f} steps {result.steps} findings {len(result.findings)}")


if __name__ == "__main__":
    main()
