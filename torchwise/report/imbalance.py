"""Imbalanced classes in a run's evaluation: the scores a headline needs when accuracy alone misleads, and the
classes the model never (or almost never) predicts while they have validation examples.

A newcomer's 6-class folder with one class of 12 images in 612 trained to 0.98 accuracy while that class was
never predicted (recall 0, macro F1 0.75), and nothing said so. `judge` writes its verdict into the evaluation
(eval.json), so the console's `done:` line, report.html and `torchwise eval` say the same thing from the same
numbers; `headline` and `warning_lines` are what they print.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

# Imbalanced: the largest class has at least this many times the examples of the smallest (the training split's
# counts when known, else the validation examples). From 2x on, accuracy can stay high while a small class is
# mostly wrong; macro F1 and balanced accuracy weigh every class the same, so they show it.
IMBALANCE_RATIO = 2.0
# Almost never predicted: the model names the class fewer times than this share of its validation examples
# (0 times for 2 examples, at most 2 times for 24). A class named that rarely is one the model has learned to
# ignore, whatever its precision.
RARELY_PREDICTED_SHARE = 0.1
LISTED = 10  # the classes a warning lists, the rarest first (the rest are counted): a 5,000-class run prints lines, not pages


def judge(evaluation: dict[str, Any], train_counts: Mapping[str, int] | None = None,
          weighted: bool = False) -> dict[str, Any]:
    """Add `class_balance` (is the data imbalanced, on what counts) and, when some class with validation
    examples is (almost) never predicted, `rarely_predicted` to a classification evaluation; returns it."""
    per_class = evaluation.get("per_class")
    if evaluation.get("problem") != "classification" or not per_class:
        return evaluation
    train = {str(k): int(v) for k, v in (train_counts or {}).items()}
    counted_on = "training split" if train else "validation examples"
    sizes = {str(row["class"]): (train.get(str(row["class"]), 0) if train else int(row["support"]))
             for row in per_class}
    sizes = {name: n for name, n in sizes.items() if n > 0}
    balance: dict[str, Any] = {"imbalanced": False, "counted_on": counted_on}
    if len(sizes) >= 2:
        largest, smallest = max(sizes, key=sizes.get), min(sizes, key=sizes.get)
        ratio = sizes[largest] / sizes[smallest]
        balance.update(imbalanced=ratio >= IMBALANCE_RATIO, ratio=round(ratio, 2), rule=f">= {IMBALANCE_RATIO:g}x",
                       largest={"class": largest, "count": sizes[largest]},
                       smallest={"class": smallest, "count": sizes[smallest]})
    evaluation["class_balance"] = balance
    rare = [row for row in per_class
            if row["support"] > 0 and "predicted" in row and row["predicted"] < RARELY_PREDICTED_SHARE * row["support"]]
    if rare:
        rare.sort(key=lambda row: (row["predicted"] / row["support"], row["recall"], -row["support"], str(row["class"])))
        evaluation["rarely_predicted"] = {
            "rule": f"predicted fewer times than {RARELY_PREDICTED_SHARE:g} x its validation examples",
            "total": len(rare),
            "classes": [{"class": row["class"], "train": train.get(str(row["class"])) if train else None,
                         "val": int(row["support"]), "predicted": int(row["predicted"]), "recall": row["recall"]}
                        for row in rare[:LISTED]],
            "fix": _fix(weighted),
        }
    return evaluation


def _fix(weighted: bool) -> str:
    if weighted:
        return ("the loss is already weighted by class: more examples of these classes, more epochs, or a larger "
                "model")
    return ("--set train.class_weights=balanced weights the loss by class (or more examples of these classes, "
            "more epochs)")


def headline(evaluation: dict[str, Any]) -> list[tuple[str, float]]:
    """The validation scores a classification run leads with: accuracy, and with imbalanced classes (or a class
    the model ignores) macro F1 and balanced accuracy beside it."""
    scores = [("accuracy", evaluation["accuracy"])]
    if (evaluation.get("class_balance") or {}).get("imbalanced") or evaluation.get("rarely_predicted"):
        scores += [("macro F1", evaluation["macro_f1"]),
                   ("balanced accuracy", evaluation.get("balanced_accuracy", evaluation.get("macro_recall")))]
    return scores


def warning_lines(evaluation: dict[str, Any]) -> list[str]:
    """The warning about (almost) never predicted classes, one line per class listed; [] when there is none."""
    rare = evaluation.get("rarely_predicted")
    if not rare:
        return []
    total = rare["total"]
    what = "1 class" if total == 1 else f"{total:,} classes"
    lines = [f"warning: the model never or almost never predicts {what} with validation examples; accuracy "
             f"{evaluation['accuracy']:.4f} hides it (macro F1 {evaluation['macro_f1']:.4f}, balanced accuracy "
             f"{evaluation.get('balanced_accuracy', evaluation.get('macro_recall', 0.0)):.4f}):"]
    lines += [f"  {describe(item)}" for item in rare["classes"]]
    if total > len(rare["classes"]):
        lines.append(f"  ... and {total - len(rare['classes']):,} more (eval.json lists {len(rare['classes'])})")
    lines.append(f"  fix: {rare['fix']}")
    return lines


def describe(item: Mapping[str, Any]) -> str:
    """"'five': predicted 0 times for its 2 validation examples (recall 0.000); 10 training examples"."""
    times = "1 time" if item["predicted"] == 1 else f"{item['predicted']} times"
    train = "" if item.get("train") is None else f"; {item['train']} training examples"
    return (f"{str(item['class'])!r}: predicted {times} for its {item['val']} validation examples "
            f"(recall {item['recall']:.3f}){train}")


def table_rows(evaluation: dict[str, Any]) -> tuple[list[str], list[Sequence[Any]]]:
    """The listed classes as a table (report.html): header, rows."""
    rare = evaluation.get("rarely_predicted") or {}
    header = ["class", "train examples", "val examples", "times predicted", "recall"]
    return header, [[c["class"], "-" if c.get("train") is None else c["train"], c["val"], c["predicted"], c["recall"]]
                    for c in rare.get("classes", [])]
