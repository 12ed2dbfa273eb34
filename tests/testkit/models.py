"""Small models more than one test file trains, measures or wraps."""
from __future__ import annotations

from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


class BlockNet(nn.Module):
    """Transformer-like residual MLP blocks over a sequence."""

    def __init__(self, d=128, n=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))
