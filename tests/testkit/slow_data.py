"""A data set whose samples cost time to fetch, as files to read and decode do."""
from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SlowDecode(Dataset):
    """Each sample costs 4 ms of waiting (like reading and decoding a file): workers overlap it."""

    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((4,), float(i)), i % 2
