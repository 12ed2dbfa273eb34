"""Validation metrics of a model's outputs against the targets, and the examples it got most wrong.

The same functions score a run at its end (final_eval.py, into eval.json) and `torchwise eval` on a
run or checkpoint later, so both report the same numbers; accuracy and top-5 are counted by the
Trainer's own validation metrics' functions (torchwise/train/evaluate/streaming_metrics.py), so they agree with val_acc.
"""
from __future__ import annotations

from typing import Any, Sequence


# Above this many classes a confusion matrix is not drawn or stored whole (5,000 classes: 25 million cells, an
# unreadable picture and a JSON file of hundreds of MB): the most-confused classes are kept instead.
FULL_CONFUSION_MAX = 50
CONFUSED_CLASSES = 30   # the classes kept in the summarised matrix
CONFUSED_PAIRS = 20     # the (true, predicted) pairs listed as most often confused


def classification_metrics(outputs, targets, class_names: Sequence[str]) -> dict[str, Any]:
    """Accuracy, macro and per-class scores, and the confusion matrix: whole up to FULL_CONFUSION_MAX
    classes, else the most-confused classes' part of it (see most_confused). The work is linear in the
    examples and the classes, never in classes squared."""
    import torch

    from torchwise.train.evaluate.streaming_metrics import argmax_hits, shows_top5, top5_hits

    n = len(class_names)
    predicted = outputs.argmax(dim=1)
    targets = targets.long().reshape(-1)
    right = predicted == targets
    true_pos = torch.bincount(targets[right], minlength=n).double()
    support = torch.bincount(targets, minlength=n).double()
    predicted_count = torch.bincount(predicted, minlength=n).double()
    precision = torch.where(predicted_count > 0, true_pos / predicted_count.clamp_min(1), torch.zeros_like(true_pos))
    recall = torch.where(support > 0, true_pos / support.clamp_min(1), torch.zeros_like(true_pos))
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp_min(1e-12),
                     torch.zeros_like(true_pos))
    present = support > 0
    result: dict[str, Any] = {
        "problem": "classification",
        "examples": int(targets.numel()),
        "accuracy": float(argmax_hits(outputs, targets).double() / max(1, targets.numel())),
        "macro_precision": float(precision[present].mean()) if present.any() else 0.0,
        "macro_recall": float(recall[present].mean()) if present.any() else 0.0,
        "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
        # the mean of the per-class recalls over the classes with examples (scikit-learn's balanced_accuracy_score):
        # the macro recall under the name people look for
        "balanced_accuracy": float(recall[present].mean()) if present.any() else 0.0,
        # "predicted": how often the model named the class (a class never named is one it ignores)
        "per_class": [{"class": name, "precision": p, "recall": r, "f1": f, "support": int(c), "predicted": int(k)}
                      for name, p, r, f, c, k in zip(class_names, precision.tolist(), recall.tolist(), f1.tolist(),
                                                     support.tolist(), predicted_count.tolist())],
        "class_names": list(class_names),
    }
    if n <= FULL_CONFUSION_MAX:
        result["confusion"] = torch.bincount(targets * n + predicted, minlength=n * n).reshape(n, n).tolist()
    else:
        result["confusion_top"] = most_confused(targets, predicted, class_names)
    if shows_top5(n):
        result["top5_accuracy"] = float(top5_hits(outputs, targets).double() / max(1, targets.numel()))
    return result


def most_confused(targets, predicted, class_names: Sequence[str], k: int = CONFUSED_CLASSES,
                  n_pairs: int = CONFUSED_PAIRS) -> dict[str, Any]:
    """The part of the confusion matrix a person can read when there are many classes: the k classes most
    involved in mistakes (as the true class or as the prediction), their k x k block plus an "other"
    column (predicted as a class not shown), and the most frequent (true, predicted) pairs. Exact counts,
    from the examples directly: linear in the examples."""
    import torch

    n = len(class_names)
    wrong = predicted != targets
    involved = torch.bincount(targets[wrong], minlength=n) + torch.bincount(predicted[wrong], minlength=n)
    support = torch.bincount(targets, minlength=n)
    # most involved first; among equals (no mistakes at all, say) the larger classes, then the name's order
    mistakes, sizes = involved.tolist(), support.tolist()
    order = sorted(range(n), key=lambda i: (-mistakes[i], -sizes[i], i))[:min(k, n)]
    position = torch.full((n,), -1, dtype=torch.long)
    position[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    rows, cols = position[targets], position[predicted]
    shown_row = rows >= 0
    cell = torch.where(cols[shown_row] >= 0, cols[shown_row], torch.full_like(cols[shown_row], len(order)))
    block = torch.bincount(rows[shown_row] * (len(order) + 1) + cell, minlength=len(order) * (len(order) + 1))
    pairs, counts = torch.unique(targets[wrong] * n + predicted[wrong], return_counts=True)
    top = counts.argsort(descending=True, stable=True)[:n_pairs]
    misclassified = int(wrong.sum())
    return {
        "classes": [class_names[i] for i in order],
        "matrix": block.reshape(len(order), len(order) + 1).tolist(),   # rows: true; last column: other classes
        "classes_total": n,
        "classes_left_out": n - len(order),
        "chosen_by": "most mistakes as the true or the predicted class",
        "misclassified": misclassified,
        "misclassified_shown": int((wrong & shown_row & (cols >= 0)).sum()),
        "pairs": [{"true": class_names[int(pairs[j]) // n], "predicted": class_names[int(pairs[j]) % n],
                   "count": int(counts[j])} for j in top.tolist()],
    }


def regression_metrics(outputs, targets, target_mean: float, target_std: float) -> dict[str, Any]:
    """MAE / RMSE / R² in the target's own units (the model works on the standardized target)."""
    predicted = outputs.reshape(-1).double() * target_std + target_mean
    actual = targets.reshape(-1).double() * target_std + target_mean
    error = predicted - actual
    total = ((actual - actual.mean()) ** 2).sum()
    return {
        "problem": "regression",
        "examples": int(actual.numel()),
        "mae": float(error.abs().mean()),
        "rmse": float(error.pow(2).mean().sqrt()),
        "r2": float(1 - error.pow(2).sum() / total) if total > 0 else 0.0,
        "predicted": [round(float(v), 6) for v in predicted],
        "actual": [round(float(v), 6) for v in actual],
    }


def evaluate_outputs(outputs, targets, meta: dict[str, Any]) -> dict[str, Any]:
    if meta["problem"] == "classification":
        return classification_metrics(outputs, targets, meta["class_names"])
    tab = meta.get("tabular", {})
    return regression_metrics(outputs, targets, tab.get("target_mean", 0.0), tab.get("target_std", 1.0))


def worst_examples(outputs, targets, ids: Sequence[str], class_names: Sequence[str], k: int) -> list[dict[str, Any]]:
    """The k misclassified examples the model was most confidently wrong about. The probabilities come from
    the logits' log-sum-exp, one number per example: no second examples x classes table is made."""
    import torch

    if k <= 0 or outputs.numel() == 0:
        return []
    logits = outputs.float()
    targets = targets.long().reshape(-1)
    total = torch.logsumexp(logits, dim=1)
    top, predicted = logits.max(dim=1)
    confidence = (top - total).exp()
    wrong = (predicted != targets).nonzero().reshape(-1)
    order = wrong[confidence[wrong].argsort(descending=True)][:k]
    return [{"index": int(i), "id": ids[i] if i < len(ids) else str(int(i)),
             "true": class_names[targets[i]], "predicted": class_names[predicted[i]],
             "confidence": float(confidence[i]),
             "p_true": float((logits[i, targets[i]] - total[i]).exp())} for i in order.tolist()]
