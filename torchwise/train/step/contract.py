"""How a batch becomes a loss (and what metrics see): the step contract, one per Trainer.

Three forms; the Trainer picks one from what it was given and from the first batch:

- positional (the default): batches `(x, y)`, `((x1, x2), y)`, `(x1, x2, y)` or `{"input": x, "target": y}`;
  `output = model(*inputs)`, `loss = loss_fn(output, target)`.
- keywords: a mapping batch whose keys the model's forward takes by name (a Hugging Face batch:
  input_ids, attention_mask, labels); `output = model(**batch)`. The loss is the model's own
  (`output.loss`, or `output["loss"]`) unless `loss=` was given: then the labels are taken out of the
  batch and `loss = loss_fn(logits, labels)`.
- compute_loss: `compute_loss(model, batch)` of the user's, for anything else (detection dicts, several
  losses, two models); it returns the loss, or `(loss, outputs, targets)` for the metrics.

The step, the evaluation and lr-find all ask the contract; none of them knows which form it is. A
micro-batch is `(inputs, target, n)`: inputs a tuple for the positional form, a `Keywords` mapping for
the keyword form, a `WholeBatch` for compute_loss; target None where the loss needs none.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.train.input_checks import describe
from torchwise.train.step.batches import batch_size_of, samples_in, split_batch, split_inputs_only
from torchwise.train.recipes.mixing import labels_of, mixed_loss
from torchwise.weights import unwrap_model

LABEL_KEYS = ("labels", "label", "targets", "target", "y")


class Keywords(dict):
    """A batch the model takes by keyword: model(**batch)."""


class WholeBatch(tuple):
    """The batch as the user's compute_loss receives it (a 1-tuple, so that splitting cuts it like any tuple)."""

    @property
    def batch(self) -> Any:
        return self[0]


def logits_of(output: Any) -> Any:
    """The prediction inside a model's output: the tensor itself, `.logits` (a Hugging Face ModelOutput)
    or output["logits"]; anything else as it is."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, Mapping) and isinstance(output.get("logits"), torch.Tensor):
        return output["logits"]
    return output


def own_loss(output: Any) -> torch.Tensor | None:
    """The loss a model computed itself: output.loss or output["loss"] (None when it has none)."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    return loss if isinstance(loss, torch.Tensor) else None


def takes_keywords(model: nn.Module, keys: list[str]) -> bool:
    """Does model.forward accept every key of a mapping batch by name (or **kwargs)?"""
    target = unwrap_model(model)  # DDP's and torch.compile's forward take anything: ask the model inside
    try:
        params = inspect.signature(target.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return True
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)}
    return bool(keys) and all(k in names or k in LABEL_KEYS for k in keys) and any(k in names for k in keys)


class StepContract:
    def __init__(self, loss_fn: Callable[..., torch.Tensor], *, loss_given: bool,
                 compute_loss: Callable[..., Any] | None = None):
        self.loss_fn, self.loss_given, self.compute_loss = loss_fn, loss_given, compute_loss
        self.model_for_keys: nn.Module | None = None  # set by the Trainer: whose forward decides "keywords"
        self._keywords: bool | None = None  # decided at the first mapping batch

    @property
    def checks_targets(self) -> bool:
        """The first-batch label checks apply: the loss is loss_fn(outputs, targets), not the model's own."""
        return self.compute_loss is None and (self._keywords is not True or self.loss_given)

    # ------------------------------------------------------------------ batches
    def parts(self, batch: Any, *, labels_optional: bool = False) -> tuple[Any, Any]:
        """(inputs, target) of a batch already on the device."""
        if self.compute_loss is not None:
            return WholeBatch((batch,)), None
        if isinstance(batch, Mapping) and not ("input" in batch and "target" in batch) and self._is_keywords(batch):
            inputs = Keywords(batch)
            key = next((k for k in LABEL_KEYS if k in inputs), None)
            if self.loss_given and key is not None:  # the user's loss: the model must not compute its own
                return inputs, inputs.pop(key)
            return inputs, inputs.get(key) if key is not None else None
        return split_inputs_only(batch) if labels_optional else split_batch(batch)

    def _is_keywords(self, batch: Mapping) -> bool:
        if self._keywords is None:
            model = self.model_for_keys
            self._keywords = model is not None and takes_keywords(model, [str(k) for k in batch])
        return self._keywords

    @staticmethod
    def positional(inputs: Any) -> bool:
        """The inputs are model(*inputs)'s (a batch_augment or channels_last applies to the first)."""
        return isinstance(inputs, tuple) and not isinstance(inputs, WholeBatch)

    @staticmethod
    def size(inputs: Any, target: Any) -> int:
        return batch_size_of(target) if target is not None else samples_in(inputs)

    # ------------------------------------------------------------------ forward and loss
    @staticmethod
    def forward(model: nn.Module, inputs: Any) -> Any:
        if isinstance(inputs, WholeBatch):
            raise AssertionError("compute_loss runs the model itself")  # never reached: see loss_and_output
        if isinstance(inputs, Keywords):
            return model(**inputs)
        return model(*inputs)

    def loss_and_output(self, model: nn.Module, inputs: Any, target: Any) -> tuple[Any, Any]:
        """(loss, output): what one micro-batch's forward gives."""
        if isinstance(inputs, WholeBatch):
            result = self.compute_loss(model, inputs.batch)
            return (result[0] if isinstance(result, tuple) else result), result
        output = self.forward(model, inputs)
        return self.loss_of(output, target), output

    def loss_of(self, output: Any, target: Any) -> Any:
        """The loss of a model output (compute_loss's result: its loss)."""
        if self.compute_loss is not None:
            return output[0] if isinstance(output, tuple) else output
        if not self.loss_given:
            found = None if isinstance(output, torch.Tensor) else own_loss(output)  # a bare tensor carries none
            if found is not None:
                return found
            if self._keywords:
                raise TorchwiseError(
                    "The model took the batch by keyword but returned no loss.",
                    values={"output": type(output).__name__, "labels in the batch": target is not None},
                    fix="Put the labels in the batch under 'labels' (a Hugging Face model then computes its loss), "
                        "or pass loss=fn(logits, labels), or compute_loss=fn(model, batch) -> loss.")
        return mixed_loss(self.loss_fn, logits_of(output), target)  # a MixUp/CutMix target: the two labels' mix

    def for_metrics(self, output: Any, target: Any) -> tuple[Any, Any]:
        """(outputs, targets) as metrics see them: logits and labels, or what compute_loss returned."""
        if self.compute_loss is not None:
            if isinstance(output, tuple) and len(output) == 3:
                return output[1], output[2]
            return None, None
        return logits_of(output), labels_of(target)


def regression_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss of a regression task when none is given: mean squared error, the shapes checked."""
    # Regression targets usually come as [N] while a one-output model gives [N, 1]; without the reshape
    # mse_loss broadcasts to [N, N] and trains on nonsense (a classic silent bug).
    if output.shape != target.shape and output.numel() == target.numel():
        output = output.reshape(target.shape)
    if output.shape != target.shape:  # mse_loss would broadcast the two and train on nonsense
        raise TorchwiseError("The regression targets do not have the shape of the model's outputs.",
                             values={"outputs": describe(output), "targets": describe(target)},
                             fix="Give the model one output per target value (e.g. nn.Linear(..., 1) for one target "
                                 "per sample), or reshape the targets to the outputs' shape.")
    return nn.functional.mse_loss(output, target.to(output.dtype))
