"""`torchwise eval`: accuracy, per-class metrics and the confusion matrix of a trained run.

    torchwise eval --run RUNDIR                 the run's own validation split (from split.json)
    torchwise eval --run RUNDIR --data DIR      other labelled data (class folders, or a CSV)
    torchwise eval --checkpoint RUNDIR/checkpoints/step-000000200

Prints a table and writes the numbers as JSON (RUNDIR/eval.json unless --json says otherwise).
The metric functions are torchwise/run/scores.py's, which `torchwise train` uses for its report, so
the report and `eval` always agree.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from torchwise import files
from torchwise.errors import TorchwiseError
# the one set of evaluation metrics: the run's report and `eval` use the same (torchwise/run/scores.py)
from torchwise.run.scores import evaluate_outputs, worst_examples


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

    from torchwise.errors import is_out_of_memory, out_of_memory

    model = model.to(device).eval()
    outputs, targets = [], []
    try:
        with torch.inference_mode():
            for inputs, target in DataLoader(dataset, batch_size=batch_size, shuffle=False):
                outputs.append(model(inputs.to(device)).float().cpu())
                targets.append(target)
        return torch.cat(outputs), torch.cat(targets)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        raise out_of_memory(exc, f"evaluating {len(dataset)} examples in batches of {batch_size}", device=device,
                            fix=f"evaluate in smaller batches (--batch-size {max(1, batch_size // 4)}); on the CPU, "
                                "close what else uses the machine's memory (or raise the process' memory limit, "
                                "ulimit -v)") from exc


def format_table(result: dict[str, Any]) -> str:
    if result["problem"] == "regression":
        return (f"examples {result['examples']}   MAE {result['mae']:.4g}   RMSE {result['rmse']:.4g}   "
                f"R² {result['r2']:.4f}")
    from torchwise.report import imbalance, many_classes

    per_class = result["per_class"]
    many = "confusion" not in result or many_classes.is_many(len(per_class))
    rows = many_classes.worst_classes(per_class) if many else per_class  # many classes: the worst, and counts
    names = [str(c["class"]) for c in per_class]
    width = max(8, *(len(str(r["class"])) for r in rows)) if rows else 8
    balance = (result.get("class_balance") or {}).get("imbalanced") or result.get("rarely_predicted")
    lines = [f"accuracy {result['accuracy']:.4f} on {result['examples']} examples"
             + (f"   top-5 {result['top5_accuracy']:.4f}" if "top5_accuracy" in result else "")
             + f"   macro F1 {result['macro_f1']:.4f}"
             + (f"   balanced accuracy {result['balanced_accuracy']:.4f}" if balance else ""),
             *imbalance.warning_lines(result), ""]
    if many:
        lines.append(many_classes.per_class_note(per_class, len(rows)))
    lines.append(f"{'class':<{width}}  precision  recall     f1  support")
    for row in rows:
        lines.append(f"{str(row['class']):<{width}}  {row['precision']:9.3f}  {row['recall']:6.3f}  "
                     f"{row['f1']:5.3f}  {row['support']:7d}")
    if many:
        return "\n".join(lines + _most_confused_lines(result.get("confusion_top")))
    cell = max(4, *(len(str(v)) for r in result["confusion"] for v in r), *(min(len(n), 6) for n in names)) + 1
    lines += ["", "confusion matrix (rows: true, columns: predicted)",
              " " * width + "".join(f"{n[:cell - 1]:>{cell}}" for n in names)]
    for name, row in zip(names, result["confusion"]):
        lines.append(f"{name:<{width}}" + "".join(f"{v:>{cell}}" for v in row))
    return "\n".join(lines)


def _most_confused_lines(top: dict[str, Any] | None) -> list[str]:
    """Many classes: the pairs most often confused, instead of a matrix too wide for any terminal."""
    if not top:
        return []
    lines = ["", f"most often confused, of {top['misclassified']} misclassified examples (true -> predicted: "
                 f"examples; no matrix for {top['classes_total']} classes, eval.json holds the most-confused "
                 f"classes' block):"]
    lines += [f"  {p['true']} -> {p['predicted']}: {p['count']}" for p in top["pairs"]]
    return lines


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
    from torchwise.train.state import run_lock

    if args.checkpoint:
        run_dir, weights = _run_of_checkpoint(Path(args.checkpoint))
    else:
        run_dir, weights = Path(args.run), None
        if not run_dir.is_dir():
            raise TorchwiseError("The run directory does not exist.", values={"run": str(run_dir)},
                                 fix="pass the --out directory of a `torchwise train` run")
    out = Path(args.json) if args.json else run_dir / "eval.json"
    # writing into the run folder: one writer at a time (not while a run, or another eval, writes there)
    with run_lock.claim_if_inside(run_dir, out):
        return _evaluate(args, run_dir, weights, out)


def _evaluate(args: argparse.Namespace, run_dir: Path, weights: Path | None, out: Path) -> int:
    from torchwise.data.tasks import eval_task
    from torchwise.models import model_from_run

    model, meta = model_from_run(run_dir, weights)
    task = eval_task(run_dir, meta, args.data)
    outputs, targets = predict(model, task.val, batch_size=args.batch_size, device=args.device)
    result = evaluate_outputs(outputs, targets, meta)
    if meta["problem"] == "classification":  # imbalance judged on the run's training counts (final/meta.json) if kept
        from torchwise.report import imbalance

        counts = meta.get("train_class_counts")
        train = dict(zip(meta["class_names"], counts)) if isinstance(counts, list) else None
        imbalance.judge(result, train, weighted="class_weights" in meta)
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
    if Path(os.path.abspath(out)).is_relative_to(os.path.abspath(run_dir)):  # never through a link out of the run
        files.write_text(out, json.dumps(result, indent=2), root=run_dir)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")
    return 0
