"""tune_loader measures worker counts on the real data set and picks the fastest."""

import pytest
import torch
from torch.utils.data import TensorDataset

import torchwise
from torchwise.data.tune_loader import tune_loader
from torchwise.errors import TorchwiseError
from testkit.slow_data import SlowDecode


def test_bad_input():
    with pytest.raises(TorchwiseError, match="empty"):
        tune_loader(TensorDataset(torch.zeros(0, 2)), batch_size=4)
    with pytest.raises(TorchwiseError, match="integers >= 0"):
        tune_loader(SlowDecode(), batch_size=4, candidates=[-1])


def test_in_memory_tensors_skip_tuning_and_are_served_by_batch_indexing():
    # Tuning would measure per-sample collation, which the Trainer never uses for a TensorDataset.
    data = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))
    trainer = torchwise.Trainer(torch.nn.Linear(4, 2), train_data=data, batch_size=8, max_steps=2,
                                num_workers="tune", progress=False, checks=False)
    trainer.fit()
    assert trainer.train_loader.plan.num_workers == 0
    assert "batch indexing" in trainer.train_loader.plan.note


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_tensor_dataset_already_on_the_gpu_trains_without_pinning_or_workers():
    data = TensorDataset(torch.randn(256, 4, device="cuda"), torch.randint(0, 2, (256,), device="cuda"))
    trainer = torchwise.Trainer(torch.nn.Linear(4, 2), train_data=data, batch_size=8, max_steps=3,
                                num_workers="auto", device="cuda", progress=False)
    assert trainer.fit().steps == 3
    assert not trainer.train_loader.plan.pin_memory and trainer.train_loader.plan.num_workers == 0


def test_tensors_on_another_device_with_workers_are_refused_clearly():
    from torchwise.train.state.loaders import build_loader

    data = TensorDataset(torch.randn(16, 4, device="meta"), torch.zeros(16, device="meta"))
    with pytest.raises(TorchwiseError, match="worker processes cannot load") as info:
        build_loader(data, role="train_data", train=True, device=torch.device("cpu"), batch_size=4, seed=0,
                     num_workers=2)
    assert "num_workers=0" in str(info.value)
