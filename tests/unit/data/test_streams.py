"""Data of every shape: a stream with no length (an IterableDataset) and a user's StatefulDataLoader,
trained, checkpointed and resumed for real."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import IterableDataset

from torchwise import Trainer
from torchwise.errors import TorchwiseError


QUIET = dict(progress=False, checks=False, tensorboard=False)


class Stream(IterableDataset):
    """Samples generated on the fly, the same ones on every pass (a seeded generator per pass), no __len__."""

    def __init__(self, n: int = 200, seed: int = 0):
        self.n, self.seed = n, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.n):
            x = torch.randn(6, generator=g)
            yield x, (x[:2].sum() > 0).long()


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))


def test_a_stream_with_no_length_needs_max_steps_and_says_so():
    with pytest.raises(TorchwiseError) as err:
        Trainer(model(), train_data=Stream(), batch_size=20, **QUIET).fit()
    assert "no length" in str(err.value) and "max_steps" in str(err.value)


def test_a_stream_trains_by_steps_pass_after_pass_and_validates_on_a_stream():
    # 200 samples in batches of 20: 10 batches a pass, so 25 steps take three passes
    result = Trainer(model(), lambda p: torch.optim.SGD(p, lr=0.2), train_data=Stream(), val_data=Stream(60, seed=1),
                     batch_size=20, max_steps=25, **QUIET).fit()
    assert result.steps == 25 and result.epochs >= 2
    assert result.history[-1]["val_acc"] > 0.7


def _stream_run(out_dir, stop_at=None, resume=False, capsys=None):
    trainer = Trainer(model(), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), train_data=Stream(),
                      batch_size=20, max_steps=16, checkpoint_every=4, out_dir=out_dir, resume=resume, **QUIET)
    if stop_at is not None:
        trainer.on("step_end", lambda step, trainer, **_: trainer.request_stop() if step == stop_at else None)
    trainer.fit()
    return load_file(str(out_dir / "final" / "model.safetensors"))


def test_a_stream_resumes_by_replaying_its_epoch_and_says_so(tmp_path, capsys):
    whole = _stream_run(tmp_path / "whole")
    _stream_run(tmp_path / "split", stop_at=13)  # mid-pass: batch 3 of the second pass
    capsys.readouterr()
    resumed = _stream_run(tmp_path / "split", resume=True)
    said = capsys.readouterr().err
    assert "resumed by reading again the 3 batches of epoch 1" in said and "StatefulDataLoader" in said
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), f"{name} differs after resume"


def test_a_stateful_data_loader_is_resumed_through_its_own_state(tmp_path, capsys):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    x = torch.randn(160, 6, generator=torch.Generator().manual_seed(2))
    data = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())

    def run(out_dir, stop_at=None, resume=False):
        torch.manual_seed(7)  # the loader draws its shuffling seed from the global RNG, which checkpoints restore
        loader = stateful.StatefulDataLoader(data, batch_size=16, shuffle=True)
        trainer = Trainer(model(), lambda p: torch.optim.SGD(p, lr=0.1), train_data=loader, epochs=2,
                          checkpoint_every=3, out_dir=out_dir, resume=resume, **QUIET)
        if stop_at is not None:
            trainer.on("step_end", lambda step, trainer, **_: trainer.request_stop() if step == stop_at else None)
        trainer.fit()
        return load_file(str(out_dir / "final" / "model.safetensors"))

    whole = run(tmp_path / "whole")
    run(tmp_path / "split", stop_at=6)  # mid-epoch: the loader's own state says where
    capsys.readouterr()
    resumed = run(tmp_path / "split", resume=True)
    assert "reading again" not in capsys.readouterr().err  # no replay: the loader put itself back
    state = torch.load(sorted((tmp_path / "split" / "checkpoints").glob("step-*"))[0] / "state.pt", weights_only=True)
    assert state["train_loader"] is not None
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), f"{name} differs after resume"
