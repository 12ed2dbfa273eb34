"""The fast path's switches that start processes (torch.compile's workers, the prefetching loader) train like
the plain path. The in-process switches are tests/unit/train/test_fast.py."""
import torch

from testkit.trainer_runs import losses, weights_after


def test_compile_trains_like_eager():
    _, plain = losses("off")
    trainer, compiled = losses(["compile"])
    assert "compile" in trainer.fast_plan.on and hasattr(trainer.train_model, "_orig_mod")
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(plain), rtol=1e-3, atol=1e-4)


def test_prefetch_trains_exactly_like_the_plain_path_and_resumes_exactly(tmp_path):
    trainer, plain = weights_after("off", 2)
    trainer, ahead = weights_after(["prefetch"], 2)
    assert "prefetch" in trainer.fast_plan.on
    assert all(torch.equal(plain[k], ahead[k]) for k in plain)
    weights_after(["prefetch"], 1, tmp_path)  # stopped after epoch 1, then resumed to epoch 2
    trainer, resumed = weights_after(["prefetch"], 2, tmp_path, resume=True)
    assert all(torch.equal(plain[k], resumed[k]) for k in plain)
