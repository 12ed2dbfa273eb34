"""What fit() raises on Ctrl-C: torchwise.Interrupted, a KeyboardInterrupt (not an Exception) that carries
where it stopped, the checkpoint and the resume line, and that ends a script without a traceback."""
import os
import signal
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise


def trainer(out_dir):
    x = torch.randn(96, 4, generator=torch.Generator().manual_seed(0))
    torchwise.seed_everything(0)
    t = torchwise.Trainer(nn.Linear(4, 2), lambda p: torch.optim.SGD(p, lr=0.1),
                          train_data=TensorDataset(x, (x.sum(1) > 0).long()), batch_size=16, max_epochs=2,
                          out_dir=out_dir, progress=False, tensorboard=False)
    t.on("step_end", lambda step, **_: os.kill(os.getpid(), signal.SIGINT) if step == 2 else None)
    return t


@pytest.fixture
def excepthook():
    hook = sys.excepthook
    yield
    sys.excepthook = hook


def test_ctrl_c_raises_interrupted_with_the_checkpoint_and_the_resume_line(tmp_path, capfd, excepthook):
    t = trainer(tmp_path)
    with pytest.raises(torchwise.Interrupted) as info:
        t.fit()
    exc = info.value
    assert isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Exception)  # `except Exception` lets it by
    assert exc.step == 2 and exc.checkpoint == tmp_path / "checkpoints" / "step-000000002"
    assert (exc.checkpoint / "COMPLETE").is_file()
    assert "checkpoint saved" in str(exc) and "to resume: Trainer(..., out_dir=" in str(exc), str(exc)
    capfd.readouterr()
    sys.excepthook(type(exc), exc, exc.__traceback__)  # uncaught: its lines are on the console already
    assert capfd.readouterr().err == ""
    try:
        raise ValueError("not ours")
    except ValueError as other:
        sys.excepthook(type(other), other, other.__traceback__)  # every other exception: the usual traceback
    assert "Traceback" in capfd.readouterr().err

