"""A 3-channel (RGB) stem given another number of input channels (grayscale, RGBA, multispectral)."""
from __future__ import annotations

import torch
from torch import nn


def adapt_first_conv(model: nn.Module, in_channels: int) -> None:
    """Give the model's first Conv2d `in_channels` inputs; pretrained filters are averaged over RGB
    so a grayscale image gets the response an RGB image of the same intensity would.

    The layer keeps its class and settings (only its weight and in_channels change): timm's
    'same'-padding convolutions and the like stay what they are."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            if module.in_channels == in_channels:
                return
            with torch.no_grad():
                mean = module.weight.mean(dim=1, keepdim=True)
                weight = mean.expand(-1, in_channels // module.groups, -1, -1) * (3.0 / in_channels)
            module.weight = nn.Parameter(weight.contiguous(), requires_grad=module.weight.requires_grad)
            module.in_channels = in_channels
            return
