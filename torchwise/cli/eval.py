"""`torchwise eval`: accuracy, per-class metrics and the confusion matrix of a trained run.

    torchwise eval --run RUNDIR                 the run's own validation split (from split.json)
    torchwise eval --run RUNDIR --data DIR      other labelled data (class folders, or a CSV)
    torchwise eval --checkpoint RUNDIR/checkpoints/step-000000200

Prints a table and writes the numbers as JSON (RUNDIR/eval.json unless --json says otherwise).
The metric functions here are also what `torchwise train` uses for its report, so the report
and `eval` always agree.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from torchwise.errors import TorchwiseError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", metavar="RUNDIR", help="run directory written by `torchwise train`")
    source.add_argument("--checkpoint", metavar="PATH",
                        help="a checkpoint directory (RUNDIR/checkpoints/step-...) or weights file inside a run")
    parser.add_argument("--data", metavar="PATH",
                        help="labelled data to evaluate on (default: the run's validation split)")
    parser.add_argument("--json", metavar="FILE", help="where to write the results (default: RUNDIR/eval.json)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1, ...")


# ----------------------------------------------------------------------------- metrics


def predict(model, dataset, *, batch_size: int = 256, device: str = "cpu"):
    """(outputs, targets) for the whole data set, in order, on the CPU."""
    import torch
    from torch.utils.data import DataLoader

    model = model.to(device).eval()
    outputs, targets = [], []
    with torch.inference_mode():
        for inputs, target in DataLoader(dataset, batch_size=batch_size, shuffle=False):
            outputs.append(model(inputs.to(device)).float().cpu())
            targets.append(target)
    return torch.cat(outputs), torch.cat(targets)


def classification_metrics(outputs, targets, class_names: Sequence[str]) -> dict[str, Any]:
    import torch

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
        "accuracy": float(true_pos.sum() / max(1, targets.numel())),
        "macro_precision": float(precision[present].mean()) if present.any() else 0.0,
        "macro_recall": float(recall[present].mean()) if present.any() else 0.0,
        "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
        "per_class": [{"class": name, "precision": float(precision[i]), "recall": float(recall[i]),
                       "f1": float(f1[i]), "support": int(support[i])} for i, name in enumerate(class_names)],
        "confusion": confusion.tolist(),
        "class_names": list(class_names),
    }
    if n > 5:
        top5 = outputs.topk(5, dim=1).indices.eq(targets.unsqueeze(1)).any(dim=1)
        result["top5_accuracy"] = float(top5.double().mean())
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


def format_table(result: dict[str, Any]) -> str:
    if result["problem"] == "regression":
        return (f"examples {result['examples']}   MAE {result['mae']:.4g}   RMSE {result['rmse']:.4g}   "
                f"R² {result['r2']:.4f}")
    names = [str(c["class"]) for c in result["per_class"]]
    width = max(8, *(len(n) for n in names))
    lines = [f"accuracy {result['accuracy']:.4f} on {result['examples']} examples"
             + (f"   top-5 {result['top5_accuracy']:.4f}" if "top5_accuracy" in result else "")
             + f"   macro F1 {result['macro_f1']:.4f}", "",
             f"{'class':<{width}}  precision  recall     f1  support"]
    for row in result["per_class"]:
        lines.append(f"{str(row['class']):<{width}}  {row['precision']:9.3f}  {row['recall']:6.3f}  "
                     f"{row['f1']:5.3f}  {row['support']:7d}")
    cell = max(4, *(len(str(v)) for r in result["confusion"] for v in r), *(min(len(n), 6) for n in names)) + 1
    lines += ["", "confusion matrix (rows: true, columns: predicted)",
              " " * width + "".join(f"{n[:cell - 1]:>{cell}}" for n in names)]
    for name, row in zip(names, result["confusion"]):
        lines.append(f"{name:<{width}}" + "".join(f"{v:>{cell}}" for v in row))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command


def _run_of_checkpoint(path: Path) -> tuple[Path, Path]:
    """(run directory, weights file) for a checkpoint directory or a weights file inside a run."""
    weights = path / "model.safetensors" if path.is_dir() else path
    if not weights.is_file():
        raise TorchwiseError("No weights at this checkpoint path.", values={"path": str(path)},
                             fix="pass RUNDIR/checkpoints/step-NNNNNNNNN (a folder with model.safetensors) "
                                 "or a .safetensors file inside a run directory")
    for parent in weights.resolve().parents:
        if (parent / "final" / "meta.json").is_file() or (parent / "meta.json").is_file():
            return parent, weights
    raise TorchwiseError("The checkpoint is not inside a torchwise run directory (no meta.json above it).",
                         values={"checkpoint": str(path)}, fix="use a checkpoint from a `torchwise train` run")


def run(args: argparse.Namespace) -> int:
    from torchwise.data.tasks import eval_task
    from torchwise.models import model_from_run

    if args.checkpoint:
        run_dir, weights = _run_of_checkpoint(Path(args.checkpoint))
    else:
        run_dir, weights = Path(args.run), None
        if not run_dir.is_dir():
            raise TorchwiseError("The run directory does not exist.", values={"run": str(run_dir)},
                                 fix="pass the --out directory of a `torchwise train` run")
    model, meta = model_from_run(run_dir, weights)
    task = eval_task(run_dir, meta, args.data)
    outputs, targets = predict(model, task.val, batch_size=args.batch_size, device=args.device)
    result = evaluate_outputs(outputs, targets, meta)
    result.update({"run": str(run_dir), "weights": str(weights or run_dir / "final" / "model.safetensors"),
                   "data": task.summary})
    if meta["problem"] == "classification":
        result["worst"] = worst_examples(outputs, targets, task.val_ids, meta["class_names"], 10)
    print(f"evaluated {result['weights']} on {task.summary.get('source')}")
    skipped = task.summary.get("skipped") or []
    if skipped:
        print(f"skipped {len(skipped)} unreadable file(s): " + ", ".join(s["path"] for s in skipped[:5]))
    for key in ("dropped_missing_target", "dropped_missing_features"):
        if task.summary.get(key):
            print(f"{key.replace('_', ' ')}: {task.summary[key]} row(s)")
    print(format_table(result))
    out = Path(args.json) if args.json else run_dir / "eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")
    return 0
