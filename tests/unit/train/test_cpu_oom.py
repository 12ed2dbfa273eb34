"""An allocation that fails on the CPU (the allocator's RuntimeError "DefaultCPUAllocator: can't allocate
memory", or Python's MemoryError) is said as an out-of-memory error with its remedies wherever it happens:
a training step, the validation, predict(), an export, `torchwise eval`'s own loop. Every failure here is
real: the model asks for more memory than any machine has (2**62 bytes), and the allocator refuses."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import torchwise
from torchwise.errors import OutOfMemory, is_out_of_memory
from torchwise.train.step.failures import is_oom

IMPOSSIBLE = 2 ** 62  # bytes: more than a 64-bit machine's address space, refused at once


class Hungry(nn.Module):
    """A small classifier whose forward asks for an impossible tensor (torch's allocator) or an impossible
    bytearray (Python's MemoryError) when `when` says so: "train", "eval" or "always"."""

    def __init__(self, when: str = "always", kind: str = "torch"):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.when, self.kind = when, kind

    def forward(self, x):
        if self.when == "always" or (self.when == "train") == self.training:
            if self.kind == "python":
                bytearray(IMPOSSIBLE)
            else:
                torch.empty(IMPOSSIBLE, dtype=torch.uint8)
        return self.fc(x)


def data(n: int = 32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def trainer(model, **settings):
    return torchwise.Trainer(model, train_data=data(), val_data=data(16), epochs=1, batch_size=8, progress=False,
                             checks=False, tensorboard=False, **settings)


def test_the_real_failures_are_recognised_as_out_of_memory():
    for make in (lambda: torch.empty(IMPOSSIBLE, dtype=torch.uint8), lambda: bytearray(IMPOSSIBLE)):
        with pytest.raises((RuntimeError, MemoryError)) as info:
            make()
        assert is_out_of_memory(info.value) and is_oom(info.value)
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("out of memory"))  # not an allocator's error type


@pytest.mark.parametrize("kind", ["torch", "python"])
def test_a_training_step_out_of_cpu_memory_is_said_with_remedies(kind):
    with pytest.raises(OutOfMemory) as info:
        trainer(Hungry("train", kind)).fit()
    text = str(info.value)
    assert "Out of memory in training step 1" in text and "fix:" in text
    assert isinstance(info.value, torch.OutOfMemoryError)  # `except torch.OutOfMemoryError` still catches it
    assert "The model's forward failed" not in text  # not blamed on the model's inputs


@pytest.mark.parametrize("kind", ["torch", "python"])
def test_validation_out_of_cpu_memory_is_said_with_remedies(tmp_path, kind):
    with pytest.raises(OutOfMemory) as info:
        trainer(Hungry("eval", kind), out_dir=tmp_path / "run").fit()
    text = str(info.value)
    assert "Out of memory while evaluating the model (batch 1 of 2" in text
    assert "this machine's memory (RAM)" in text and "eval_batch_size" in text
    assert isinstance(info.value, torch.OutOfMemoryError)


@pytest.mark.parametrize("call", ["evaluate", "predict"])
def test_evaluate_and_predict_out_of_cpu_memory_are_said(call):
    t = trainer(Hungry("eval"))
    with pytest.raises(OutOfMemory, match="Out of memory while evaluating the model"):
        getattr(t, call)(data(16))


def test_export_out_of_cpu_memory_is_said_and_writes_nothing(tmp_path):
    from torchwise.export.api import export_and_verify

    with pytest.raises(OutOfMemory) as info:
        export_and_verify(Hungry("eval"), torch.randn(2, 4), tmp_path / "export", formats="onnx,torchscript",
                          log=None)
    assert "Out of memory while exporting" in str(info.value) and "fix:" in str(info.value)
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == []


def test_the_eval_commands_loop_out_of_cpu_memory_is_said():
    from torch.utils.data import TensorDataset

    from torchwise.cli.eval_command import predict

    with pytest.raises(OutOfMemory, match="Out of memory while evaluating 16 examples in batches of 8") as info:
        predict(Hungry("eval"), TensorDataset(*data(16)), batch_size=8)
    assert "--batch-size 2" in str(info.value)
