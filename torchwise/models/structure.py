"""Questions about a model's structure that several parts ask, answered in one place."""
from __future__ import annotations

from torch import nn


def has_convolutions(model: nn.Module, dims: tuple[int, ...] = (1, 2, 3)) -> bool:
    """Does the model hold a convolution (ConvNd or ConvTransposeNd) over one of `dims` spatial dims?
    cudnn.benchmark searches algorithms for any of them; channels_last only pays for 2-D and 3-D ones."""
    return any(isinstance(m, nn.modules.conv._ConvNd) and len(m.kernel_size) in dims for m in model.modules())


def behaves_by_mode(m: nn.Module) -> bool:
    """Whether model.train()/eval() changes what this layer computes: Dropout with p > 0, BatchNorm (and
    InstanceNorm) that keeps running statistics. nn.Dropout(p=0.0), common in transformer configs, does not."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return float(getattr(m, "p", 0.0)) > 0.0
    if isinstance(m, nn.modules.batchnorm._NormBase):
        return bool(getattr(m, "track_running_stats", True)) or isinstance(m, nn.modules.batchnorm._BatchNorm)
    return False
