"""Memory accounting: optimizer state by type, activations measured with saved-tensor hooks, and the
estimated peak checked against real training steps measured in a fresh process (CPU: peak RSS) or
by the CUDA allocator's counters."""

import pytest
import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.toolbox.memory import (bytes_from_text, measure_activations, memory_estimate, optimizer_cost)

from testkit.models import BlockNet, ConvNet, WideMLP


# Test models live at module level: the measuring process unpickles them by name.


def test_optimizer_state_by_type():
    assert optimizer_cost("adamw").state_copies == 2 and optimizer_cost("sgd").state_copies == 0
    assert optimizer_cost("sgd_momentum").state_copies == 1
    p = [nn.Parameter(torch.zeros(3))]
    assert optimizer_cost(torch.optim.Adam(p, amsgrad=True)).state_copies == 3
    assert optimizer_cost(torch.optim.SGD(p, lr=0.1, momentum=0.9)).state_copies == 1
    assert optimizer_cost(torch.optim.RMSprop(p, momentum=0.9, centered=True)).state_copies == 3
    # The table agrees with what the optimizers really allocate.
    for opt in (torch.optim.AdamW(p), torch.optim.SGD(p, lr=0.1, momentum=0.9), torch.optim.Adagrad(p)):
        p[0].grad = torch.ones(3)
        opt.step()
        buffers = [v for v in opt.state[p[0]].values() if isinstance(v, torch.Tensor) and v.numel() == 3]
        assert len(buffers) == optimizer_cost(opt).state_copies, type(opt).__name__
    with pytest.raises(TorchwiseError, match="No memory model"):
        optimizer_cost("lbfgs")


def test_activations_are_measured_and_scale_with_batch_and_precision():
    model = BlockNet(d=64, n=2)
    a16 = measure_activations(model, (torch.randn(16, 8, 64),))
    a32 = measure_activations(model, (torch.randn(32, 8, 64),))
    # Per block: LayerNorm out + fc1 out + gelu out (each 4x wider) ... all proportional to the batch.
    assert a32.saved_bytes == pytest.approx(2 * a16.saved_bytes, rel=0.05)
    hidden = 32 * 8 * 256 * 4
    assert a32.saved_bytes >= 2 * 2 * hidden      # fc1 output and gelu output of both blocks, at least
    bf16 = measure_activations(model, (torch.randn(32, 8, 64),), precision="bf16")
    assert bf16.saved_bytes < 0.75 * a32.saved_bytes
    assert all(p.grad is None for p in model.parameters())


CASES = [  # (model factory, one sample, batch, optimizer, precisions)
    (ConvNet, (1, 3, 32, 32), 64, "adamw", ("fp32", "bf16")),
    (WideMLP, (1, 256), 256, "adamw", ("fp32",)),
    (BlockNet, (1, 64, 128), 48, "sgd_momentum", ("fp32", "bf16")),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("factory,shape,batch,opt,precisions", CASES, ids=[c[0].__name__ for c in CASES])
def test_estimate_within_25_percent_of_the_allocator_peak_on_cuda(factory, shape, batch, opt, precisions):
    torch.manual_seed(0)
    report = memory_estimate(factory(), torch.randn(shape), batch_size=batch * 4, optimizer=opt, device="cuda",
                             measure=True)
    print(report.table())
    assert {r.precision for r in report.rows} == {"fp32", "bf16", "fp16"}
    for row in report.rows:
        assert 0.75 <= row.ratio <= 1.25, report.table()


def test_sizes_and_errors():
    assert bytes_from_text("4GB") == 4 * 2**30 and bytes_from_text("512 MiB") == 512 * 2**20
    assert bytes_from_text("1000") == 1000
    with pytest.raises(TorchwiseError, match="memory size"):
        bytes_from_text("lots")
    with pytest.raises(TorchwiseError, match="Unknown precision"):
        memory_estimate(nn.Linear(2, 2), torch.randn(1, 2), precisions=("fp8",))

    class Local(nn.Module):  # not importable by name: cannot be sent to a fresh process
        def forward(self, x):
            return x

    with pytest.raises(TorchwiseError, match="fresh process"):
        memory_estimate(nn.Sequential(nn.Linear(2, 2), Local()), torch.randn(1, 2), measure=True,
                        precisions=("fp32",))
