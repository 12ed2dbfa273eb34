"""A small image data set, a conv net and the losses of a Trainer run with given speed switches."""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset
import torchwise


def images(n=96):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 8, 8, generator=g)
    return TensorDataset(x, (x.mean(dim=(1, 2, 3)) > 0).long())


def conv_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 8 * 8, 2))


def losses(fast, optimizer=None, **kwargs):
    seen = []
    trainer = torchwise.Trainer(conv_net(), optimizer, train_data=images(), max_epochs=2, batch_size=16,
                                progress=False, checks=False, fast=fast, **kwargs)
    trainer.on("step_end", lambda loss, **_: seen.append(loss))
    trainer.fit()
    return trainer, seen


class Jittered(torch.utils.data.Dataset):
    """Random augmentation from the global RNGs while fetching: exact resume needs the loader's seeding."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        x, y = self.base[i]
        return x + 0.1 * torch.randn_like(x), y


def weights_after(fast, epochs, tmp_path=None, resume=False, workers=2):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
    trainer = torchwise.Trainer(model, train_data=Jittered(images()), max_epochs=epochs, batch_size=16,
                                progress=False, checks=False, fast=fast, num_workers=workers,
                                out_dir=tmp_path, resume=resume)
    trainer.fit()
    return trainer, {k: v.clone() for k, v in model.state_dict().items()}
