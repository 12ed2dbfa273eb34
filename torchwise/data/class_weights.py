"""Class weights for an imbalanced classification loss: `CrossEntropyLoss(weight=class_weights(y))`.

"balanced" gives class c the weight n / (k * count_c) (n samples, k classes), as scikit-learn's
`compute_class_weight("balanced")`: a class with half the average share counts twice, and the
weighted total over the data set equals the unweighted one (sum_c count_c * w_c = n). Compute the
weights from the TRAINING labels only: weights from the validation split leak it into training.
"""
from __future__ import annotations

from typing import Any

import torch

from torchwise.errors import ConfigError

SCHEMES = ("balanced",)


def _shown(values: list[int], limit: int = 10) -> str:
    text = ", ".join(str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def _as_labels(targets: Any) -> torch.Tensor:
    """A 1-D int64 tensor of class indices from a tensor, numpy array or sequence of ints."""
    try:
        t = targets.detach().cpu() if isinstance(targets, torch.Tensor) else torch.as_tensor(targets)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError("class_weights needs class indices (integers), but the targets are not numbers.",
                          values={"targets": type(targets).__name__, "error": str(exc)},
                          fix="pass the integer class index of every training sample (0 .. num_classes-1), "
                              "e.g. a LongTensor or a list of ints") from None
    if t.ndim != 1:
        raise ConfigError("class_weights needs a 1-D vector of class indices, one per sample.",
                          values={"shape": tuple(t.shape)},
                          fix="pass targets.flatten() for a [N, 1] column; for one-hot or soft labels pass "
                              "targets.argmax(dim=1)")
    if t.numel() == 0:
        raise ConfigError("class_weights got no targets: the training labels are empty.",
                          values={"targets": 0}, fix="pass the labels of the training split")
    if t.dtype == torch.bool or t.is_complex():
        raise ConfigError("class_weights needs integer class indices.", values={"dtype": str(t.dtype)},
                          fix="convert the labels to integers: targets.long()")
    if t.is_floating_point():
        fractional = t[(t != t.round()) | ~torch.isfinite(t)]
        if fractional.numel():
            raise ConfigError("class_weights needs integer class indices, but some targets are not whole numbers.",
                              values={"examples": _shown(fractional.tolist(), 5), "dtype": str(t.dtype)},
                              fix="pass class indices (0 .. num_classes-1); class weights do not apply to "
                                  "regression targets or soft labels")
    return t.long()


def class_weights(targets: Any, num_classes: int | None = None, scheme: str = "balanced") -> torch.Tensor:
    """Per-class loss weights (float32, shape [num_classes]) from the training labels.

    targets: the class index of every TRAINING sample (tensor, numpy array or list of ints).
    num_classes: the number of classes k (None: the largest label + 1). A class the model has but the
        labels never show gets no finite weight and is an error, as are negative labels and labels >= k.
    scheme: "balanced": n / (k * count_c).

        loss_fn = nn.CrossEntropyLoss(weight=torchwise.class_weights(train_labels, num_classes=10))
    """
    if scheme not in SCHEMES:
        raise ConfigError("Unknown class weight scheme.", values={"scheme": scheme, "allowed": ", ".join(SCHEMES)},
                          fix="use scheme='balanced' (n / (num_classes * count of the class))")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise ConfigError("num_classes must be None or an integer >= 1.", values={"num_classes": num_classes},
                          fix="pass the number of classes the model predicts (its output size), or None to "
                              "take the largest label + 1")
    labels = _as_labels(targets)
    negative = sorted(set(labels[labels < 0].tolist()))
    if negative:
        raise ConfigError("class_weights got negative labels; class indices start at 0.",
                          values={"negative labels": _shown(negative), "smallest": negative[0]},
                          fix="map the labels to 0 .. num_classes-1 first (e.g. labels - labels.min(), or a "
                              "dict from class name to index)")
    k = int(labels.max()) + 1 if num_classes is None else num_classes
    too_big = sorted(set(labels[labels >= k].tolist()))
    if too_big:
        raise ConfigError("class_weights got labels >= num_classes.",
                          values={"num_classes": k, "labels out of range": _shown(too_big), "largest": too_big[-1]},
                          fix=f"labels must be 0 .. {k - 1}: pass num_classes={too_big[-1] + 1} if the model "
                              f"has that many outputs, or map the labels into range")
    counts = torch.bincount(labels, minlength=k)
    empty = [c for c in range(k) if int(counts[c]) == 0]
    if empty:
        raise ConfigError("A class has no training samples, so its balanced weight would be infinite.",
                          values={"classes with 0 samples": _shown(empty), "num_classes": k,
                                  "counts": _shown(counts.tolist(), 20)},
                          fix="add training samples of that class, drop the class (and lower num_classes), or "
                              "check that the split kept at least one sample of every class in training")
    n = labels.numel()
    return (n / (k * counts.double())).float()
