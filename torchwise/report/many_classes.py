"""What the report shows of a classification with many classes: summaries a person can read, drawn in
time that does not grow with the classes squared.

Up to SHOWN_WHOLE classes the report shows everything (the whole confusion matrix, a bar per class, a
row per class). Above it, a confusion matrix of 5,000 x 5,000 cells is unreadable and takes minutes to
draw, so the report shows instead: the most-confused classes' block of the matrix (the run's scores pick
them, torchwise/run/scores.py most_confused) with which classes and how many were left out; the worst
classes by F1 in the per-class plot and table, with counts of the rest; and the smallest and largest
classes in the class counts. Each summary says what it left out.
"""
from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

SHOWN_WHOLE = 50   # the same bound as run/scores.py's FULL_CONFUSION_MAX: beyond it, summaries
WORST_CLASSES = 20  # rows of the per-class table and bars of its plot
COUNT_ENDS = 10     # smallest and largest classes listed in the class counts


def is_many(n_classes: int) -> bool:
    return n_classes > SHOWN_WHOLE


def worst_classes(per_class: Sequence[Mapping[str, Any]], k: int = WORST_CLASSES) -> list[Mapping[str, Any]]:
    """The k classes with the lowest F1 among those with validation examples (then lowest recall, then the
    most examples: a large class that fails matters more), in that order."""
    scored = [row for row in per_class if row.get("support", 0) > 0]
    return sorted(scored, key=lambda r: (r["f1"], r["recall"], -r["support"], str(r["class"])))[:k]


def per_class_note(per_class: Sequence[Mapping[str, Any]], shown: int) -> str:
    """One sentence on the classes the per-class table leaves out."""
    with_examples = [row for row in per_class if row.get("support", 0) > 0]
    zero_f1 = sum(1 for row in with_examples if row["f1"] == 0)
    f1s = [row["f1"] for row in with_examples]
    median = f"{statistics.median(f1s):.3g}" if f1s else "-"
    return (f"{len(per_class):,} classes: the {shown} with the lowest F1 are shown, {len(per_class) - shown:,} left "
            f"out. {len(with_examples):,} classes have validation examples ({len(per_class) - len(with_examples):,} "
            f"have none); {zero_f1:,} of them have F1 0; median per-class F1 {median}.")


def confusion_note(top: Mapping[str, Any]) -> str:
    """What the summarised confusion matrix shows and leaves out (top: run/scores.py's most_confused)."""
    shown = len(top["classes"])
    return (f"The {shown} classes of {top['classes_total']:,} chosen by {top['chosen_by']}; "
            f"{top['classes_left_out']:,} classes left out. Rows: the true class; the last column counts examples "
            f"of the row's class predicted as a class not shown. {top['misclassified_shown']:,} of the "
            f"{top['misclassified']:,} misclassified validation examples lie inside the block.")


def class_count_rows(train: Mapping[str, int], val: Mapping[str, int], k: int = COUNT_ENDS
                     ) -> tuple[list[list[Any]], str]:
    """The class counts table for many classes: the k smallest and k largest classes by training examples,
    and a sentence on the rest."""
    names = list(train or val)
    by_size = sorted(names, key=lambda name: ((train or val).get(name, 0), str(name)))
    ends = by_size[:k] + [name for name in by_size[-k:] if name not in by_size[:k]]
    rows = [[name, train.get(name, 0), val.get(name, 0)] for name in ends]
    sizes = [(train or val).get(name, 0) for name in names]
    note = (f"{len(names):,} classes: the {min(k, len(names))} smallest and {min(k, len(names))} largest by training "
            f"examples are shown, {len(names) - len(ends):,} left out; training examples per class from "
            f"{min(sizes)} to {max(sizes)} (median {statistics.median(sizes):g}).")
    return rows, note
