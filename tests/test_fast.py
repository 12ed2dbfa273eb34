"""The fast path: every switch gives the same training as the plain path (CPU correctness tests)."""
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import ConfigError


def images(n=96):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 8, 8, generator=g)
    return TensorDataset(x, (x.mean(dim=(1, 2, 3)) > 0).long())


def conv_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(8 * 8 * 8, 2))


def losses(fast, optimizer=None, **kwargs):
    seen = []
    trainer = torchwise.Trainer(conv_net(), optimizer, train_data=images(), max_epochs=2, batch_size=16,
                                progress=False, checks=False, fast=fast, **kwargs)
    trainer.on("step_end", lambda loss, **_: seen.append(loss))
    trainer.fit()
    return trainer, seen


def test_auto_on_cpu_reports_each_part_and_why_it_is_off():
    trainer, _ = losses("auto")
    text = trainer.fast_plan.describe()
    for part in ("channels_last off (pays off on GPUs)", "tf32 off", "fused_optimizer off", "compile off (opt-in"):
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


def test_compile_trains_like_eager():
    _, plain = losses("off")
    trainer, compiled = losses(["compile"])
    assert "compile" in trainer.fast_plan.on and hasattr(trainer.train_model, "_orig_mod")
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(plain), rtol=1e-3, atol=1e-4)


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
