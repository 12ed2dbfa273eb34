"""Small models more than one test file trains, measures or wraps: residual blocks over a sequence, an
activation-heavy conv net and a weight-heavy MLP (the memory estimates are measured against all three)."""
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


class ConvNet(nn.Module):
    """Activation-heavy: the memory is the feature maps."""

    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                               nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                               nn.Linear(64, 10))

    def forward(self, x):
        return self.f(x)


class WideMLP(nn.Module):
    """Weight-heavy: parameters, gradients and Adam's two buffers dominate."""

    def __init__(self, d=256, h=1536):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, h), nn.GELU(),
                                 nn.Linear(h, 10))

    def forward(self, x):
        return self.net(x)
