"""tune_loader measures worker counts (real worker processes) on the real data set and picks the fastest."""

import torch
from torch.utils.data import TensorDataset

import torchwise
from torchwise.data.tune_loader import tune_loader
from testkit.slow_data import SlowDecode


def test_workers_win_when_fetching_is_slow():
    result = tune_loader(SlowDecode(), batch_size=8, candidates=[0, 2], batches=6)
    assert result.best_workers == 2
    assert result.batches_per_s[2] > 1.5 * result.batches_per_s[0]
    assert "<- best" in result.table()


def test_no_workers_win_for_tensors_in_memory():
    data = TensorDataset(torch.randn(512, 8), torch.randint(0, 2, (512,)))
    result = tune_loader(data, batch_size=32, candidates=[0, 2], batches=10)
    assert result.best_workers == 0  # process start-up and pickling cost more than indexing


def test_trainer_num_workers_tune_uses_the_measurement():
    trainer = torchwise.Trainer(torch.nn.Linear(4, 2), train_data=SlowDecode(), batch_size=8, max_steps=2,
                                num_workers="tune", progress=False, checks=False)
    trainer.fit()
    assert trainer.train_loader.plan.num_workers >= 1
    assert "measured" in trainer.train_loader.plan.note
