"""OOM recovery: on_oom="adapt" halves the micro-batch, doubles accumulation and gives the same result;
on_oom="raise" raises torch's own error type with the remedies.

Without a GPU the out-of-memory error is simulated faithfully: the model raises torch's real
`torch.OutOfMemoryError` (what `torch.cuda.OutOfMemoryError` is), with the CUDA caching allocator's
message, from inside its forward when the batch exceeds what "fits" — exactly where and how a real
one surfaces in a train step. On a lent GPU the real allocator raises it (test at the end).
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import TorchwiseError
from torchwise.toolbox.oom import OOMGuard, TrainingOutOfMemory, install, is_oom, split_micro_batches


def cuda_oom_error(batch: int) -> torch.OutOfMemoryError:
    # Message format of c10/cuda/CUDACachingAllocator.cpp (torch 2.x).
    tried = batch * 0.5
    return torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {tried:.2f} MiB. GPU 0 has a total capacity of 79.19 GiB of which "
        f"18.75 MiB is free. Including non-PyTorch memory, this process has 79.16 GiB memory in use. Of the "
        f"allocated memory 77.38 GiB is allocated by PyTorch, and 1.27 GiB is reserved by PyTorch but unallocated. "
        f"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        f"to avoid fragmentation.  See documentation for Memory Management")


class LimitedMemoryNet(nn.Module):
    """An MLP whose forward runs out of memory for batches larger than `fits`."""

    def __init__(self, fits: int | None, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 3)
        self.fits = fits
        self.ooms = 0
        self.batches: list[int] = []

    def forward(self, x):
        self.batches.append(x.shape[0])
        h = torch.relu(self.fc1(x))            # the activations exist when the allocation fails
        if self.fits is not None and x.shape[0] > self.fits:
            self.ooms += 1
            raise cuda_oom_error(x.shape[0])
        return self.fc2(h)


def data(n=200, seed=0):
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, :3] * torch.tensor([1.0, -1.0, 0.5])).argmax(1))


def train(model, *, batch_size, accumulate=1, on_oom=None, messages=None):
    trainer = torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=1e-2), train_data=data(),
                                batch_size=batch_size, accumulate=accumulate, max_epochs=2, progress=False,
                                seed=4, device="cpu")
    if on_oom:
        install(trainer, on_oom, notify=messages.append if messages is not None else None)
    return trainer, trainer.fit()


def test_the_simulated_error_is_torchs_own_type():
    err = cuda_oom_error(64)
    assert type(err) is torch.OutOfMemoryError and torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    assert is_oom(err)
    try:  # the CPU allocator's real failure is a RuntimeError; it counts as out of memory too
        torch.empty(2**60, dtype=torch.uint8)
    except RuntimeError as exc:
        assert is_oom(exc)
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) and not is_oom(ValueError("x"))


def test_adapt_halves_the_micro_batch_and_gives_the_same_weights():
    messages: list[str] = []
    adapted = LimitedMemoryNet(fits=16)
    trainer, result = train(adapted, batch_size=64, on_oom="adapt", messages=messages)
    reference = LimitedMemoryNet(fits=None)
    train(reference, batch_size=64)
    for (name, a), (_, b) in zip(adapted.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert result.steps == 8 and result.skipped_steps == 0
    # 64 -> 32 -> 16 once, at the first step; every later step runs at 16 straight away.
    assert adapted.ooms == 2 and len(messages) == 2
    assert "micro-batch 64" in messages[0] and "micro-batch 32 x 2" in messages[0]
    assert "micro-batch 16 x 4" in messages[1] and "effective batch 64" in messages[1]
    assert "CUDA out of memory. Tried to allocate" in messages[0]
    assert max(adapted.batches[3:]) == 16
    assert trainer.step_runner.parts == 4 and trainer.step_runner.scaler is None


def test_raise_keeps_the_error_type_and_gives_the_remedies():
    with pytest.raises(torch.OutOfMemoryError) as info:
        train(LimitedMemoryNet(fits=16), batch_size=64, on_oom="raise")
    err = info.value
    assert isinstance(err, TrainingOutOfMemory) and isinstance(err, TorchwiseError)
    text = str(err)
    assert "micro-batch: 64" in text and "CUDA out of memory" in text
    assert "batch 32 x accumulate 2" in text and "bf16" in text and "checkpointing" in text
    assert isinstance(err.__cause__, torch.OutOfMemoryError)


def test_a_step_is_not_repeated_once_the_optimizer_has_touched_the_weights():
    class StepOOM(torch.optim.SGD):  # the update starts, then memory runs out inside step()
        def step(self, closure=None):
            with torch.no_grad():
                self.param_groups[0]["params"][0].add_(1.0)
            raise cuda_oom_error(1)

    model = LimitedMemoryNet(fits=None)
    trainer = torchwise.Trainer(model, StepOOM(model.parameters(), lr=0.1), train_data=data(), batch_size=64,
                                max_steps=1, progress=False, device="cpu")
    install(trainer, "adapt")
    with pytest.raises(TrainingOutOfMemory, match="already started updating"):
        trainer.fit()


def test_a_micro_batch_of_one_cannot_be_split_further():
    with pytest.raises(TrainingOutOfMemory, match="cannot be split further"):
        train(LimitedMemoryNet(fits=0), batch_size=4, on_oom="adapt", messages=[])


def test_split_micro_batches_keeps_every_sample_once():
    x, y = torch.arange(10.0).view(5, 2), torch.arange(5)
    parts = split_micro_batches([((x,), y, 5)], 2)
    assert [n for _, _, n in parts] == [3, 2]
    assert torch.equal(torch.cat([i[0] for i, _, _ in parts]), x) and torch.equal(torch.cat([t for _, t, _ in parts]), y)
    assert split_micro_batches([(("text",), y, 5)], 2) is None
    with pytest.raises(TorchwiseError, match="on_oom"):
        OOMGuard(object(), mode="retry")


GPU_SCRIPT = textwrap.dedent("""
    import torch, torchwise
    from torch import nn
    from torch.utils.data import TensorDataset
    from torchwise.toolbox.oom import install

    # A 1 GiB cap on the caching allocator: batch 16384 needs ~1.3 GiB (activations), 8192 fits.
    torch.cuda.set_per_process_memory_fraction(2**30 / torch.cuda.get_device_properties(0).total_memory)
    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    x = torch.randn(16384, 1024, generator=torch.Generator().manual_seed(0))
    ds = TensorDataset(x, torch.randint(0, 10, (16384,), generator=torch.Generator().manual_seed(1)))
    messages = []
    models = {}
    for mode in ("adapt", None):
        model = net()
        t = torchwise.Trainer(model, lambda p: torch.optim.SGD(p, lr=1e-3), train_data=ds, batch_size=16384 if mode else 2048,
                              accumulate=1 if mode else 8, max_steps=2, progress=False, device="cuda", precision="fp32")
        if mode:
            install(t, mode, notify=messages.append)
        t.fit()
        models[mode] = [p.detach().cpu() for p in model.parameters()]
        del t, model
        torch.cuda.empty_cache()
    assert messages, "expected a real CUDA out-of-memory error at batch 16384 under a 1 GiB cap"
    print("\\n".join(messages))
    for a, b in zip(models["adapt"], models[None]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    print("OK")
""")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_real_cuda_oom_is_adapted(tmp_path):
    script = tmp_path / "gpu_oom.py"
    script.write_text(GPU_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
    assert "out of memory" in proc.stdout
