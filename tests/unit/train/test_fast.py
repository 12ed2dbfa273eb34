"""The fast path: every switch gives the same training as the plain path (CPU correctness tests)."""
import pytest
import torch
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import ConfigError
from testkit.trainer_runs import conv_net, images, losses, weights_after


def test_auto_on_cpu_reports_each_part_and_why_it_is_off():
    trainer, _ = losses("auto")
    text = trainer.fast_plan.describe()
    for part in ("channels_last off (pays off on GPUs)", "tf32 off", "fused_optimizer off", "compile off (opt-in",
                 "prefetch off (pays off on GPUs)", "cuda_graph off (needs a CUDA device)"):
        assert part in text, text


@pytest.mark.parametrize("part", ["channels_last", "fused_optimizer"])
def test_a_switch_gives_the_same_loss_trajectory_as_the_plain_path(part):
    _, plain = losses("off")
    trainer, fast = losses([part])
    assert part in trainer.fast_plan.on
    if part == "fused_optimizer":
        assert trainer.optimizer.defaults["fused"] is True
    torch.testing.assert_close(torch.tensor(fast), torch.tensor(plain), rtol=1e-4, atol=1e-5)


def test_fused_optimizer_leaves_the_users_optimizer_alone():
    trainer, _ = losses(["fused_optimizer"], lambda params: torch.optim.SGD(params, lr=0.1))
    assert "fused_optimizer" not in trainer.fast_plan.on
    assert "used as given" in trainer.fast_plan.why_off["fused_optimizer"]


def test_a_compile_failure_falls_back_to_eager_and_names_the_reason(capfd):
    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("this backend cannot compile anything")

    _, plain = losses("off")
    trainer = torchwise.Trainer(conv_net(), train_data=images(), max_epochs=2, batch_size=16, checks=False,
                                fast=["compile"], compile_options={"backend": broken_backend})
    seen = []
    trainer.on("step_end", lambda loss, **_: seen.append(loss))
    trainer.fit()
    err = capfd.readouterr().err
    assert "torch.compile failed, training continues in eager mode" in err
    assert "this backend cannot compile anything" in err
    assert trainer.fast_plan.why_off["compile"].startswith("failed")
    torch.testing.assert_close(torch.tensor(seen), torch.tensor(plain), rtol=1e-4, atol=1e-5)


def test_unknown_part_is_rejected_with_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean: channels_last"):
        losses(["channel_last"])


def test_prefetch_is_refused_where_reading_ahead_would_change_random_draws():
    trainer, _ = weights_after(["prefetch"], 1, workers=0)
    assert "prefetch" not in trainer.fast_plan.on
    assert "main process" in trainer.fast_plan.why_off["prefetch"]
    trainer, _ = losses(["prefetch"])  # a TensorDataset: batch indexing draws nothing, so it may
    assert "prefetch" in trainer.fast_plan.on


def test_cuda_graph_asked_for_on_the_cpu_is_off_with_the_reason():
    trainer, seen = losses(["cuda_graph", "channels_last"])
    assert "cuda_graph" not in trainer.fast_plan.on and "channels_last" in trainer.fast_plan.on
    assert "needs a CUDA device" in trainer.fast_plan.describe()
    assert len(seen) == 12


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@cuda
def test_gpu_cuda_graph_and_prefetch_train_like_the_plain_path(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # TF32 convolutions differ in the 4th digit

    def run(fast):
        seen = []
        trainer = torchwise.Trainer(conv_net(), train_data=images(), max_epochs=2, batch_size=16, device="cuda",
                                    precision="fp32", progress=False, checks=False, fast=fast)
        trainer.on("step_end", lambda loss, **_: seen.append(loss))
        trainer.fit()
        return trainer, seen

    _, plain = run("off")
    trainer, graphed = run(["cuda_graph", "prefetch"])
    assert {"cuda_graph", "prefetch"} <= trainer.fast_plan.on, trainer.fast_plan.describe()
    torch.testing.assert_close(torch.tensor(graphed), torch.tensor(plain), rtol=1e-3, atol=1e-4)


def uint8_images(n=96):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (n, 3, 12, 12), generator=g, dtype=torch.uint8)
    return TensorDataset(x, (x.float().mean(dim=(1, 2, 3)) > 127.5).long())


def _augmented_run(epochs, tmp_path=None, resume=False, fast="off"):
    from torchwise.data.device_augment import BatchAugment, BatchEval

    seen = []
    trainer = torchwise.Trainer(conv_net(), train_data=uint8_images(), val_data=uint8_images(32), max_epochs=epochs,
                                batch_size=16, progress=False, checks=False, fast=fast, out_dir=tmp_path,
                                resume=resume, batch_augment=BatchAugment(size=8, scale=(0.5, 1.0), mean=[0.5] * 3,
                                                                          std=[0.25] * 3),
                                batch_eval=BatchEval(size=8, mean=[0.5] * 3, std=[0.25] * 3))
    trainer.on("step_end", lambda loss, **_: seen.append(loss))
    result = trainer.fit()
    return trainer, seen, result


def test_batch_augment_on_the_device_trains_reproducibly_and_resumes_exactly(tmp_path):
    trainer, first, result = _augmented_run(2)
    _, again, _ = _augmented_run(2, fast=["prefetch"])  # augmenting ahead, in the prefetcher, changes nothing
    assert first == again and len(first) == 12 and "val_loss" in result.history[-1]
    _augmented_run(1, tmp_path)
    trainer, tail, _ = _augmented_run(2, tmp_path, resume=True)
    assert tail == first[6:]


def test_batch_augment_that_returns_the_wrong_thing_is_named():
    with pytest.raises(torchwise.errors.TorchwiseError, match="batch_augment must return a tensor with one row per sample"):
        torchwise.Trainer(conv_net(), train_data=images(), max_epochs=1, progress=False, checks=False,
                          batch_augment=lambda x, g: x[:1]).fit()
    with pytest.raises(torchwise.errors.TorchwiseError, match="batch_eval must be a callable"):
        torchwise.Trainer(conv_net(), train_data=images(), batch_eval="BatchEval")


def _trajectory(fast, optimizer=None, data=None, **kwargs):
    seen = []
    kwargs.setdefault("batch_size", 16)
    trainer = torchwise.Trainer(conv_net(), optimizer, train_data=data or images(), max_epochs=2, progress=False,
                                checks=False, fast=fast, **kwargs)
    trainer.on("step_end", lambda loss, **_: seen.append(loss))
    result = trainer.fit()
    return trainer, seen, result, {k: v.clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("kwargs", [{}, {"clip_grad_norm": 0.05, "accumulate": 2, "batch_size": 12}])
def test_sync_free_steps_train_like_the_classic_step(kwargs):
    _, classic, _, w1 = _trajectory(["fused_optimizer"], **kwargs)
    trainer, sync_free, _, w2 = _trajectory(["sync_free"], **kwargs)
    assert trainer.setup.step_core.sync_free and trainer.optimizer.defaults["fused"] is True
    torch.testing.assert_close(torch.tensor(sync_free), torch.tensor(classic), rtol=1e-6, atol=1e-7)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-5, atol=1e-6)


class NanOnSomeBatches(torch.utils.data.Dataset):
    """Samples 5 and 40 hold inf: their batches give a non-finite loss."""

    def __init__(self):
        self.base = images()

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        x, y = self.base[i]
        return (torch.full_like(x, float("inf")) if i in (5, 40) else x), y


def test_sync_free_skips_non_finite_updates_on_the_device_like_the_classic_step():
    kwargs = dict(data=NanOnSomeBatches(), scheduler="cosine", num_workers=0)
    _, classic, r1, w1 = _trajectory(["fused_optimizer"], **kwargs)
    trainer, sync_free, r2, w2 = _trajectory(["sync_free"], **kwargs)
    assert r1.skipped_steps == r2.skipped_steps == 4  # two poisoned batches per epoch
    finite = [(a, b) for a, b in zip(classic, sync_free) if a == a]
    assert len(finite) == len(classic) - 4 and all(b != b for a, b in zip(classic, sync_free) if a != a)
    torch.testing.assert_close(torch.tensor([b for _, b in finite]), torch.tensor([a for a, _ in finite]),
                               rtol=1e-6, atol=1e-7)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-5, atol=1e-6)
    assert trainer.optimizer.state[next(iter(trainer.model.parameters()))]["step"].item() == 12 - 4


def test_sync_free_needs_a_fused_optimizer_and_says_so():
    trainer, _, _, _ = _trajectory(["sync_free"], lambda params: torch.optim.SGD(params, lr=0.1))
    assert not trainer.setup.step_core.sync_free
    assert "needs a fused optimizer" in trainer.fast_plan.why_off["sync_free"]
    trainer, _, _, _ = _trajectory(["sync_free"], lambda params: torch.optim.SGD(params, lr=0.1, fused=True))
    assert trainer.setup.step_core.sync_free  # SGD's fused kernel reads found_inf too


def test_a_factory_with_a_fused_keyword_lets_the_fast_plan_choose():
    seen = {}

    def factory(params, fused=False):
        seen["fused"] = fused
        return torch.optim.AdamW(params, lr=1e-3, fused=fused or None)

    trainer, _ = losses(["fused_optimizer", "sync_free"], factory)
    assert seen == {"fused": True} and "fused_optimizer" in trainer.fast_plan.on and trainer.setup.step_core.sync_free
    trainer, _ = losses("off", factory)
    assert seen == {"fused": False} and trainer.optimizer.defaults["fused"] is None
