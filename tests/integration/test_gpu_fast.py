"""The GPU half of the fast path: whole-step CUDA graphs, sync-free steps, side-stream prefetch.

Each test compares against the same training run without the feature (same loss trajectory within
float tolerance). They run only where CUDA is available (`pytest -m gpu`, bench/gpu_session.sh).
"""
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(autouse=True)
def exact_fp32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def images(n=96, poisoned=()):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    for i in poisoned:
        x[i] = float("inf")
    return TensorDataset(x, y)


def conv_net(softmax=False):
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 2)]
    return nn.Sequential(*layers, *([nn.Softmax(dim=1)] if softmax else []))


def run(fast, data=None, model=None, **kwargs):
    seen = []
    kwargs.setdefault("precision", "fp32")
    kwargs.setdefault("checks", False)
    trainer = torchwise.Trainer(model or conv_net(), train_data=data or images(), max_epochs=2, batch_size=16,
                                device="cuda", progress=False, fast=fast, **kwargs)
    trainer.on("step_end", lambda loss, **_: seen.append(loss))
    result = trainer.fit()
    return trainer, seen, result


def close(a, b, rtol=1e-4):
    torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=rtol, atol=1e-5, equal_nan=True)


def test_cuda_graph_replays_the_whole_step_and_trains_like_sync_free_eager():
    _, eager, _ = run(["sync_free"])
    trainer, graphed, _ = run(["cuda_graph"])
    steps = trainer.setup.step_core.graphed
    assert steps.failure is None and steps.replays == len(graphed) - 3  # three warm-up steps, then replays
    close(graphed, eager)


def test_a_short_last_batch_runs_eagerly_and_the_schedule_reaches_the_replays():
    data = images(100)  # 6 full batches and one of 4 per epoch
    _, eager, _ = run(["sync_free"], data, scheduler="cosine")
    trainer, graphed, _ = run(["cuda_graph"], data, scheduler="cosine")
    steps = trainer.setup.step_core.graphed
    assert steps.replays == len(graphed) - 3 - 2, steps.eager_why
    close(graphed, eager)


def test_onecycle_momentum_cycling_runs_eagerly_with_the_same_trajectory():
    # OneCycleLR moves Adam's beta1 each step; the fused kernel takes betas as numbers fixed at capture
    _, eager, _ = run(["sync_free"], scheduler="onecycle")
    trainer, graphed, _ = run(["cuda_graph"], scheduler="onecycle")
    steps = trainer.setup.step_core.graphed
    assert steps.graph is not None and steps.replays <= 1, steps.eager_why
    assert any("momentum" in why for why in steps.eager_why)
    close(graphed, eager)


def test_a_non_finite_batch_is_skipped_inside_the_graph():
    data = images(poisoned=(70, 85))  # inf inputs: most of their steps come after the warm-up
    _, eager, r1 = run(["sync_free"], data, num_workers=0)
    trainer, graphed, r2 = run(["cuda_graph"], data, num_workers=0)
    assert r1.skipped_steps == r2.skipped_steps >= 2 and trainer.setup.step_core.graphed.replays > 0
    close(graphed, eager)


def test_bf16_checks_and_prefetch_work_with_graphs():
    trainer, graphed, result = run(["cuda_graph", "prefetch"], model=conv_net(softmax=True), precision="bf16",
                                   checks=True)
    assert trainer.setup.step_core.graphed.failure is None and trainer.setup.step_core.graphed.replays > 0
    assert "softmax-before-loss" in {f["id"] for f in result.findings}


def test_sync_free_and_prefetch_match_the_plain_gpu_path():
    _, plain, _ = run(["fused_optimizer"])
    trainer, fast, _ = run(["sync_free", "prefetch"])
    assert {"sync_free", "prefetch"} <= trainer.fast_plan.on
    close(fast, plain)


def test_a_weighted_loss_built_on_the_cpu_trains_on_the_gpu():
    loss = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0]))  # as the CLI's class_weights builds it
    trainer, seen, _ = run("auto", loss=loss)
    assert loss.weight.is_cuda and len(seen) == 12


class _VariableWidthImages(torch.utils.data.Dataset):
    def __init__(self, n=40):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.randn(3, 8, 8 + i % 12), i % 2


def test_cudnn_benchmark_goes_off_when_input_shapes_keep_changing_and_comes_back_after_fit():
    class Pooled(nn.Module):  # any width in, two logits out
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x).mean(dim=(2, 3))[:, :2]

    torch.backends.cudnn.benchmark = False
    trainer = torchwise.Trainer(Pooled(), train_data=_VariableWidthImages(), batch_size=1, device="cuda",
                                progress=False, checks=False, num_workers=0)
    trainer.fit()
    assert trainer.cudnn_benchmark_off and "9 different sample shapes" in trainer.cudnn_benchmark_off
    assert torch.backends.cudnn.benchmark is False  # the process' own setting, restored by fit()
    fixed, _, _ = run("auto")  # fixed 3x8x8 images: benchmark mode stays on for the whole run
    assert fixed.cudnn_benchmark_off is None
