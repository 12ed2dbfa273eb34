"""Batch-size finder: power-of-two search then bisection; CPU against a memory budget, out-of-memory
errors as "does not fit" (simulated faithfully on CPU with torch's own error type), real on CUDA."""
import pytest
import torch
from torch import nn

from torchwise.toolbox.batch_size import find_batch_size, search_largest
from torchwise.toolbox.memory import estimate_row, optimizer_cost


@pytest.mark.parametrize("largest", [0, 1, 2, 3, 37, 64, 1000])
def test_search_finds_the_exact_boundary_in_few_tries(largest):
    calls = []

    def fits(n):
        calls.append(n)
        return n <= largest

    assert search_largest(fits, 1, 1 << 16) == largest
    assert len(calls) <= 2 * max(1, largest).bit_length() + 2
    assert search_largest(lambda n: True, 1, 100) == 100


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))


def test_cpu_budget_gives_the_largest_batch_under_it():
    budget = 12 * 2**20
    model = mlp()
    result = find_batch_size(model, torch.randn(1, 64), device="cpu", budget=budget)
    n = result.batch_size
    assert n > 8
    cost = optimizer_cost("adamw")
    at = lambda b: estimate_row(model, (torch.randn(b, 64),), "fp32", cost).estimate  # noqa: E731
    assert at(n) <= budget < at(n + 1)
    sizes = [t["batch_size"] for t in result.tried]
    first_fail = next(i for i, t in enumerate(result.tried) if not t["fits"])
    assert sizes[:first_fail + 1] == [2 ** i for i in range(first_fail + 1)]   # 1, 2, 4, ... then bisection
    assert len(sizes) - first_fail - 1 <= n.bit_length()
    assert f"largest batch that fits: {n}" in result.report()
    assert all(p.grad is None for p in model.parameters())


class OOMAbove(nn.Module):
    def __init__(self, fits):
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.fits = fits

    def forward(self, x):
        if x.shape[0] > self.fits:  # the CUDA caching allocator's error, raised where a real one would be
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {x.shape[0] * 2:.2f} MiB. GPU 0 has a total capacity of "
                "15.77 GiB of which 9.12 MiB is free. Including non-PyTorch memory, this process has 15.76 GiB "
                "memory in use. Of the allocated memory 15.21 GiB is allocated by PyTorch, and 301.52 MiB is "
                "reserved by PyTorch but unallocated.")
        return self.fc(x)


def test_out_of_memory_errors_mean_does_not_fit():
    result = find_batch_size(OOMAbove(fits=100), torch.randn(1, 16), device="cpu", budget=2**30)
    assert result.batch_size == 100
    failed = [t for t in result.tried if not t["fits"]]
    assert failed and all("CUDA out of memory" in t["error"] for t in failed)


def test_other_errors_are_not_swallowed():
    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("a real bug")

    with pytest.raises(ValueError, match="a real bug"):
        find_batch_size(Broken(), torch.randn(1, 3), device="cpu", budget=2**30)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_finder_with_real_training_steps():
    from torchwise.toolbox.memory import measure_cuda_peak

    budget = 256 * 2**20
    model = mlp().cuda()
    result = find_batch_size(model, torch.randn(1, 64), device="cuda", budget=budget)
    n = result.batch_size
    assert n > 64
    tried = {t["batch_size"]: t for t in result.tried}
    assert tried[n]["fits"] and tried[n]["peak_bytes"] <= budget
    assert not tried[n + 1]["fits"] and tried[n + 1]["peak_bytes"] > budget
    # A fresh measurement agrees with the search's (the allocator's counters are deterministic here).
    again = measure_cuda_peak(model, (torch.randn(n, 64, device="cuda"),), "fp32", "adamw", steps=2)
    assert again == pytest.approx(tried[n]["peak_bytes"], rel=0.02)
