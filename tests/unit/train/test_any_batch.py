"""Any model, any batch: the step contract with real models and real batches.

Batches of every nesting are moved, sized and split; a dict batch goes to a model that takes it by
keyword (with its own loss, or the user's on its logits); compute_loss handles the rest; predict()
takes batches without labels; validation metrics stream (torchmetrics objects too) and the
evaluation's memory does not grow with the validation set.
"""
from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from torchwise import Trainer
from torchwise.errors import TorchwiseError
from torchwise.train.step.batches import move_to, samples_in, split_parts
from torchwise.train.step.contract import Keywords, StepContract, WholeBatch


QUIET = dict(progress=False, checks=False, tensorboard=False)
Pair = collections.namedtuple("Pair", "image mask")


@dataclasses.dataclass
class Sample:
    image: torch.Tensor
    boxes: list
    tag: str = "x"


def test_nested_batches_are_moved_sized_and_split_keeping_their_types():
    batch = {"pair": Pair(torch.zeros(6, 3), torch.ones(6, 2)), "list": [torch.arange(6), "names"],
             "sample": Sample(torch.zeros(6, 4), [1, 2])}
    moved = move_to(batch, torch.device("cpu"), False)
    assert isinstance(moved["pair"], Pair) and isinstance(moved["sample"], Sample)
    assert samples_in(batch) == 6 and samples_in(["a", "b", "c"]) == 3 and samples_in(torch.tensor(3.0)) == 1
    pieces = split_parts({"pair": batch["pair"], "x": torch.arange(6)}, 3)
    assert [p["x"].tolist() for p in pieces] == [[0, 1], [2, 3], [4, 5]]
    assert all(isinstance(p["pair"], Pair) and p["pair"].mask.shape == (2, 2) for p in pieces)
    assert split_parts(None, 2) == [None, None]
    assert split_parts(Keywords(a=torch.arange(4)), 2)[1]["a"].tolist() == [2, 3]
    assert isinstance(split_parts(Keywords(a=torch.arange(4)), 2)[0], Keywords)
    assert isinstance(split_parts(WholeBatch(({"a": torch.arange(4)},)), 2)[0], WholeBatch)
    assert split_parts(torch.tensor(1.0), 2) is None  # a 0-d tensor cannot be cut


class KeywordNet(nn.Module):
    """A model with a Hugging Face-like interface: forward(features, mask=None, labels=None) -> dict."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 3)

    def forward(self, features, mask=None, labels=None):
        logits = self.body(features * (mask if mask is not None else 1))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


class DictData(Dataset):
    def __init__(self, n=96, seed=0, labels=True):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x[:, 0] > 0).long() + (self.x[:, 1] > 1).long()
        self.labels = labels

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        item = {"features": self.x[i], "mask": torch.ones(8)}
        if self.labels:
            item["labels"] = self.y[i]
        return item


def _keyword_trainer(**kwargs):
    torch.manual_seed(0)
    return Trainer(KeywordNet(), lambda p: torch.optim.SGD(p, lr=0.2), train_data=DictData(), val_data=DictData(seed=1),
                   epochs=2, batch_size=16, **{**QUIET, **kwargs})


def test_a_model_that_takes_the_batch_by_keyword_trains_on_its_own_loss():
    result = _keyword_trainer().fit()
    assert result.history[-1]["val_acc"] > 0.6 and "val_loss" in result.history[-1]
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"] * 1.5


def test_the_users_loss_replaces_the_models_own_and_gets_the_logits_and_labels():
    seen = []

    def my_loss(logits, labels):
        seen.append((tuple(logits.shape), tuple(labels.shape)))
        return F.cross_entropy(logits, labels)

    _keyword_trainer(loss=my_loss, max_steps=2).fit()
    assert seen[0] == ((16, 3), (16,))  # the labels left the batch: the model did not compute a loss of its own


def test_keyword_batches_accumulate_like_one_batch_of_the_same_samples():
    def final_weights(batch_size, accumulate):
        torch.manual_seed(0)
        model = KeywordNet()
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), train_data=DictData(n=64), max_steps=2,
                batch_size=batch_size, accumulate=accumulate, **QUIET).fit()
        return model.body.weight.detach().clone()

    assert torch.allclose(final_weights(32, 1), final_weights(16, 2), atol=1e-6)


def test_a_keyword_model_without_labels_in_the_batch_says_what_to_do():
    with pytest.raises(TorchwiseError) as err:
        Trainer(KeywordNet(), train_data=DictData(labels=False), max_steps=1, **QUIET).fit()
    assert "returned no loss" in str(err.value) and "labels" in str(err.value)


def test_a_dict_batch_the_model_cannot_take_by_keyword_still_gets_the_key_hint():
    model = nn.Linear(8, 3)  # forward(input): the keys are not its parameters
    with pytest.raises(TorchwiseError) as err:
        Trainer(model, train_data=DictData(), max_steps=1, **QUIET).fit()
    assert "'input' and 'target' keys" in str(err.value)


def test_compute_loss_with_only_a_loss_trains_and_reports_the_loss():
    calls = []

    def compute_loss(model, batch):
        calls.append(sorted(batch))
        return F.cross_entropy(model(batch["features"]), batch["labels"])

    torch.manual_seed(0)
    result = Trainer(nn.Linear(8, 3), lambda p: torch.optim.SGD(p, lr=0.2), train_data=DictData(),
                     val_data=DictData(seed=1), compute_loss=compute_loss, epochs=1, batch_size=32, **QUIET).fit()
    assert calls[0] == ["features", "labels", "mask"]
    assert set(result.history[-1]) >= {"val_loss"} and "val_acc" not in result.history[-1]


def test_predict_takes_batches_without_labels():
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    trainer = Trainer(model, train_data=(torch.randn(32, 8), torch.randint(0, 3, (32,))), **QUIET)
    x = torch.randn(20, 8)
    outputs, targets = trainer.predict(TensorDataset(x))
    assert targets is None and torch.allclose(outputs, model(x).detach(), atol=1e-6)
    keyword = _keyword_trainer()
    outputs, targets = keyword.predict(DictData(n=10, labels=False))
    assert targets is None and outputs.shape == (10, 3)


def test_streaming_validation_metrics_equal_the_whole_set_computation():
    torch.manual_seed(0)
    x, y = torch.randn(300, 8), torch.randint(0, 12, (300,))  # top-5 is counted above 10 classes
    model = nn.Linear(8, 12)
    trainer = Trainer(model, train_data=(x, y), eval_batch_size=64, **QUIET)
    metrics = trainer.evaluate(TensorDataset(x, y))
    logits = model(x).detach()
    assert metrics["val_acc"] == float((logits.argmax(1) == y).float().mean())
    assert metrics["val_top5"] == float((logits.topk(5, 1).indices == y[:, None]).any(1).float().mean())
    assert abs(metrics["val_loss"] - float(F.cross_entropy(logits, y))) < 1e-5


def test_a_torchmetrics_metric_is_streamed_and_reset_each_evaluation():
    torchmetrics = pytest.importorskip("torchmetrics")
    f1 = torchmetrics.classification.MulticlassF1Score(num_classes=3, average="macro")
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    data = DictData(n=90, seed=2)
    x, y = data.x, data.y
    trainer = Trainer(model, train_data=(x, y), metrics=[f1], eval_batch_size=16, **QUIET)
    first = trainer.evaluate(TensorDataset(x, y))
    second = trainer.evaluate(TensorDataset(x, y))  # reset between evaluations: the same number, not a mix
    expected = torchmetrics.functional.classification.multiclass_f1_score(model(x).detach(), y, num_classes=3,
                                                                          average="macro")
    assert first["val_multiclass_f1_score"] == pytest.approx(float(expected), abs=1e-6)
    assert second["val_multiclass_f1_score"] == first["val_multiclass_f1_score"]


def test_the_contract_is_shared_by_the_step_and_the_evaluation():
    contract = StepContract(F.cross_entropy, loss_given=True)
    inputs, target = contract.parts((torch.randn(4, 8), torch.tensor([0, 1, 2, 0])))
    assert isinstance(inputs, tuple) and contract.size(inputs, target) == 4
    custom = StepContract(F.cross_entropy, loss_given=False, compute_loss=lambda m, b: m(b).sum())
    inputs, target = custom.parts(torch.randn(5, 8))
    assert isinstance(inputs, WholeBatch) and target is None and custom.size(inputs, target) == 5
