"""Validation metrics of a model's outputs against the targets, and the examples it got most wrong.

The same functions score a run at its end (final_eval.py, into eval.json) and `torchwise eval` on a
run or checkpoint later, so both report the same numbers; accuracy and top-5 are counted by the
Trainer's own validation metrics' functions (torchwise/train/evaluate/streaming_metrics.py), so they agree with val_acc.
"""
from __future__ import annotations

from typing import Any, Sequence


def classification_metrics(outputs, targets, class_names: Sequence[str]) -> dict[str, Any]:
    import torch

    from torchwise.train.evaluate.streaming_metrics import argmax_hits, top5_hits

    n = len(class_names)
    predicted = outputs.argmax(dim=1)
    targets = targets.long().reshape(-1)
    confusion = torch.bincount(targets * n + predicted, minlength=n * n).reshape(n, n)
    true_pos = confusion.diag().double()
    support = confusion.sum(dim=1).double()
    predicted_count = confusion.sum(dim=0).double()
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
        "per_class": [{"class": name, "precision": float(precision[i]), "recall": float(recall[i]),
                       "f1": float(f1[i]), "support": int(support[i])} for i, name in enumerate(class_names)],
        "confusion": confusion.tolist(),
        "class_names": list(class_names),
    }
    if n > 5:
        result["top5_accuracy"] = float(top5_hits(outputs, targets).double() / max(1, targets.numel()))
    return result


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
    """The k misclassified examples the model was most confidently wrong about."""
    import torch

    if k <= 0 or outputs.numel() == 0:
        return []
    probs = torch.softmax(outputs.float(), dim=1)
    targets = targets.long().reshape(-1)
    confidence, predicted = probs.max(dim=1)
    wrong = (predicted != targets).nonzero().reshape(-1)
    order = wrong[confidence[wrong].argsort(descending=True)][:k]
    return [{"index": int(i), "id": ids[i] if i < len(ids) else str(int(i)),
             "true": class_names[targets[i]], "predicted": class_names[predicted[i]],
             "confidence": float(confidence[i]), "p_true": float(probs[i, targets[i]])} for i in order.tolist()]
