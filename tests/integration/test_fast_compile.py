"""The fast path's switches that start processes (torch.compile's workers, the prefetching loader) train like
the plain path. The in-process switches are tests/unit/train/test_fast.py."""
import torch
from torch import nn

import torchwise
from testkit.trainer_runs import images, losses


def test_compile_trains_like_eager():
    _, plain = losses("off")
    trainer, compiled = losses(["compile"])
    assert "compile" in trainer.fast_plan.on and hasattr(trainer.train_model, "_orig_mod")
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(plain), rtol=1e-3, atol=1e-4)


class Jittered(torch.utils.data.Dataset):
    """Random augmentation from the global RNGs while fetching: exact resume needs the loader's seeding."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        x, y = self.base[i]
        return x + 0.1 * torch.randn_like(x), y


def _weights_after(fast, epochs, tmp_path=None, resume=False, workers=2):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
    trainer = torchwise.Trainer(model, train_data=Jittered(images()), max_epochs=epochs, batch_size=16,
                                progress=False, checks=False, fast=fast, num_workers=workers,
                                out_dir=tmp_path, resume=resume)
    trainer.fit()
    return trainer, {k: v.clone() for k, v in model.state_dict().items()}


def test_prefetch_trains_exactly_like_the_plain_path_and_resumes_exactly(tmp_path):
    trainer, plain = _weights_after("off", 2)
    trainer, ahead = _weights_after(["prefetch"], 2)
    assert "prefetch" in trainer.fast_plan.on
    assert all(torch.equal(plain[k], ahead[k]) for k in plain)
    _weights_after(["prefetch"], 1, tmp_path)  # stopped after epoch 1, then resumed to epoch 2
    trainer, resumed = _weights_after(["prefetch"], 2, tmp_path, resume=True)
    assert all(torch.equal(plain[k], resumed[k]) for k in plain)
