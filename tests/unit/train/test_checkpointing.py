"""Gradient checkpointing switch: same gradients and BatchNorm statistics, a measured memory saving."""
import copy

import pytest
import torch
from torch import nn

from testkit.models import BlockNet
from torchwise.errors import TorchwiseError
from torchwise.models import SmallCNN
from torchwise.train.speed.activation_checkpointing import enable_checkpointing, find_blocks


def grads_and_buffers(model, x, seed=0):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.square().mean().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()], [b.clone() for b in model.buffers()]


@pytest.mark.parametrize("make,shape,expected", [
    (lambda: BlockNet(d=32, n=3), (8, 5, 32), ["blocks.0", "blocks.1", "blocks.2"]),
    (lambda: SmallCNN(3, 4, (16, 16)), (6, 3, 16, 16), None),
])
def test_same_gradients_and_batchnorm_statistics(make, shape, expected):
    torch.manual_seed(0)
    plain = make()
    checked = copy.deepcopy(plain)
    keys = list(checked.state_dict())
    handle = enable_checkpointing(checked)
    if expected:
        assert handle.names == expected
    else:  # a flat Sequential of layers: cut into segments, none starting with an in-place ReLU
        assert len(handle.names) >= 2 and all(n.startswith("features[") for n in handle.names)
        starts = [int(n.split("[")[1].split(":")[0]) for n in handle.names]
        assert not any(getattr(checked.features[s], "inplace", False) for s in starts)
    assert list(checked.state_dict()) == keys
    x = torch.randn(shape)
    out_a, grads_a, bufs_a = grads_and_buffers(plain, x)
    out_b, grads_b, bufs_b = grads_and_buffers(checked, x)
    torch.testing.assert_close(out_a, out_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    for a, b in zip(bufs_a, bufs_b):   # running stats updated once, not twice
        assert torch.equal(a, b)
    # Eval mode / no_grad take the plain path; remove() switches it off.
    checked.eval()
    with torch.no_grad():
        torch.testing.assert_close(checked(x), plain.eval()(x))
    handle.remove()
    assert all("forward" not in m.__dict__ for m in checked.modules())


def test_user_errors():
    with pytest.raises(TorchwiseError, match="Unknown block names"):
        enable_checkpointing(BlockNet(), blocks=["blocks.9"])
    with pytest.raises(TorchwiseError, match="No blocks to checkpoint"):
        enable_checkpointing(nn.Linear(3, 3))
    assert [n for n, _ in find_blocks(nn.Sequential(nn.Linear(2, 2), BlockNet(d=8, n=2)))] == ["1.blocks.0",
                                                                                              "1.blocks.1"]
