"""The Trainer's checks of what it is given: each mistake refused before training starts (or at the
first batch that shows it), with the values involved and the fix, instead of a traceback from deep
inside torch or a run that trains on nonsense.

Kept apart from trainer.py so that the loop stays readable; every function here is pure checking
(or the documented conversion of a convenience form, such as `(x, y)` tensors into a TensorDataset).
"""
from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from torchwise.errors import ConfigError, TorchwiseError

# What the Trainer's optimizer= takes: an optimizer, a factory called with the parameters (or groups), or None
OptimizerArg = torch.optim.Optimizer | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None

# Direction of the metrics whose name says it: a monitor without a mode gets the right one.
LOWER_IS_BETTER = ("loss", "mae", "mse", "rmse", "error", "err", "perplexity", "nll")
HIGHER_IS_BETTER = ("acc", "accuracy", "top5", "top1", "f1", "auc", "precision", "recall", "iou", "dice", "r2",
                    "map", "bleu")


def require(ok: bool, what: str, values: dict[str, Any], fix: str) -> None:
    if not ok:
        raise ConfigError(what, values=values, fix=fix)


def is_int(value: Any) -> bool:
    """An integer that is not a bool (True would pass isinstance(value, int))."""
    return isinstance(value, int) and not isinstance(value, bool)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return close[0] if close else "-"


# ------------------------------------------------------------------ the model and the optimizer
def check_model(model: nn.Module) -> None:
    params = list(model.parameters())
    require(bool(params), "The model has no parameters, so there is nothing to train.",
            {"model": type(model).__name__},
            "Give the model layers with weights (nn.Linear, nn.Conv2d, ...) and register them as attributes "
            "or in nn.ModuleList (a plain Python list of layers is invisible to model.parameters()).")
    trainable = sum(p.numel() for p in params if p.requires_grad)
    require(trainable > 0, "Every parameter of the model is frozen (requires_grad=False), so nothing would train.",
            {"model": type(model).__name__, "parameters": sum(p.numel() for p in params), "trainable": 0},
            "Unfreeze the layers to train: for p in model.head.parameters(): p.requires_grad = True.")


def check_optimizer_arg(optimizer: Any, model: nn.Module) -> None:
    if optimizer is None:
        return
    if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
        # called with the parameters only when fit() starts: a factory that cannot take them is refused now
        require(_takes_one_argument(optimizer), "The optimizer factory must take the parameters as its argument.",
                {"optimizer": getattr(optimizer, "__qualname__", type(optimizer).__name__)},
                "Pass optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3) (not lambda: ...).")
        return
    require(isinstance(optimizer, torch.optim.Optimizer),
            "optimizer must be an Optimizer, a factory taking the parameters, or None.",
            {"optimizer": type(optimizer).__name__},
            "Pass torch.optim.AdamW(model.parameters(), lr=1e-3) or lambda params: torch.optim.AdamW(params, lr=1e-3).")
    check_optimizer_holds(optimizer, model)


def _takes_one_argument(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        inspect.signature(fn).bind(object())
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): it is tried when fit() calls it
        pass
    return True


def callback_list(callbacks: Any) -> list[Any]:
    """The Trainer's callbacks argument: a list (or other iterable) of callback objects."""
    require(hasattr(callbacks, "__iter__") and not isinstance(callbacks, (str, bytes)),
            "callbacks must be a list of callback objects.", {"callbacks": type(callbacks).__name__},
            f"Pass callbacks=[{type(callbacks).__name__}(...)], a list even for one callback.")
    return list(callbacks)


def check_optimizer_holds(opt: torch.optim.Optimizer, model: nn.Module) -> None:
    model_params = {id(p) for p in model.parameters() if p.requires_grad}
    opt_params = {id(p) for g in opt.param_groups for p in g["params"]}
    require(bool(model_params & opt_params), "The optimizer holds none of this model's trainable parameters.",
            {"trainable parameters in model": len(model_params), "parameters in optimizer": len(opt_params)},
            "Create the optimizer from this model's parameters (model.parameters()) after building the "
            "model, or pass a factory: optimizer=lambda params: torch.optim.AdamW(params).")


# ------------------------------------------------------------------ data
def as_data(data: Any, role: str, *, required: bool = True) -> Any:
    """A Dataset or DataLoader as the Trainer takes it. `(x, y)` (or `(x1, x2, y)`) given as tensors or
    arrays of equal length becomes a TensorDataset: that is what a user who writes it means."""
    from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

    if data is None:
        require(not required, f"{role} is required.", {role: None},
                f"Pass a Dataset or a DataLoader: Trainer(model, {role}=dataset, ...).")
        return None
    if isinstance(data, (DataLoader, Dataset, IterableDataset)):
        return data
    if isinstance(data, (tuple, list)) and 2 <= len(data) <= 4 and all(_array_like(t) for t in data):
        tensors = [t if isinstance(t, torch.Tensor) else _from_numpy(t) for t in data]
        lengths = [int(t.shape[0]) if t.ndim else None for t in tensors]
        require(None not in lengths and len(set(lengths)) == 1,
                f"{role} given as tensors: they must hold the same number of samples (first dimension).",
                {"shapes": [tuple(t.shape) for t in tensors]},
                f"Pass {role}=(inputs, targets) with one row per sample in each, e.g. x of shape [N, ...] and "
                "y of shape [N].")
        return TensorDataset(*tensors)
    fix = ("Pass a torch.utils.data.Dataset (with __len__ and __getitem__ returning (input, target)), a "
           f"DataLoader, or tensors as {role}=(x, y).")
    if isinstance(data, (str, bytes, Path)):
        raise ConfigError(f"{role} is a path or a string, not data.", values={role: str(data)[:200]},
                          fix=fix + " For a folder of images or a CSV file, use `torchwise train --data PATH` or "
                                    "build the Dataset first (torchwise.data).")
    if isinstance(data, Mapping):
        raise ConfigError(f"{role} is a dict, not a Dataset.", values={role: f"dict with keys {sorted(map(str, data))[:8]}"},
                          fix=fix + " A dict of tensors: pass (d['input'], d['target']).")
    if isinstance(data, (tuple, list)) and data and all(_array_like(t) for t in data):
        raise ConfigError(f"{role} is a {type(data).__name__} of {len(data)} tensors; it is unclear which are inputs "
                          "and which targets.", values={role: [tuple(torch.as_tensor(t).shape) for t in data][:6]},
                          fix=fix)
    if not (hasattr(data, "__getitem__") and hasattr(data, "__len__")) or isinstance(data, (int, float, set)):
        raise ConfigError(f"{role} is neither a DataLoader nor a map-style Dataset.",
                          values={role: type(data).__name__}, fix=fix)
    return data


def _from_numpy(array: Any) -> torch.Tensor:
    """NumPy's defaults (float64 features, int32 labels on some platforms) as torch models expect them:
    float32 inputs and int64 labels."""
    tensor = torch.as_tensor(array)
    if tensor.is_floating_point():
        return tensor.float()
    if tensor.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return tensor.long()
    return tensor


def _array_like(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    return type(obj).__module__ == "numpy" and hasattr(obj, "shape") and hasattr(obj, "dtype")


def describe(obj: Any) -> Any:
    """Shapes and dtypes of a (nested) batch, for error messages."""
    if isinstance(obj, torch.Tensor):
        return f"{str(obj.dtype).replace('torch.', '')}{list(obj.shape)}"
    if isinstance(obj, (list, tuple)):
        return [describe(o) for o in obj[:6]]
    if isinstance(obj, Mapping):
        return {str(k): describe(v) for k, v in list(obj.items())[:6]}
    return type(obj).__name__


class DataGuard:
    """Wraps a loader's iterator: a batch that fails to load says which sample failed (by index) and why."""

    def __init__(self, loader: Any, dataset: Any, role: str):
        self.loader, self.dataset, self.role = loader, dataset, role

    def wrap(self, batches: Iterator[Any], epoch: int, start_batch: int) -> Iterator[Any]:
        index = start_batch
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except TorchwiseError:
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised with the sample that caused it
                raise self.error(exc, epoch, index) from exc
            yield batch
            index += 1

    def error(self, exc: Exception, epoch: int, batch_index: int) -> TorchwiseError:
        sample, sample_exc = self.failing_sample(epoch, batch_index)
        reason = sample_exc or exc
        values = {"batch": batch_index, "epoch": epoch,
                  "error": f"{type(reason).__name__}: {str(reason).strip().splitlines()[-1][:300] if str(reason).strip() else ''}"}
        if sample is not None:
            values = {"sample index": sample, **values}
            what = f"Loading sample {sample} of {self.role} failed."
            fix = (f"Fix {type(self.dataset).__name__}.__getitem__ for index {sample} (try {self.role}[{sample}] "
                   "yourself), or remove that sample from the data set.")
        else:
            what = f"Loading a batch of {self.role} failed."
            fix = (f"Try {self.role}[i] for the samples of batch {batch_index} yourself; with num_workers > 0 "
                   "the error above comes from a worker process.")
        return TorchwiseError(what, values=values, fix=fix)

    def failing_sample(self, epoch: int, batch_index: int) -> tuple[int | None, Exception | None]:
        sampler = getattr(self.loader, "sampler", None)
        dataset = self.dataset.dataset if hasattr(self.dataset, "batch_sampler") else self.dataset
        if sampler is None or not hasattr(dataset, "__getitem__"):
            return None, None
        try:
            sampler.set_epoch(epoch)
            sampler.set_start(batch_index)
            indices = next(iter(sampler))
        except Exception:  # noqa: BLE001 - no index to report; the original error is still raised
            return None, None
        for key in indices:
            idx = key[1] if isinstance(key, tuple) else key
            try:
                dataset[idx]
            except Exception as exc:  # noqa: BLE001 - this is the one we are looking for
                return int(idx), exc
        return None, None


# ------------------------------------------------------------------ metrics and the monitor
def check_metrics(metrics: Any) -> dict[str, Callable[..., Any]]:
    """A dict {name: fn or metric object}; in a list or tuple a function is named by its name, a metric
    object (torchmetrics' MulticlassF1Score) by its class's name in snake case (multiclass_f1_score)."""
    from torchwise.train.evaluate.streaming_metrics import is_streaming

    if metrics is None:
        return {}
    fix = ("Pass metrics={'f1': f1_fn} (each fn(outputs, targets) -> float, or a torchmetrics Metric), or a list "
           "of named functions.")
    if isinstance(metrics, Mapping):
        items = list(metrics.items())
    elif isinstance(metrics, (list, tuple)):
        items = []
        for fn in metrics:
            name = getattr(fn, "__name__", None) or (_snake(type(fn).__name__) if is_streaming(fn) else None)
            require(isinstance(name, str) and name.isidentifier() and name != "<lambda>",
                    "A metric in the list has no usable name.", {"metric": repr(fn)[:120]},
                    "Give it a name with a dict: metrics={'my_metric': fn} (a lambda has no name of its own).")
            items.append((name, fn))
    elif callable(metrics) or is_streaming(metrics):
        raise ConfigError("metrics must be a dict of functions, not one function.",
                          values={"metrics": getattr(metrics, "__name__", repr(metrics)[:80])},
                          fix=f"Pass metrics={{'{getattr(metrics, '__name__', 'name')}': fn}} or metrics=[fn].")
    else:
        raise ConfigError("metrics must be a dict {name: fn(outputs, targets)}.",
                          values={"metrics": type(metrics).__name__}, fix=fix)
    out: dict[str, Callable[..., Any]] = {}
    for name, fn in items:
        require(isinstance(name, str) and name != "", "A metric name must be a non-empty string.",
                {"name": repr(name)}, fix)
        require(callable(fn) or is_streaming(fn), "A metric must be a function fn(outputs, targets) -> float "
                "or an object with update/compute/reset (a torchmetrics Metric).",
                {"metric": name, "given": type(fn).__name__}, fix)
        name = name.removeprefix("val_")  # logged as val_<name> either way
        require(name not in out, "Two metrics have the same name.", {"name": name},
                "Name them with a dict: metrics={'a': fn_a, 'b': fn_b}.")
        require(name not in ("loss", "acc", "top5", "mae"), "A metric's name is taken by a built-in one.",
                {"name": name, "built-in": "val_loss, val_acc, val_top5, val_mae"},
                f"Name it otherwise, e.g. metrics={{'my_{name}': fn}}.")
        out[name] = fn
    return out


def _snake(name: str) -> str:
    """MulticlassF1Score -> multiclass_f1_score."""
    import re

    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def known_monitors(task: str, metrics: Iterable[str]) -> list[str]:
    builtin = ["val_acc", "val_top5"] if task == "classification" else ["val_mae"]
    return ["val_loss", *builtin, *[f"val_{m}" for m in metrics], "train_loss"]


def infer_mode(monitor: str) -> str | None:
    words = monitor.lower().removeprefix("val_").removeprefix("train_")
    if any(words == w or words.endswith("_" + w) or words.startswith(w + "_") for w in LOWER_IS_BETTER):
        return "min"
    if any(words == w or words.endswith("_" + w) or words.startswith(w + "_") for w in HIGHER_IS_BETTER):
        return "max"
    return None


def resolve_monitor(monitor: str | None, mode: str | None, early_stopping: Any, task: str,
                    metrics: Iterable[str], has_val: bool) -> tuple[str, str]:
    """The one metric the run follows (best weights, early stopping, plateau schedule) and its direction.

    The Trainer's monitor/mode and the EarlyStopping's must agree: one given alone is used by both;
    two different ones are refused."""
    es_monitor = getattr(early_stopping, "monitor", None)
    es_mode = getattr(early_stopping, "mode", None)
    for name, value in (("monitor", monitor), ("EarlyStopping monitor", es_monitor)):
        require(value is None or isinstance(value, str), f"{name} must be a metric name (a string).",
                {name: repr(value)}, "Pass e.g. monitor='val_loss' or monitor='val_acc'.")
    for name, value in (("mode", mode), ("EarlyStopping mode", es_mode)):
        require(value in (None, "min", "max"), f"{name} must be 'min' or 'max'.", {name: value},
                "'min' for losses, 'max' for accuracies.")
    require(monitor is None or es_monitor is None or monitor == es_monitor,
            "The Trainer and its EarlyStopping monitor different metrics.",
            {"Trainer monitor": monitor, "EarlyStopping monitor": es_monitor},
            "Give the metric once: Trainer(monitor=..., mode=..., early_stopping=EarlyStopping(patience=...)) "
            "(the EarlyStopping follows the Trainer's monitor), or make the two the same.")
    chosen = monitor or es_monitor or "val_loss"
    require(mode is None or es_mode is None or mode == es_mode,
            "The Trainer and its EarlyStopping disagree on the direction of the monitored metric.",
            {"monitor": chosen, "Trainer mode": mode, "EarlyStopping mode": es_mode},
            "Give the mode once (Trainer(mode=...) or EarlyStopping(mode=...)): 'max' for accuracies, "
            "'min' for losses.")
    allowed = known_monitors(task, metrics)
    require(chosen in allowed, "Unknown metric to monitor.",
            {"monitor": chosen, "did you mean": did_you_mean(chosen, allowed), "metrics that exist": ", ".join(allowed)},
            "Monitor one of the metrics that exist (a metric of your own named 'f1' in metrics={...} is "
            "monitored as 'val_f1').")
    require(has_val or not chosen.startswith("val_") or (monitor is None and early_stopping is None),
            "The monitored metric comes from validation, but there is no val_data.",
            {"monitor": chosen, "val_data": None},
            "Pass val_data=..., or monitor='train_loss' (and no early_stopping).")
    chosen_mode = mode or es_mode or infer_mode(chosen)  # an explicit unusual direction is the user's choice
    require(chosen_mode is not None, "Is a higher or a lower value of the monitored metric better?",
            {"monitor": chosen, "mode": None},
            f"Pass mode='max' if a higher {chosen} is better, mode='min' if a lower one is.")
    return chosen, chosen_mode


# ------------------------------------------------------------------ targets against the model's outputs
def is_cross_entropy(loss_fn: Any) -> bool:
    return isinstance(loss_fn, (nn.CrossEntropyLoss, nn.NLLLoss)) or loss_fn in (
        nn.functional.cross_entropy, nn.functional.nll_loss)


def check_targets(output: Any, target: Any, loss_fn: Any, task: str, where: str, *, strict: bool) -> None:
    """Class labels that the loss cannot use. strict: the loss is known to be cross-entropy; otherwise
    (after the loss failed) only what is certainly wrong for a classifier's outputs is reported."""
    if not (isinstance(output, torch.Tensor) and isinstance(target, torch.Tensor)) or task != "classification":
        return
    if output.ndim < 2 or target.shape == output.shape:  # binary logits, or class probabilities as targets
        return
    classes = int(output.shape[1])
    label_shape = (output.shape[0], *output.shape[2:])
    if tuple(target.shape) != tuple(label_shape):
        # A loss of the user's own knows its layout: a language model's (batch, time, vocabulary) logits
        # against (batch, time) token ids put the classes last, and its loss flattens them.
        if not strict and tuple(target.shape) == tuple(output.shape[:-1]):
            return
        if strict or target.numel() != output.shape[0]:
            raise TorchwiseError(f"The targets of the {where} do not fit the model's outputs.",
                                 values={"outputs": describe(output), "targets": describe(target)},
                                 fix=f"For classification with {classes} outputs per sample the targets are class "
                                     f"indices of shape {list(label_shape)} (or class probabilities of the outputs' "
                                     "shape). Check the data set's labels and the model's last layer.")
        return
    if target.is_floating_point():
        if not strict:
            return
        whole = bool(torch.all(target == target.round())) if target.numel() else True
        raise TorchwiseError(f"The class labels of the {where} are floating point numbers ({str(target.dtype).replace('torch.', '')}).",
                             values={"targets": describe(target), "first labels": target.flatten()[:6].tolist()},
                             fix=("They are whole numbers: convert them with y.long() (e.g. TensorDataset(x, y.long()))."
                                  if whole else "Cross-entropy takes class indices (int64); for regression on "
                                                 "these values pass task='regression'."))
    if target.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool):
        return
    ignore = getattr(loss_fn, "ignore_index", -100)
    check_label_range(target, classes, ignore, where)


def check_label_range(labels: torch.Tensor, classes: int, ignore_index: int, where: str) -> None:
    labels = labels.flatten()
    if labels.numel() == 0:
        return
    valid = labels[labels != ignore_index] if labels.dtype != torch.bool else labels.long()
    if valid.numel() == 0:
        return
    low, high = int(valid.min()), int(valid.max())
    if low < 0:
        raise TorchwiseError(f"The {where} holds negative class labels.",
                             values={"smallest label": low, "outputs per sample": classes},
                             fix=f"Class labels run from 0 to {classes - 1}; map the labels to that range "
                                 "(e.g. y - y.min(), or a dict from class name to index).")
    if high >= classes:
        raise TorchwiseError(f"The {where} holds class labels the model has no output for.",
                             values={"largest label": high, "outputs per sample": classes,
                                     "labels allowed": f"0..{classes - 1}"},
                             fix=f"Give the model's last layer {high + 1} outputs (num_classes={high + 1}), or map "
                                 f"the labels to 0..{classes - 1}.")


def forward_error(exc: Exception, inputs: Any, model: nn.Module, where: str) -> TorchwiseError:
    text = str(exc).strip().splitlines()
    first = text[0][:300] if text else ""
    params = {p.dtype for p in model.parameters()}
    odd = sorted({str(x.dtype).replace("torch.", "") for x in inputs
                  if isinstance(x, torch.Tensor) and x.dtype not in params and x.dtype != torch.bool})
    hint = ""
    if odd and ("dtype" in first.lower() or "scalar type" in first.lower()):
        hint = (f" The inputs are {', '.join(odd)} and the model's weights "
                f"{', '.join(sorted(str(d).replace('torch.', '') for d in params))}: convert the inputs, e.g. x.float().")
    elif isinstance(exc, TypeError) and "argument" in first:
        hint = f" The model was called with {len(inputs)} input(s): model(*inputs)."
    return TorchwiseError(f"The model's forward failed on the {where}.",
                          values={"model": type(model).__name__, "inputs": describe(inputs), "error": f"{type(exc).__name__}: {first}"},
                          fix="Check that the data's inputs fit the model (shape, dtype, number of inputs: "
                              "a batch ((x1, x2), y) calls model(x1, x2)); call model(*inputs) on one batch "
                              "yourself to see the error in your code." + hint)


def loss_error(exc: Exception, output: Any, target: Any, where: str) -> TorchwiseError:
    text = str(exc).strip().splitlines()
    return TorchwiseError(f"The loss failed on the {where}.",
                          values={"outputs": describe(output), "targets": describe(target),
                                  "error": f"{type(exc).__name__}: {text[0][:300] if text else ''}"},
                          fix="Check that the targets fit the loss: class indices (int64) for cross-entropy, "
                              "float values of the outputs' shape for regression (task='regression')."
                              + (" The model returns a " + type(output).__name__ + ", not a tensor: pass a loss "
                                 "that takes it (loss=lambda out, y: F.cross_entropy(out[0], y)) or return the "
                                 "logits alone." if not isinstance(output, torch.Tensor) else ""))


def metric_error(exc: Exception, name: str, output: torch.Tensor, target: Any) -> TorchwiseError:
    text = str(exc).strip().splitlines()
    return TorchwiseError(f"The metric {name!r} failed.",
                          values={"metric": name, "error": f"{type(exc).__name__}: {text[0][:300] if text else ''}",
                                  "outputs": describe(output), "targets": describe(target)},
                          fix=f"metrics[{name!r}] is called as fn(outputs, targets) with the whole validation "
                              "set's outputs (float, on the CPU) and targets, and must return a number; try it "
                              "on trainer.predict(val_data).")


def check_number(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TorchwiseError(f"The metric {name!r} did not return a number.",
                             values={"metric": name, "returned": type(value).__name__, "error": str(exc)[:200]},
                             fix="Return a float (or a one-element tensor), e.g. float((pred == y).float().mean()).")
    return number if not math.isnan(number) else math.nan


def resolve_judge(monitor: str | None, mode: str | None, min_delta: float | None, early_stopping: Any, task: str,
                  metrics: Iterable[str], has_val: bool):
    """The run's one `Monitor` (metric, direction, smallest improvement): the Trainer's settings and the
    EarlyStopping's, each given once or the same in both (resolve_monitor)."""
    from torchwise.train.evaluate.monitor import Monitor

    name, direction = resolve_monitor(monitor, mode, early_stopping, task, metrics, has_val)
    es_delta = getattr(early_stopping, "min_delta", None)
    require(min_delta is None or es_delta is None or float(min_delta) == float(es_delta),
            "The Trainer and its EarlyStopping disagree on min_delta.",
            {"Trainer min_delta": min_delta, "EarlyStopping min_delta": es_delta},
            "Give min_delta once (Trainer(min_delta=...) or EarlyStopping(min_delta=...)).")
    delta = min_delta if min_delta is not None else es_delta
    return Monitor(name, direction, float(delta or 0.0))


def check_step_arguments(model: nn.Module, optimizer: Any, loss: Any, compute_loss: Any, strategy: str) -> None:
    """The Trainer's optimizer, loss and compute_loss arguments, before anything is built from them."""
    check_optimizer_arg(optimizer, model)
    require(loss is None or callable(loss), "loss must be callable(output, target) -> tensor.",
            {"loss": type(loss).__name__}, "Pass e.g. nn.CrossEntropyLoss() or F.mse_loss.")
    require(strategy != "fsdp" or not isinstance(optimizer, torch.optim.Optimizer),
            "With strategy='fsdp' the optimizer must be built after the model is sharded.",
            {"optimizer": type(optimizer).__name__},
            "Pass a factory: optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3).")
    require(compute_loss is None or callable(compute_loss), "compute_loss must be callable(model, batch).",
            {"compute_loss": type(compute_loss).__name__},
            "Pass a function: compute_loss=lambda model, batch: F.cross_entropy(model(batch['x']), batch['y']).")


def apply_batch_fn(fn: Callable[..., Any], x: Any, name: str, *args: Any) -> torch.Tensor:
    """batch_augment / batch_eval on a batch's first input, its result checked (one row per sample)."""
    if not isinstance(x, torch.Tensor):
        raise TorchwiseError(f"{name} needs the batch's first input to be a tensor.", values={"input": type(x).__name__},
                             fix=f"Make the data set return (image tensor, label), or drop {name}.")
    out = fn(x, *args)
    if not isinstance(out, torch.Tensor) or out.shape[:1] != x.shape[:1]:
        raise TorchwiseError(f"{name} must return a tensor with one row per sample.",
                             values={"input shape": tuple(x.shape),
                                     "returned": tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__},
                             fix="Return the transformed batch, e.g. BatchAugment(size=...)(images, generator).")
    return out
