"""Questions about a model's structure that several parts ask, answered in one place."""
from __future__ import annotations

from torch import nn


def has_convolutions(model: nn.Module, dims: tuple[int, ...] = (1, 2, 3)) -> bool:
    """Does the model hold a convolution (ConvNd or ConvTransposeNd) over one of `dims` spatial dims?
    cudnn.benchmark searches algorithms for any of them; channels_last only pays for 2-D and 3-D ones."""
    return any(isinstance(m, nn.modules.conv._ConvNd) and len(m.kernel_size) in dims for m in model.modules())
