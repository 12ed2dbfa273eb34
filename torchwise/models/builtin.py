"""The two small models torchwise builds itself: a CNN for small images, an MLP for feature vectors."""
from __future__ import annotations

import torch
from torch import nn

BUILTIN = ("smallcnn", "mlp")


class SmallCNN(nn.Module):
    """Three conv blocks (conv-BN-ReLU x2) with pooling while the map is still large, then global
    average pooling: fine for 8x8 digits up to ~64x64 images, in a few seconds per epoch on a CPU."""

    def __init__(self, in_channels: int, num_classes: int, input_size: tuple[int, int] | None = None,
                 widths: tuple[int, ...] = (32, 64, 128), dropout: float = 0.1):
        super().__init__()
        side = min(input_size) if input_size else 32
        layers: list[nn.Module] = []
        channels = in_channels
        for width in widths:
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                       nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            if side >= 4:  # stop halving at 2x2: smaller maps throw away the spatial layout
                layers.append(nn.MaxPool2d(2))
                side //= 2
            channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(channels, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))


class MLP(nn.Module):
    """Flatten -> (Linear-LayerNorm-ReLU-Dropout) x len(hidden) -> Linear: tabular data and tiny images.

    LayerNorm rather than BatchNorm: the last batch of an epoch may hold a single row, which
    BatchNorm1d rejects in training mode."""

    def __init__(self, in_features: int, num_classes: int, hidden: tuple[int, ...] = (256, 128),
                 dropout: float = 0.1):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            width = size
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))
