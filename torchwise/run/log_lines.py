"""What a run says as it goes: the data it trains on, the loss when it is not the plain default,
and the result."""
from __future__ import annotations

from typing import Any


def log_data(task, log) -> None:
    s = task.summary
    if task.kind == "image":
        train_n, val_n = sum(s["train_counts"].values()), sum(s["val_counts"].values())
        log(f"data: {s['root']} ({s['layout']}): {len(task.class_names)} classes, {train_n} train / {val_n} val "
            f"images, input {s['input']}, normalization from {s['normalization']}, augmentation "
            f"{s.get('augmentation', 'in the loader')}")
    else:
        log(f"data: {s['root']}: {s['problem']} of {s['target']!r}, {s['train_rows']} train / {s['val_rows']} val "
            f"rows, {s['features']} features" + (f"; read as: {s['read_as']}" if s.get("read_as") else ""))
        for key in ("dropped_missing_target", "dropped_missing_features", "imputed_values"):
            if s.get(key):
                log(f"data: {key.replace('_', ' ')}: {s[key]}")
        for column, why in (s.get("ignored_columns") or {}).items():
            log(f"data: ignored column {column!r}: {why}")
    skipped = s.get("skipped") or []
    if skipped:
        log(f"data: skipped {len(skipped)} unreadable image(s) (listed in the report):")
        for item in skipped[:5]:
            log(f"  {item['path']}: {item['reason']}")


def log_loss(config, task, log) -> None:
    """Say which loss trains the model when it is not the plain default, and the validation batch."""
    if task.class_weights is not None:
        from torchwise.data.tasks import describe_class_weights

        log(f"loss: cross-entropy weighted per class (train.class_weights={config.train.class_weights}; "
            f"training loss and val_loss): {describe_class_weights(task)}")
    if config.train.eval_batch_size is not None:
        log(f"data: validation and evaluation batches of {config.train.eval_batch_size} "
            f"(training batches of {config.train.batch_size})")


def log_result(summary: dict[str, Any], log) -> None:
    """The `done:` line (with imbalanced classes macro F1 and balanced accuracy beside accuracy), the warning
    about classes the model never predicts (report/imbalance.py), and where the weights and report are."""
    from torchwise.report import imbalance

    ev, timing = summary["evaluation"], summary["timing"]
    if ev["problem"] == "classification":
        score = "val " + ", ".join(f"{name} {value:.4f}" for name, value in imbalance.headline(ev))
    else:
        score = f"val RMSE {ev['rmse']:.4g}, MAE {ev['mae']:.4g}, R² {ev['r2']:.3f}"
    epochs = f"{timing['epochs']} epoch" + ("" if timing["epochs"] == 1 else "s")
    log(f"done: {score} after {timing['steps']} steps ({epochs}) in {timing['train_time_s']:.1f} s "
        f"({timing['samples_per_s']} samples/s)")
    for line in imbalance.warning_lines(ev) if ev["problem"] == "classification" else []:
        log(line)
    log(f"weights: {summary['final']}")
    if summary["report"]:
        log(f"report:  {summary['report']}")
