"""The Trainer's Python API under bad input: every mistake is refused before training with what
happened, the values and the fix (a TorchwiseError), or does the right thing; Ctrl-C keeps the work.

Generated cases first (wrong types and values for each main argument, data that does not fit the
model), then the reported ones, each reproduced, then a real SIGINT in a subprocess."""
from __future__ import annotations

import os
import signal

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import torchwise
from torchwise.errors import TorchwiseError, TrainingStopped
from conftest import assert_clear_api_error


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_data(n=48, features=8, classes=3, seed=0):
    x = torch.randn(n, features, generator=torch.Generator().manual_seed(seed))
    w = torch.randn(features, classes, generator=torch.Generator().manual_seed(99))
    return TensorDataset(x, (x @ w).argmax(dim=1))


def mlp(features=8, classes=3, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, classes))


def sgd(lr=0.1):
    return lambda params: torch.optim.SGD(params, lr=lr)


QUIET = dict(progress=False, checks=False, tensorboard=False)


def trainer(**kwargs):
    args = dict(model=mlp(), optimizer=sgd(), train_data=make_data(), **QUIET)
    args.update(kwargs)
    return torchwise.Trainer(**args)


# ---------------------------------------------------------------- wrong types and values, refused at construction
BAD_ARGUMENTS = [
    ("model", "resnet18", ["model must be a torch.nn.Module", "str"]),
    ("model", nn.ReLU(), ["no parameters"]),
    ("optimizer", "adam", ["optimizer must be an Optimizer", "str"]),
    ("optimizer", torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1), ["holds none of this model's"]),
    ("loss", 3, ["loss must be callable"]),
    ("train_data", None, ["train_data is required"]),
    ("train_data", "data/train.csv", ["train_data is a path", "data/train.csv"]),
    ("train_data", {"x": torch.zeros(4, 8), "y": torch.zeros(4)}, ["train_data is a dict", "'x'"]),
    ("train_data", 42, ["neither a DataLoader nor a map-style Dataset", "int"]),
    ("train_data", (torch.zeros(10, 8), torch.zeros(9)), ["same number of samples", "(9,)"]),
    ("train_data", (x for x in range(3)), ["neither a DataLoader nor a map-style Dataset", "generator"]),
    ("val_data", "val/", ["val_data is a path"]),
    ("task", "Classification", ["Unknown task", "classification"]),
    ("max_epochs", 0, ["max_epochs must be an integer >= 1", "0"]),
    ("max_epochs", 2.5, ["max_epochs must be an integer >= 1"]),
    ("batch_size", 0, ["batch_size must be an integer >= 1"]),
    ("batch_size", -8, ["batch_size must be an integer >= 1", "-8"]),
    ("batch_size", True, ["batch_size must be an integer >= 1", "True"]),
    ("batch_size", "32", ["batch_size must be an integer >= 1"]),
    ("accumulate", 0, ["accumulate must be an integer >= 1"]),
    ("max_steps", 0, ["max_steps must be None or an integer >= 1"]),
    ("eval_every", -1, ["eval_every must be None or an integer >= 1"]),
    ("checkpoint_every", 1.5, ["checkpoint_every must be None"]),
    ("eval_batch_size", 0, ["eval_batch_size must be None or an integer >= 1"]),
    ("keep_last", 0, ["keep_last must be an integer >= 1"]),
    ("clip_grad_norm", -1.0, ["clip_grad_norm must be None or a positive number"]),
    ("seed", "0", ["seed must be an integer"]),
    ("warmup_steps", -5, ["warmup_steps must be an integer >= 0"]),
    ("precision", "fp8", ["Unknown precision", "fp8"]),
    ("precision", "float16", ["Unknown precision", "fp16"]),
    ("device", 3, ["device must be a string or a torch.device"]),
    ("out_dir", 5, ["out_dir must be a folder path"]),
    ("resume", 1.0, ["resume must be True, False or a checkpoint path"]),
    ("progress", "yes", ["progress must be 'auto', True or False"]),
    ("num_workers", -1, ["num_workers must be 'auto', 'tune' or an integer >= 0"]),
    ("early_stopping", True, ["early_stopping must be a torchwise.EarlyStopping"]),
    ("mode", "maximum", ["mode must be 'min' or 'max'", "maximum"]),
    ("monitor", 3, ["monitor must be a metric name"]),
    ("monitor", "val_accuracy", ["Unknown metric to monitor", "did you mean: val_acc", "val_loss"]),
    ("monitor", "val_mae", ["Unknown metric to monitor", "val_mae"]),  # a classification run has no MAE
    ("metrics", "acc", ["metrics must be a dict"]),
    ("metrics", {"f1": 0.5}, ["A metric must be a function", "f1"]),
    ("metrics", [lambda out, target: 1.0], ["no usable name", "lambda"]),
    ("metrics", {"acc": lambda out, target: 1.0}, ["taken by a built-in", "my_acc"]),
    ("metrics", {"f1": len, "val_f1": len}, ["same name", "f1"]),
    ("config", ["a"], ["config must be a dict"]),
    ("strategy", "dp", ["Unknown strategy"]),
    ("on_oom", "retry", ["on_oom must be"]),
    ("batch_augment", "flip", ["batch_augment must be a callable"]),
]


@pytest.mark.parametrize("name,value,must_say", BAD_ARGUMENTS,
                         ids=[f"{n}={str(v)[:20]}" for n, v, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_refused_at_construction(name, value, must_say):
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(**{name: value})
    assert_clear_api_error(excinfo, *must_say)


def test_a_frozen_model_is_refused():
    model = mlp()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(model=model, optimizer=None)
    assert_clear_api_error(excinfo, "frozen", "requires_grad")


# ---------------------------------------------------------------- case 1: the monitored metric
def test_an_unknown_early_stopping_monitor_is_refused_with_the_metrics_that_exist():
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=make_data(seed=1), early_stopping=torchwise.EarlyStopping(monitor="val_accuracy"))
    assert_clear_api_error(excinfo, "val_accuracy", "did you mean: val_acc", "val_loss, val_acc, val_top5")


def test_a_user_metric_is_a_monitor_by_its_val_name():
    t = trainer(val_data=make_data(seed=1), metrics={"f1": lambda o, y: 0.5}, monitor="val_f1", mode="max")
    assert (t.monitor, t.mode) == ("val_f1", "max")
    with pytest.raises(TorchwiseError) as excinfo:  # no direction can be read from "f2" either
        trainer(val_data=make_data(seed=1), metrics={"f1": lambda o, y: 0.5}, monitor="val_f2")
    assert_clear_api_error(excinfo, "did you mean: val_f1")


def test_the_trainers_monitor_and_the_early_stoppings_agree():
    es = torchwise.EarlyStopping(patience=2)
    t = trainer(val_data=make_data(seed=1), monitor="val_acc", mode="max", early_stopping=es)
    assert (t.monitor, t.mode, es.monitor, es.mode) == ("val_acc", "max", "val_acc", "max")
    es = torchwise.EarlyStopping(monitor="val_acc")  # the direction follows from the name
    t = trainer(val_data=make_data(seed=1), early_stopping=es)
    assert (t.monitor, t.mode, es.mode) == ("val_acc", "max", "max")
    assert (trainer().monitor, trainer().mode) == ("val_loss", "min")
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=make_data(seed=1), monitor="val_acc", early_stopping=torchwise.EarlyStopping(monitor="val_loss"))
    assert_clear_api_error(excinfo, "different metrics", "val_acc", "val_loss")
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=make_data(seed=1), mode="max", early_stopping=torchwise.EarlyStopping(mode="min"))
    assert_clear_api_error(excinfo, "disagree", "max", "min")
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(monitor="val_acc")  # nothing to validate on
    assert_clear_api_error(excinfo, "no val_data")


def test_early_stopping_on_accuracy_follows_accuracy_upwards():
    es = torchwise.EarlyStopping(monitor="val_acc", patience=1)
    result = trainer(val_data=make_data(seed=1), early_stopping=es, max_epochs=3, optimizer=sgd(0.5)).fit()
    accs = [row["val_acc"] for row in result.history]
    assert result.monitor == "val_acc" and result.best_metric == max(accs)


@pytest.mark.parametrize("kwargs,must_say", [
    (dict(patience=0), ["patience"]), (dict(patience=2.5), ["patience"]), (dict(mode="up"), ["mode"]),
    (dict(min_delta=-1), ["min_delta"]), (dict(monitor=""), ["monitor"]),
])
def test_bad_early_stopping_arguments(kwargs, must_say):
    with pytest.raises(TorchwiseError) as excinfo:
        torchwise.EarlyStopping(**kwargs)
    assert_clear_api_error(excinfo, *must_say)


# ---------------------------------------------------------------- case 2: several inputs per sample
class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(5, 3), nn.Linear(3, 3)

    def forward(self, x1, x2):
        return self.a(x1) + self.b(x2)


class PairDataset(Dataset):
    """Samples ((x1, x2), y), the documented form of several inputs."""

    def __init__(self, n=32, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x1, self.x2 = torch.randn(n, 5, generator=g), torch.randn(n, 3, generator=g)
        self.y = (self.x1[:, :3] + self.x2).argmax(dim=1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return (self.x1[i], self.x2[i]), self.y[i]


class DictPairs(PairDataset):
    def __getitem__(self, i):
        return {"input": [self.x1[i], self.x2[i]], "target": self.y[i]}


@pytest.mark.parametrize("data", [PairDataset, DictPairs])
def test_a_tuple_of_inputs_is_passed_as_separate_arguments(data):
    t = torchwise.Trainer(TwoInputs(), sgd(0.3), train_data=data(), val_data=data(seed=1), max_epochs=2,
                          batch_size=8, **QUIET)
    result = t.fit()
    assert result.steps == 8 and "val_acc" in result.history[-1]
    outputs, targets = t.predict(data(n=10, seed=2))
    assert outputs.shape == (10, 3) and targets.shape == (10,)
    assert set(t.evaluate(data(n=10, seed=2))) >= {"val_loss", "val_acc"}


def test_accumulation_splits_nested_inputs_like_one_larger_batch():
    weights = []
    for batch, accumulate in ((16, 1), (8, 2)):
        model = TwoInputs()
        torchwise.Trainer(model, sgd(0.3), train_data=DataLoader(PairDataset(), batch_size=batch), max_epochs=1,
                          accumulate=accumulate, **QUIET).fit()
        weights.append(model.state_dict())
    for key in weights[0]:
        torch.testing.assert_close(weights[0][key], weights[1][key])
    from torchwise.toolbox.oom import split_micro_batches  # on_oom="adapt" halves nested micro-batches too

    x1, x2, y = torch.zeros(4, 5), torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
    halves = split_micro_batches([((x1, x2), y, 4)], 2)
    assert [(h[0][0].shape[0], h[0][1].shape[0], h[2]) for h in halves] == [(2, 2, 2), (2, 2, 2)]


def test_too_few_inputs_for_the_model_is_told_with_the_shapes():
    with pytest.raises(TorchwiseError) as excinfo:
        torchwise.Trainer(TwoInputs(), sgd(), train_data=(torch.randn(16, 5), torch.zeros(16, dtype=torch.long)),
                          max_steps=1, **QUIET).fit()
    assert_clear_api_error(excinfo, "forward failed on the first training batch", "float32[16, 5]", "TwoInputs")


# ---------------------------------------------------------------- case 3: data, labels, metrics
def test_tensors_given_as_a_tuple_are_a_dataset():
    data = make_data()
    result = trainer(train_data=tuple(data.tensors), val_data=list(make_data(seed=1).tensors), max_steps=2).fit()
    assert result.steps == 2 and result.history


class Samples(Dataset):
    def __init__(self, labels, fail_at=None, features=8):
        self.labels, self.fail_at, self.features = labels, fail_at, features

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"cannot decode record {i}")
        return torch.full((self.features,), float(i % 5)), self.labels[i]


LABEL_CASES = [
    ("labels beyond the outputs, late in a TensorDataset",
     lambda: TensorDataset(torch.randn(40, 8), torch.tensor([0, 1, 2] * 13 + [7])), ["largest label: 7", "num_classes=8"]),
    ("labels beyond the outputs, in the first batch",
     lambda: Samples([3] * 8), ["largest label: 3", "0..2"]),
    ("labels beyond the outputs, in a later batch of a Dataset",
     lambda: Samples([0] * 16 + [5] * 8), ["largest label: 5"]),
    ("negative labels", lambda: TensorDataset(torch.randn(16, 8), torch.tensor([-1, 0, 1, 2] * 4)),
     ["negative class labels", "smallest label: -1"]),
    ("float labels", lambda: TensorDataset(torch.randn(16, 8), torch.tensor([0.0, 1.0, 2.0, 1.0] * 4)),
     ["floating point", "y.long()"]),
    ("labels of another shape", lambda: TensorDataset(torch.randn(16, 8), torch.zeros(16, 2, dtype=torch.long)),
     ["do not fit the model's outputs", "int64[8, 2]"]),
]


@pytest.mark.parametrize("case,data,must_say", LABEL_CASES, ids=[c[0] for c in LABEL_CASES])
def test_bad_labels_are_refused_before_any_update(case, data, must_say):
    model = mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(model=model, train_data=data(), batch_size=8, max_epochs=1).fit()
    assert_clear_api_error(excinfo, *must_say)
    if "later batch" not in case:
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "trained before refusing"


def test_bad_labels_in_validation_data_are_told_too():
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=TensorDataset(torch.randn(8, 8), torch.full((8,), 9)), max_steps=1).fit()
    assert_clear_api_error(excinfo, "val_data", "largest label: 9")


def test_a_sample_that_fails_to_load_is_named_by_its_index():
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(train_data=Samples([0, 1, 2] * 10, fail_at=13), batch_size=8).fit()
    assert_clear_api_error(excinfo, "sample 13 of train_data", "cannot decode record 13", "train_data[13]")


def test_a_validation_sample_that_fails_to_load_is_named_too():
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=Samples([0, 1, 2] * 4, fail_at=5), max_steps=1).fit()
    assert_clear_api_error(excinfo, "sample 5 of val_data")


@pytest.mark.parametrize("val_data,must_say", [
    (lambda: TensorDataset(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long)), ["val_data is empty"]),
    (lambda: DataLoader(make_data(n=4), batch_size=8, drop_last=True), ["val_data yields no batches"]),
])
def test_empty_validation_data_is_refused_before_training(val_data, must_say):
    model = mlp()
    before = model[0].weight.clone()
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(model=model, val_data=val_data()).fit()
    assert_clear_api_error(excinfo, *must_say)
    assert torch.equal(before, model[0].weight)


def test_metrics_as_a_list_are_named_after_the_functions():
    def agreement(out, target):
        return float((out.argmax(1) == target).float().mean())

    metrics = trainer(val_data=make_data(seed=1), metrics=[agreement], max_steps=1).fit().history[-1]
    assert metrics["val_agreement"] == metrics["val_acc"]


@pytest.mark.parametrize("metric,must_say", [
    (lambda out, target: 1 / 0, ["metric 'broken' failed", "ZeroDivisionError"]),
    (lambda out, target: out, ["metric 'broken' did not return a number"]),
])
def test_a_failing_metric_is_named_and_the_trained_steps_are_kept(tmp_path, metric, must_say):
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=make_data(seed=1), metrics={"broken": metric}, out_dir=tmp_path, max_epochs=2).fit()
    assert_clear_api_error(excinfo, *must_say)
    assert (tmp_path / "checkpoints" / "step-000000002" / "COMPLETE").is_file()  # the epoch's 2 steps kept


def test_after_a_failing_metric_the_kept_steps_resume_exactly(tmp_path):
    def fine(out, target):
        return 0.5

    def run(metric, **kwargs):
        t = trainer(model=mlp(dropout=0.2), val_data=make_data(seed=1), metrics={"m": metric}, max_epochs=3,
                    **kwargs)
        return t, t.fit()

    with pytest.raises(TorchwiseError):
        run(lambda out, target: 1 / 0, out_dir=tmp_path)
    resumed, result = run(fine, out_dir=tmp_path, resume=True)
    assert result.resumed_from.name == "step-000000002" and [r["step"] for r in result.history] == [2, 4, 6]
    whole, _ = run(fine)
    for key, value in whole.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[key], value), key


def test_a_monitor_this_run_cannot_produce_is_told_at_the_first_evaluation(tmp_path):
    # val_top5 exists only with more than 10 classes: known at the first evaluation, and the steps are kept
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(val_data=make_data(seed=1), monitor="val_top5", out_dir=tmp_path).fit()
    assert_clear_api_error(excinfo, "val_top5", "did you mean: val_loss", "more than 10 classes")
    assert (tmp_path / "checkpoints" / "step-000000002" / "COMPLETE").is_file()


def test_fp16_on_the_cpu_says_why_it_is_a_poor_choice(capfd):
    result = trainer(precision="fp16", max_steps=1, progress=True).fit()
    assert result.steps == 1
    assert "fp16 on the CPU" in capfd.readouterr().err


class Keys(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"image": torch.zeros(8), "label": 0}


BAD_DATA = [
    ("inputs of another width", dict(train_data=make_data(features=10)),
     ["forward failed on the first training batch", "float32[32, 10]", "mat1 and mat2"]),
    ("integer inputs", dict(train_data=(torch.ones(8, 8, dtype=torch.long), torch.zeros(8, dtype=torch.long))),
     ["forward failed", "int64[8, 8]"]),
    ("dict batches without the documented keys", dict(train_data=Keys()),
     ["'input' and 'target' keys", "'image' looks like the input", "'label' looks like the target"]),
    ("a list of numbers", dict(train_data=[1, 2, 3, 4]), ["must hold inputs and a target"]),
    ("a loss that is not a scalar", dict(loss=lambda out, y: nn.functional.cross_entropy(out, y, reduction="none")),
     ["not a scalar", "(32,)"]),
    ("a loss that returns a float", dict(loss=lambda out, y: 1.0), ["must return a tensor"]),
    ("a loss that fails", dict(loss=lambda out, y: nn.functional.mse_loss(out, y)), ["The loss failed", "int64[32]"]),
    ("regression targets of another shape",
     dict(task="regression", train_data=(torch.randn(16, 8), torch.randn(16, 2)), model=mlp(classes=3)),
     ["regression targets do not have the shape", "float32[16, 3]", "float32[16, 2]"]),
]


@pytest.mark.parametrize("case,kwargs,must_say", BAD_DATA, ids=[c[0] for c in BAD_DATA])
def test_data_and_losses_that_do_not_fit_the_model(case, kwargs, must_say):
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(max_steps=1, **kwargs).fit()
    assert_clear_api_error(excinfo, *must_say)


class AuxOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(8, 3)

    def forward(self, x):
        return self.net(x), x.mean()


class NamedLabels(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(8), ["cat", "dog"][i % 2]


NEIGHBOURS = [
    ("float64 inputs", dict(train_data=TensorDataset(torch.randn(8, 8, dtype=torch.float64), torch.zeros(8).long())),
     ["forward failed", "float64", "x.float()"]),
    ("a model that returns a tuple", dict(model=AuxOutputs()), ["The loss failed", "returns a tuple"]),
    ("labels as strings", dict(train_data=NamedLabels()), ["The loss failed", "class indices"]),
    ("a loss with the wrong signature", dict(loss=lambda out: out.mean()), ["The loss failed", "TypeError"]),
    ("a DataLoader whose data set fails", dict(train_data=DataLoader(Samples([0] * 20, fail_at=11), batch_size=4)),
     ["sample 11 of train_data"]),
]


@pytest.mark.parametrize("case,kwargs,must_say", NEIGHBOURS, ids=[c[0] for c in NEIGHBOURS])
def test_neighbouring_mistakes(case, kwargs, must_say):
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(max_steps=3, **kwargs).fit()
    assert_clear_api_error(excinfo, *must_say)


def test_numpy_arrays_are_taken_as_float32_inputs_and_int64_labels():
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 8)), rng.integers(0, 3, 32).astype(np.int32)
    t = trainer(train_data=(x, y), val_data=(x, y), max_steps=2)
    assert t.train_data.tensors[0].dtype == torch.float32 and t.train_data.tensors[1].dtype == torch.int64
    assert t.fit().steps == 2


@pytest.mark.parametrize("data,must_say", [("images/", ["data is a path"]), (7, ["neither a DataLoader"])])
def test_evaluate_and_predict_refuse_what_is_not_data(data, must_say):
    t = trainer()
    for call in (t.evaluate, t.predict):
        with pytest.raises(TorchwiseError) as excinfo:
            call(data)
        assert_clear_api_error(excinfo, *must_say)


def test_a_loss_that_is_nan_from_the_first_step_stops_the_run_with_the_fix():
    with pytest.raises(TrainingStopped) as excinfo:
        trainer(loss=lambda out, y: out.sum() * float("nan"), max_consecutive_skips=3, batch_size=8).fit()
    assert_clear_api_error(excinfo, "3 optimizer steps in a row were skipped", "Lower the learning rate")


def test_a_single_tensor_as_data_is_refused_with_the_fix():
    with pytest.raises(TorchwiseError) as excinfo:
        trainer(train_data=[torch.zeros(4, 8), torch.zeros(4, 8), torch.zeros(4), torch.zeros(4), torch.zeros(4)])
    assert_clear_api_error(excinfo, "unclear which are inputs")


# ---------------------------------------------------------------- case 4: Ctrl-C keeps the work
def build(out_dir, **kwargs):
    """12 steps: 4 epochs of 3 steps of 2 accumulated batches, dropout, a cosine schedule, AdamW."""
    x = torch.randn(96, 8, generator=torch.Generator().manual_seed(0))
    y = (x @ torch.randn(8, 3, generator=torch.Generator().manual_seed(99))).argmax(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    return torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=1e-2), train_data=TensorDataset(x, y),
                             val_data=TensorDataset(x[:32], y[:32]), batch_size=16, accumulate=2, max_epochs=4,
                             out_dir=out_dir, scheduler="cosine", progress=False, tensorboard=False, **kwargs)


# One real process, three runs, each sent SIGINT by itself from a step_end callback at step 5 (mid-epoch,
# mid-schedule): once; twice in a row (the second stops at once, inside the step's bookkeeping); and a
# second one that lands inside the checkpoint's write.


def test_ctrl_c_without_an_out_dir_says_nothing_was_saved(capfd):
    t = build(None)
    t.on("step_end", lambda step, **_: os.kill(os.getpid(), signal.SIGINT) if step == 2 else None)
    with pytest.raises(KeyboardInterrupt):
        t.fit()
    assert t.pos.step == 2 and "nothing was saved (no out_dir)" in capfd.readouterr().err


def test_a_language_model_with_its_own_flattening_loss_trains():
    """(batch, time, vocabulary) logits against (batch, time) token ids: the classes are last, and the
    user's loss flattens them; nothing about that is wrong (the bench's GPT workload is this)."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    vocab, T = 11, 6
    tokens = torch.randint(0, vocab, (64, T + 1))
    model = nn.Sequential(nn.Embedding(vocab, 16), nn.Linear(16, vocab))

    def lm_loss(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    result = torchwise.Trainer(model, loss=lm_loss, train_data=(tokens[:, :-1], tokens[:, 1:]), max_epochs=1,
                               batch_size=16, progress=False, checks=False).fit()
    assert result.steps == 4
