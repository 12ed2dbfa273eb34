"""A tiny model trained with the real Trainer and the loggers it wrote to."""
from __future__ import annotations

import csv
import torch
from torch import nn
from torch.utils.data import TensorDataset
from torchwise import Trainer


def data(n=64, seed=0):
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, 0] > 0).long())


def trainer(out_dir, loggers, epochs=2, **settings):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), train_data=data(), val_data=data(seed=1),
                   epochs=epochs, batch_size=16, out_dir=out_dir, loggers=loggers, progress=False, checks=False,
                   **settings)


def csv_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def csv_numbers(row):
    """The cells that hold numbers, as numbers (the step apart)."""
    out = {}
    for key, value in row.items():
        try:
            out[key] = float(value)
        except ValueError:
            continue
    out.pop("step", None)
    return out
