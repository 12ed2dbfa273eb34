"""The Trainer on real models and data: each feature of the training loop exercised for real."""
import math
import os

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchwise
from torchwise.errors import CheckpointError, ConfigError, TorchwiseError, TrainingStopped


def make_data(n=256, features=8, classes=3, seed=0):
    x = torch.randn(n, features, generator=torch.Generator().manual_seed(seed))
    w = torch.randn(features, classes, generator=torch.Generator().manual_seed(99))  # one task for all splits
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def mlp(features=8, classes=3, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, classes))


def sgd(lr=0.1):
    return lambda params: torch.optim.SGD(params, lr=lr)


def test_fit_learns_and_returns_history(tmp_path):
    data = make_data()
    trainer = torchwise.Trainer(mlp(), sgd(0.5), train_data=data, val_data=make_data(seed=1), max_epochs=8,
                                progress=False, out_dir=tmp_path)
    result = trainer.fit()
    assert result.steps == 8 * 8 and result.epochs == 8
    assert len(result.history) == 8
    assert result.history[-1]["val_acc"] > 0.85
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert result.best_metric == min(r["val_loss"] for r in result.history)
    assert (tmp_path / "final" / "model.safetensors").is_file()
    assert trainer.evaluate()["val_acc"] == pytest.approx(result.history[-1]["val_acc"])


def test_accumulation_matches_a_four_times_larger_batch():
    data = make_data(n=200)  # 200 = 3 full steps of 64 + a short one: the weighting must handle it
    runs = {}
    for batch, accumulate in ((16, 4), (64, 1)):
        model = mlp(seed=3)
        torchwise.Trainer(model, sgd(0.2), train_data=data, batch_size=batch, accumulate=accumulate,
                          max_epochs=2, progress=False, seed=5).fit()
        runs[(batch, accumulate)] = model.state_dict()
    for key, value in runs[(64, 1)].items():
        torch.testing.assert_close(runs[(16, 4)][key], value, rtol=1e-5, atol=1e-6)


def test_gradient_clipping_bounds_the_update_and_logs_the_norm():
    data = make_data()
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    norms = []
    trainer = torchwise.Trainer(model, sgd(1.0), train_data=data, max_steps=1, clip_grad_norm=0.01,
                                progress=False, log_every=1)
    trainer.on("step_end", lambda grad_norm, **_: norms.append(grad_norm))
    trainer.fit()
    update = torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert norms[0] > 0.01  # the raw norm is logged, before clipping
    assert float(update) == pytest.approx(0.01, rel=1e-3)  # SGD with lr=1 moves by exactly the clipped norm


class NaNAt(torch.utils.data.Dataset):
    """A data set whose samples listed in `bad` contain NaN."""

    def __init__(self, base, bad):
        self.base, self.bad = base, set(bad)

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        x, y = self.base[i]
        return (x * math.nan if i in self.bad else x), y


def test_nonfinite_loss_skips_the_step_counts_it_and_does_not_step_the_scheduler(capfd):
    data = NaNAt(make_data(n=64), bad=range(16))  # the first batch of every epoch (no shuffle) is NaN
    model = mlp()
    skipped_steps = []
    trainer = torchwise.Trainer(model, sgd(0.1), train_data=DataLoader(data, batch_size=16), max_epochs=2,
                                scheduler="cosine", progress=True)
    trainer.on("step_end", lambda step, skipped, **_: skipped and skipped_steps.append(step))
    result = trainer.fit()
    assert result.skipped_steps == 2 and skipped_steps == [1, 5]  # first batch of each epoch (no shuffle)
    assert trainer.schedule.scheduler.last_epoch == result.steps - 2
    assert all(torch.isfinite(p).all() for p in model.parameters())
    err = capfd.readouterr().err
    assert "step 1: non-finite loss (nan); optimizer step skipped" in err


def test_many_nonfinite_steps_in_a_row_stop_the_run_with_a_clear_error():
    data = NaNAt(make_data(n=64), bad=range(64))
    trainer = torchwise.Trainer(mlp(), sgd(), train_data=data, max_epochs=5, batch_size=8, progress=False,
                                max_consecutive_skips=4)
    with pytest.raises(TrainingStopped) as info:
        trainer.fit()
    message = str(info.value)
    assert "4 optimizer steps in a row were skipped" in message and "step: 4" in message
    assert "Lower the learning rate" in message


def test_fp16_overflow_skips_without_stepping_the_scheduler():
    # fp16 autocast with a GradScaler (works on CPU too). The loss is finite, but its gradient times the
    # initial loss scale (65536) overflows, so the scaler must skip until the scale is small enough.
    data = make_data()

    def huge_loss(out, target):
        return nn.functional.cross_entropy(out, target) * 300.0

    trainer = torchwise.Trainer(mlp(), sgd(1e-6), huge_loss, train_data=data, max_steps=30, precision="fp16",
                                scheduler="onecycle", progress=False, max_consecutive_skips=25)
    result = trainer.fit()
    assert trainer.precision.use_grad_scaler
    assert 0 < result.skipped_steps < result.steps
    assert trainer.step_runner.scaler.get_scale() < 65536
    assert trainer.schedule.scheduler.last_epoch == result.steps - result.skipped_steps


def test_plateau_scheduler_follows_the_validation_metric():
    data = make_data()
    model = mlp()
    for p in model.parameters():
        p.requires_grad_(False)
    model[3].bias.requires_grad_(True)

    def flat_loss(out, target):  # gradient zero: validation loss never improves
        return nn.functional.cross_entropy(out.detach(), target) + 0.0 * out.sum()

    trainer = torchwise.Trainer(model, sgd(0.1), flat_loss, train_data=data, val_data=data, max_epochs=6,
                                scheduler="plateau", progress=False)
    result = trainer.fit()
    lrs = [row["lr"] for row in result.history]
    assert lrs[:3] == [0.1, 0.1, 0.1] and lrs[-1] == pytest.approx(0.01)


def test_step_scheduler_steps_per_epoch_and_lr_is_logged(tmp_path):
    trainer = torchwise.Trainer(mlp(), sgd(0.3), train_data=make_data(), val_data=make_data(seed=1),
                                max_epochs=3, scheduler="step", progress=False, out_dir=tmp_path)
    result = trainer.fit()
    # each row shows the lr the epoch trained with; StepLR lowers it after the epoch
    assert [r["lr"] for r in result.history] == pytest.approx([0.3, 0.03, 0.003])
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.0003)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"epoch", "step", "train_loss", "val_loss", "val_acc", "lr"} <= set(header)


def test_early_stopping_restores_the_best_weights():
    scores = iter([0.5, 0.9, 0.7, 0.6, 0.4, 0.3, 0.2])
    snapshots = {}
    trainer = torchwise.Trainer(
        mlp(), sgd(0.5), train_data=make_data(), val_data=make_data(seed=1), max_epochs=7, progress=False,
        metrics={"score": lambda out, target: next(scores)},
        early_stopping=torchwise.EarlyStopping(monitor="val_score", mode="max", patience=2))
    trainer.on("evaluation_end", lambda step, **_: snapshots.__setitem__(
        step, {k: v.clone() for k, v in trainer.model.state_dict().items()}))
    result = trainer.fit()
    assert result.stopped_early and len(result.history) == 4
    assert result.best_metric == 0.9 and result.best_step == 16
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(value, snapshots[16][key])
    assert not torch.equal(snapshots[16]["0.weight"], snapshots[32]["0.weight"])


class ModeRecorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp()
        self.calls = []

    def forward(self, x):
        self.calls.append((self.training, torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        return self.net(x)


def test_validation_runs_in_eval_mode_under_inference_mode_and_train_mode_comes_back():
    model = ModeRecorder()
    trainer = torchwise.Trainer(model, sgd(), train_data=make_data(n=32), val_data=make_data(n=16), max_epochs=2,
                                batch_size=16, progress=False)
    trainer.fit()
    assert model.calls == [(True, False, True)] * 2 + [(False, True, False)] + \
        [(True, False, True)] * 2 + [(False, True, False)]
    assert model.training


def test_validation_does_not_change_the_training_trajectory():
    weights = []
    for val in (None, make_data(n=64, seed=2)):
        model = mlp(dropout=0.3)
        torchwise.Trainer(model, sgd(), train_data=make_data(), val_data=val, max_epochs=3, eval_every=3,
                          progress=False).fit()
        weights.append(model.state_dict())
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key])


def test_topk_and_user_metrics():
    data = make_data(n=120, classes=12)  # top-5 is counted above 10 classes (streaming_metrics.TOP5_MIN_CLASSES)
    trainer = torchwise.Trainer(mlp(classes=12), sgd(), train_data=data, val_data=data, max_steps=2, progress=False,
                                metrics={"always_one": lambda out, target: 1.0})
    metrics = trainer.evaluate()
    assert set(metrics) == {"val_loss", "val_acc", "val_top5", "val_always_one"}
    assert metrics["val_top5"] >= metrics["val_acc"]


def test_regression_task_reshapes_targets_and_reports_mae():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 4, generator=g)
    y = x.sum(dim=1)  # shape [N]; the model outputs [N, 1]
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    trainer = torchwise.Trainer(model, sgd(0.1), train_data=TensorDataset(x, y), val_data=TensorDataset(x, y),
                                task="regression", max_epochs=20, progress=False)
    result = trainer.fit()
    assert result.history[-1]["val_mae"] < 0.05


def test_same_seed_same_weights_other_seed_other_weights():
    def train(seed):
        model = mlp(dropout=0.3)
        torchwise.Trainer(model, sgd(), train_data=make_data(), max_epochs=2, seed=seed, progress=False).fit()
        return model.state_dict()["0.weight"]

    assert torch.equal(train(1), train(1))
    assert not torch.equal(train(1), train(2))


def test_deterministic_mode_sets_what_others_forget():
    def during_fit(**kwargs):
        seen = []
        t = torchwise.Trainer(mlp(), sgd(), train_data=make_data(), max_steps=1, progress=False, **kwargs)
        t.on("step_end", lambda **_: seen.append((os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                                                   torch.are_deterministic_algorithms_enabled(),
                                                   torch.backends.cudnn.benchmark)))
        t.fit()
        return seen

    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    assert during_fit(deterministic=True) == [(":4096:8", True, False)]
    assert during_fit() == [(None, False, True)]  # fast kernels by default (tests/unit/train/test_process_switches.py:
    # every switch is back as it was once fit() returns)


def test_device_and_precision_choice():
    from torchwise.train.step.precision import choose_device, choose_precision

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert choose_device("auto").type == expected
    assert choose_precision("auto", torch.device("cpu")).name == "fp32"
    assert choose_precision("bf16", torch.device("cpu")).autocast_dtype == torch.bfloat16
    fp16 = choose_precision("fp16", torch.device("cpu"))
    assert fp16.use_grad_scaler and fp16.autocast_dtype == torch.float16
    if torch.cuda.is_available():
        auto = choose_precision("auto", torch.device("cuda"))
        assert auto.name == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    else:
        with pytest.raises(ConfigError, match="sees none"):
            choose_device("cuda")
    with pytest.raises(ConfigError, match="Unknown precision"):
        choose_precision("fp8", torch.device("cpu"))


def test_bf16_autocast_trains_on_cpu():
    trainer = torchwise.Trainer(mlp(), sgd(0.5), train_data=make_data(), val_data=make_data(seed=1),
                                max_epochs=4, precision="bf16", progress=False)
    result = trainer.fit()
    assert trainer.precision.name == "bf16"
    assert result.history[-1]["val_loss"] < result.history[0]["val_loss"]


def test_loader_settings_fit_the_device():
    trainer = torchwise.Trainer(mlp(), sgd(), train_data=make_data(), max_steps=1, device="cpu", progress=False)
    trainer.fit()
    plan = trainer.train_loader.plan
    assert (plan.num_workers, plan.pin_memory, plan.shuffle, plan.resumable) == (0, False, True, True)


def test_events_have_removable_handles():
    calls = []
    trainer = torchwise.Trainer(mlp(), sgd(), train_data=make_data(), max_steps=6, progress=False)
    handle = trainer.on("step_end", lambda step, **_: (calls.append(step), step == 3 and handle.remove()))
    trainer.fit()
    assert calls == [1, 2, 3]
    with pytest.raises(ConfigError, match="did you mean: step_end"):
        trainer.on("stepend", print)


def test_tensorboard_event_files_hold_train_and_val_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    torchwise.Trainer(mlp(), sgd(), train_data=make_data(), val_data=make_data(seed=1), max_epochs=3,
                      log_every=2, progress=False, out_dir=tmp_path).fit()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/grad_norm", "val/val_loss", "val/val_acc"} <= tags
    assert [e.step for e in acc.Scalars("val/val_loss")] == [8, 16, 24]


def test_checkpoints_keep_the_last_k_and_best_weights(tmp_path):
    torchwise.Trainer(mlp(), sgd(), train_data=make_data(), val_data=make_data(seed=1), max_epochs=2,
                      checkpoint_every=3, keep_last=2, progress=False, out_dir=tmp_path).fit()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-000000015", "step-000000016"]
    assert (tmp_path / "best" / "model.safetensors").is_file()
    state = torch.load(tmp_path / "checkpoints" / names[-1] / "state.pt", weights_only=True)
    assert {"optimizer", "scheduler", "scaler", "rng", "position", "config", "versions"} <= set(state)
    assert set(state["rng"]) >= {"python", "numpy", "torch"}


def test_resume_of_a_finished_run_does_nothing_more(tmp_path):
    kwargs = dict(train_data=make_data(), max_epochs=2, progress=False, out_dir=tmp_path)
    torchwise.Trainer(mlp(), sgd(), **kwargs).fit()
    result = torchwise.Trainer(mlp(), sgd(), resume=True, **kwargs).fit()
    assert result.resumed_from.name == "step-000000016" and result.steps == 16


# ------------------------------------------------------------------ bad input: clear errors
def test_bad_model_type():
    with pytest.raises(ConfigError, match="model must be a torch.nn.Module") as info:
        torchwise.Trainer("resnet", train_data=make_data())
    assert "fix:" in str(info.value)


def test_loss_that_returns_a_non_scalar():
    loss = nn.CrossEntropyLoss(reduction="none")
    with pytest.raises(TorchwiseError, match="not a scalar") as info:
        torchwise.Trainer(mlp(), sgd(), loss, train_data=make_data(), max_steps=1, progress=False).fit()
    assert "shape: (32,)" in str(info.value) and "reduction='mean'" in str(info.value)


def test_empty_dataset():
    empty = TensorDataset(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long))
    with pytest.raises(TorchwiseError, match="train_data is empty: it has 0 samples"):
        torchwise.Trainer(mlp(), sgd(), train_data=empty, progress=False).fit()


def test_optimizer_of_another_model():
    other = mlp()
    with pytest.raises(ConfigError, match="holds none of this model's trainable parameters"):
        torchwise.Trainer(mlp(), torch.optim.SGD(other.parameters(), lr=0.1), train_data=make_data(),
                          progress=False).fit()


def test_bad_numbers_are_rejected_with_the_value():
    with pytest.raises(ConfigError, match="accumulate must be an integer >= 1") as info:
        torchwise.Trainer(mlp(), train_data=make_data(), accumulate=0)
    assert "accumulate: 0" in str(info.value)
    with pytest.raises(ConfigError, match="Unknown scheduler") as info:
        torchwise.Trainer(mlp(), train_data=make_data(), scheduler="cosin", max_steps=1, progress=False).fit()
    assert "did you mean: cosine" in str(info.value)


def test_resuming_a_checkpoint_from_another_model(tmp_path):
    torchwise.Trainer(mlp(classes=3), sgd(), train_data=make_data(), max_epochs=1, progress=False,
                      out_dir=tmp_path).fit()
    with pytest.raises(CheckpointError, match="do not fit this model") as info:
        torchwise.Trainer(mlp(classes=5), sgd(), train_data=make_data(), max_epochs=2, progress=False,
                          out_dir=tmp_path, resume=True).fit()
    assert "3.weight: file (3, 32) vs model (5, 32)" in str(info.value)
    assert "another number of classes" in str(info.value)


def test_resuming_with_other_data(tmp_path):
    torchwise.Trainer(mlp(), sgd(), train_data=make_data(), max_epochs=1, progress=False, out_dir=tmp_path).fit()
    with pytest.raises(TorchwiseError, match="training data differ"):
        torchwise.Trainer(mlp(), sgd(), train_data=make_data(n=100), max_epochs=2, progress=False,
                          out_dir=tmp_path, resume=True).fit()


class SlowData(torch.utils.data.Dataset):
    def __init__(self, base, delay):
        self.base, self.delay = base, delay

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        import time

        time.sleep(self.delay)
        return self.base[i]


def test_data_wait_fraction_is_measured_and_in_memory_tensors_are_batch_indexed(tmp_path):
    fast = torchwise.Trainer(mlp(), sgd(), train_data=make_data(), val_data=make_data(seed=1), max_epochs=1,
                             progress=False)
    fast_row = fast.fit().history[-1]
    assert fast.train_loader.plan.note == "in-memory tensors: batch indexing"
    slow = torchwise.Trainer(mlp(), sgd(), train_data=SlowData(make_data(n=64), 0.005), val_data=make_data(seed=1),
                             max_epochs=1, progress=False, out_dir=tmp_path)
    slow_row = slow.fit().history[-1]
    # Bounds that hold on a loaded machine (load only makes things slower): every sample sleeps 5 ms in
    # the loader, so the measured data time is at least 64 x 5 ms, and the throughput at most 200 samples/s.
    assert 0.0 <= fast_row["data_wait"] <= 1.0 and 0.0 < slow_row["data_wait"] <= 1.0
    busy_s = 64 / slow_row["samples_per_s"]
    assert slow_row["data_wait"] * busy_s >= 64 * 0.005 * 0.99, (slow_row, busy_s)
    assert slow_row["samples_per_s"] < 64 / (64 * 0.005) * 1.05
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0]
    assert "data_wait" in header and "samples_per_s" in header


def test_batch_indexing_gives_the_same_training_as_per_sample_fetching():
    data = make_data()
    weights = []
    for train_data in (data, SlowData(data, 0.0)):
        model = mlp(dropout=0.2)
        torchwise.Trainer(model, sgd(), train_data=train_data, max_epochs=2, progress=False).fit()
        weights.append(model.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_resuming_a_one_cycle_run_with_more_epochs_is_refused_clearly(tmp_path):
    kwargs = dict(train_data=make_data(), progress=False, out_dir=tmp_path, scheduler="onecycle")
    torchwise.Trainer(mlp(), sgd(), max_epochs=1, **kwargs).fit()
    with pytest.raises(ConfigError, match="run's length changed") as info:
        torchwise.Trainer(mlp(), sgd(), max_epochs=3, resume=True, **kwargs).fit()
    assert "steps then: 8" in str(info.value) and "steps now: 24" in str(info.value)
    assert "extend_schedule='restart'" in str(info.value) and "extend_schedule='keep_end'" in str(info.value)


def test_the_trainer_runs_torchwise_checks_detectors(tmp_path, capfd):
    torch.manual_seed(0)
    softmaxed = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3), nn.Softmax(dim=1))
    result = torchwise.Trainer(softmaxed, sgd(), train_data=make_data(), val_data=make_data(seed=1), max_epochs=2,
                               out_dir=tmp_path).fit()
    assert "softmax-before-loss" in {f["id"] for f in result.findings}
    assert "softmax-before-loss" in (tmp_path / "checks.json").read_text()
    assert "softmax-before-loss" in capfd.readouterr().err
    clean = torchwise.Trainer(mlp(), sgd(0.5), train_data=make_data(), val_data=make_data(seed=1), max_epochs=3,
                              progress=False).fit()
    assert clean.findings == []
    off = torchwise.Trainer(nn.Sequential(nn.Linear(8, 3), nn.Softmax(dim=1)), sgd(), train_data=make_data(),
                            max_epochs=1, progress=False, checks=False).fit()
    assert off.findings == []


def test_the_trainers_checks_name_the_module_that_makes_a_nan_loss():
    # A few samples make sqrt's input negative: their batches give a nan loss, the Trainer skips those
    # steps, and the detectors (hooks only in deep steps) look at the next steps to find the source.
    class Sqrt(nn.Module):
        def forward(self, x):
            return torch.sqrt(x)

    g = torch.Generator().manual_seed(0)
    x = torch.rand(512, 8, generator=g)
    y = (x[:, 0] > 0.5).long()
    x[::40] = -x[::40]  # 13 poisoned samples
    torch.manual_seed(0)
    model = nn.Sequential(Sqrt(), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    result = torchwise.Trainer(model, sgd(), train_data=TensorDataset(x, y), batch_size=16, max_epochs=3,
                               progress=False).fit()
    assert result.skipped_steps > 0
    found = {f["id"]: f for f in result.findings}
    assert "nonfinite-loss" in found
    assert found["nonfinite-loss"]["evidence"]["culprit"] == "Sequential.0 (Sqrt)"


def test_profile_writes_a_trace_and_a_table_of_top_operators(tmp_path, capfd):
    import json as _json

    trainer = torchwise.Trainer(mlp(), sgd(), train_data=make_data(), max_epochs=2, out_dir=tmp_path, profile=3)
    trainer.fit()
    trace = _json.loads((tmp_path / "profile" / "trace.json").read_text())
    names = {event.get("name", "") for event in trace["traceEvents"]}
    assert any("aten::addmm" in n or "aten::linear" in n for n in names)
    assert sum(n.startswith("ProfilerStep#") for n in names) == 3  # exactly the active steps
    table = (tmp_path / "profile" / "top_ops.txt").read_text()
    assert "Self CPU" in table and "aten::" in table
    assert "profile of 3 steps after warm-up" in capfd.readouterr().err


@pytest.mark.parametrize("checkpoint_every", [8, 3, None])  # on every epoch's last step; mid-epoch; at epoch ends
def test_a_resumed_run_logs_what_an_uninterrupted_one_logs_row_for_row(tmp_path, checkpoint_every):
    """A checkpoint saved on an epoch's last step comes before that step's evaluation, which the resumed run
    runs again: metrics.csv and TensorBoard must not hold it twice (nor lose one the checkpoint already holds)."""
    import csv
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def fit(out, resume=False):
        torchwise.Trainer(mlp(), sgd(), train_data=make_data(), val_data=make_data(seed=1), max_epochs=3,
                          checkpoint_every=checkpoint_every, keep_last=20, progress=False, out_dir=out,
                          resume=resume, seed=0).fit()

    def records(out):
        rows = [(r["epoch"], r["step"], r["val_loss"]) for r in csv.DictReader(open(out / "metrics.csv"))]
        acc = EventAccumulator(str(out / "tb"))
        acc.Reload()
        return rows, [e.step for e in acc.Scalars("val/val_loss")]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    fit(whole)
    # every checkpoint but the last one is a point a crash could have resumed from
    for point in sorted((whole / "checkpoints").iterdir())[:-1]:
        shutil.rmtree(cut, ignore_errors=True)
        shutil.copytree(whole, cut)
        for later in sorted((cut / "checkpoints").iterdir()):
            if later.name > point.name:
                shutil.rmtree(later)
        fit(cut, resume=True)
        assert records(cut) == records(whole), point.name
