"""Class weights for imbalanced classification: torchwise.class_weights and train.class_weights.

The CLI tests train on a real imbalanced CSV (about 92% / 8%) and a real PNG folder, written to disk."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import torchwise
from torchwise import config as cfg
from torchwise.errors import ConfigError, TorchwiseError
from testkit.imbalanced_data import make_imbalanced_csv


# ----------------------------------------------------------------------------- the function


def test_balanced_weights_are_n_over_k_times_count():
    labels = [0] * 6 + [1] * 3 + [2] * 1  # n = 10, k = 3
    expected = torch.tensor([10 / (3 * 6), 10 / (3 * 3), 10 / (3 * 1)])
    for given in (labels, np.array(labels), torch.tensor(labels), torch.tensor(labels, dtype=torch.float64)):
        weights = torchwise.class_weights(given)
        assert weights.dtype == torch.float32 and weights.shape == (3,)
        torch.testing.assert_close(weights, expected)
    # the weighted total over the data set is the unweighted one: sum_c count_c * w_c = n
    assert float((torch.tensor([6, 3, 1]) * expected).sum()) == pytest.approx(10)
    # a balanced data set gets weight 1 everywhere
    torch.testing.assert_close(torchwise.class_weights([0, 1, 2, 2, 1, 0], num_classes=3), torch.ones(3))


def test_same_values_as_scikit_learn():
    sklearn_utils = pytest.importorskip("sklearn.utils")
    labels = np.random.default_rng(0).choice(5, size=500, p=[0.6, 0.2, 0.1, 0.07, 0.03])
    reference = sklearn_utils.compute_class_weight("balanced", classes=np.arange(5), y=labels)
    torch.testing.assert_close(torchwise.class_weights(labels, num_classes=5),
                               torch.tensor(reference, dtype=torch.float32))


def test_a_class_with_no_samples_is_an_error_that_names_it():
    with pytest.raises(ConfigError) as info:
        torchwise.class_weights([0, 0, 1, 3], num_classes=5)
    error = info.value
    assert isinstance(error, TorchwiseError)
    assert "no training samples" in error.what
    assert error.values["classes with 0 samples"] == "2, 4"
    assert error.values["counts"] == "2, 1, 0, 1, 0"
    assert "fix" in str(error) and error.fix


def test_negative_labels_and_labels_past_num_classes_are_errors():
    with pytest.raises(ConfigError, match="negative labels") as info:
        torchwise.class_weights(torch.tensor([1, 2, -1, 0, -100]))
    assert info.value.values["negative labels"] == "-100, -1" and info.value.values["smallest"] == -100
    assert "0 .. num_classes-1" in info.value.fix

    with pytest.raises(ConfigError, match="labels >= num_classes") as info:
        torchwise.class_weights([0, 1, 2, 3, 5, 3], num_classes=3)
    assert info.value.values["labels out of range"] == "3, 5" and info.value.values["num_classes"] == 3
    assert "num_classes=6" in info.value.fix  # 1-based labels (1..K) are the usual cause


def test_targets_that_are_not_class_indices_are_errors():
    with pytest.raises(ConfigError, match="not whole numbers"):
        torchwise.class_weights([0.0, 1.5, 1.0])      # a regression target
    with pytest.raises(ConfigError, match="1-D vector") as info:
        torchwise.class_weights(torch.eye(3))        # one-hot rows
    assert "argmax" in info.value.fix and info.value.values["shape"] == (3, 3)
    with pytest.raises(ConfigError, match="empty"):
        torchwise.class_weights([])
    with pytest.raises(ConfigError, match="integer class indices"):
        torchwise.class_weights(torch.tensor([True, False]))
    with pytest.raises(ConfigError, match="not numbers"):
        torchwise.class_weights(["cat", "dog"])
    with pytest.raises(ConfigError, match="Unknown class weight scheme") as info:
        torchwise.class_weights([0, 1], scheme="inverse")
    assert info.value.values["allowed"] == "balanced"
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ConfigError, match="num_classes"):
            torchwise.class_weights([0, 1], num_classes=bad)


def test_a_loss_module_with_a_weight_moves_to_the_trainers_device():
    """The CLI (and a user) builds CrossEntropyLoss(weight=...) before the Trainer picks the device;
    the Trainer moves a loss module with the model, so its weight sits where the outputs are."""
    from torch.utils.data import TensorDataset

    loss = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0]))
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    trainer = torchwise.Trainer(nn.Linear(4, 2), loss=loss, train_data=TensorDataset(x, (x[:, 0] > 0).long()),
                                val_data=TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8, eval_batch_size=32,
                                progress=False)  # one validation batch: weighted means per batch do not add up
    trainer.fit()
    assert trainer.loss_fn is loss and loss.weight.device == trainer.device
    with torch.inference_mode():
        expected = nn.functional.cross_entropy(trainer.model(x), (x[:, 0] > 0).long(), weight=torch.tensor([1.0, 3.0]))
    assert abs(trainer.evaluate()["val_loss"] - float(expected)) < 1e-5  # validation uses the weighted loss


def test_exported_lazily_from_the_package():
    assert "class_weights" in torchwise.__all__ and "class_weights" in dir(torchwise)
    from torchwise.data.class_weights import class_weights

    assert torchwise.class_weights is class_weights


# ----------------------------------------------------------------------------- configuration


def test_config_key_values_and_contradictions():
    assert cfg.resolve().train.class_weights == "none"
    assert cfg.resolve(sets=["train.class_weights=Balanced"]).train.class_weights == "balanced"
    with pytest.raises(ConfigError) as info:
        cfg.resolve(sets=["train.class_weights=balance"])
    assert info.value.values["allowed"] == "'none' | 'balanced'"
    assert info.value.values["did you mean"] == "balanced"
    with pytest.raises(ConfigError, match="for classification") as info:
        cfg.resolve(sets=["train.class_weights=balanced", "data.problem=regression"])
    assert info.value.values["data.problem"] == "regression"
    # a later layer may undo an earlier one: only the final combination is checked
    assert cfg.resolve(sets=["train.class_weights=balanced", "data.problem=regression",
                             "train.class_weights=none"]).data.problem == "regression"
    assert "train.class_weights" in cfg.describe()


# ----------------------------------------------------------------------------- the CLI on real data


@pytest.fixture(scope="module")
def imbalanced_csv(tmp_path_factory) -> Path:
    return make_imbalanced_csv(tmp_path_factory)


def test_the_trainer_gets_a_really_weighted_cross_entropy(imbalanced_csv, tmp_path):
    """In process, through the same train_run the CLI runs: the Trainer's loss on a real batch is the
    weighted mean sum_i w[y_i] * nll_i / sum_i w[y_i], and the saved weights are the ones it uses."""
    from torchwise.run.train_run import train_run

    config = cfg.resolve(flags={"data": str(imbalanced_csv), "target": "label", "out": str(tmp_path / "run"),
                                "max_steps": "2", "batch_size": "64"},
                         sets=["train.class_weights=balanced", "output.report=false", "output.progress=false"])
    seen = {}
    train_run(config, log=lambda *_: None, on_trainer=lambda trainer: seen.update(trainer=trainer))
    trainer = seen["trainer"]
    loss_fn = trainer.loss_fn
    assert isinstance(loss_fn, nn.CrossEntropyLoss)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    torch.testing.assert_close(loss_fn.weight.cpu(), torch.tensor(meta["class_weights"]["values"]), rtol=0, atol=0)

    inputs, target = trainer.train_data[:64]
    assert 0 < int((target == 0).sum()) < 64  # the batch holds both classes
    with torch.no_grad():
        output = trainer.model.eval()(inputs)
    nll = nn.functional.cross_entropy(output, target, reduction="none")
    w = loss_fn.weight.cpu()[target]
    torch.testing.assert_close(loss_fn(output, target), (w * nll).sum() / w.sum())
    assert abs(float(loss_fn(output, target)) - float(nll.mean())) > 1e-3  # not the unweighted mean
    # validation uses the same weighted loss: val_loss of the last row is that loss over the val split
    x_val, y_val = trainer.val_data[:]
    with torch.no_grad():
        expected_val = float(loss_fn(trainer.model(x_val), y_val))
    assert trainer.pos.history[-1]["val_loss"] == pytest.approx(expected_val, rel=1e-5)


def _png(path: Path, color: tuple[int, int, int]) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), color).save(path)


def test_image_folder_weights_come_from_the_train_folder_only(tmp_path):
    """train/ and val/ folders with different balances: the weights follow train/ alone."""
    from torchwise.data.tasks import prepare_task

    root = tmp_path / "shapes"
    for name, n_train, n_val in (("circle", 12, 2), ("square", 3, 9), ("star", 6, 6)):
        for i in range(n_train):
            _png(root / "train" / name / f"{i}.png", (10 * i, 100, 200))
        for i in range(n_val):
            _png(root / "val" / name / f"{i}.png", (10 * i, 200, 100))
    config = cfg.resolve(flags={"data": str(root)}, sets=["train.class_weights=balanced", "data.cache=off"])
    task = prepare_task(config, tmp_path / "run", log=lambda _line: None)
    assert task.class_names == ["circle", "square", "star"]
    assert task.class_weights["train_counts"] == [12, 3, 6]
    assert task.class_weights["values"] == pytest.approx([21 / 36, 21 / 9, 21 / 18])
    assert task.meta()["class_weights"] == task.class_weights
    loss = task.loss()
    assert isinstance(loss, nn.CrossEntropyLoss)
    torch.testing.assert_close(loss.weight, torchwise.class_weights([y for _, y in task.train.samples]))

    none = prepare_task(cfg.resolve(flags={"data": str(root)}, sets=["data.cache=off"]), None,
                        log=lambda _line: None)
    assert none.class_weights is None and none.loss() is None and "class_weights" not in none.meta()


def test_a_class_missing_from_the_training_split_is_refused_by_name():
    # The image scan and the CSV split already keep every class in training; the task check names the
    # class if another data source ever does not.
    from torchwise.data.tasks import _class_weights

    config = cfg.resolve(sets=["train.class_weights=balanced"])
    with pytest.raises(ConfigError) as info:
        _class_weights(config, "classification", [0, 0, 2, 0], ["cat", "dog", "fox"])
    assert info.value.values["classes without training samples"] == ["dog"]
    assert info.value.values["train counts"] == {"cat": 3, "dog": 0, "fox": 1}
    assert "train.class_weights=none" in info.value.fix
    assert _class_weights(cfg.resolve(), "classification", [0, 0], ["cat", "dog"]) is None
