"""The end of a run: its final weights scored on the validation data, written to eval.json, and the
HTML report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def evaluate(trainer, task, meta: dict[str, Any], run_dir: Path, n_worst: int, write: bool = True):
    """Validation metrics of the final weights (the same functions `torchwise eval` uses) -> eval.json, with
    the verdict on imbalanced classes (report/imbalance.py) judged on the training split's class counts."""
    from torchwise.report import imbalance
    from torchwise.run.scores import evaluate_outputs, worst_examples

    outputs, targets = trainer.predict(task.val)
    evaluation = evaluate_outputs(outputs, targets, meta)
    worst = []
    if task.problem == "classification":
        imbalance.judge(evaluation, task.summary.get("train_counts"), weighted=task.class_weights is not None)
        worst = worst_examples(outputs, targets, task.val_ids, task.class_names, n_worst)
    if write:
        from torchwise.files import write_text

        write_text(run_dir / "eval.json", json.dumps({**evaluation, "worst": worst, "data": task.summary}, indent=2),
                   root=run_dir)
    return evaluation, worst


def write_run_report(run_dir: Path, config, task, evaluation, worst, timing) -> Path:
    """report.html: the data, the evaluation with the worst examples' thumbnails, the timing and the config."""
    from torchwise.report.html import write_report
    from torchwise.report.plots import thumbnail_png

    if task.val_image is not None:
        worst = [{**item, "png": thumbnail_png(task.val_image(item["index"]))} for item in worst]
    return write_report(run_dir, title=f"torchwise run: {run_dir.name}", summary=task.summary,
                        evaluation=evaluation, class_names=task.class_names, worst=worst,
                        timing=timing, config=config.to_dict())
