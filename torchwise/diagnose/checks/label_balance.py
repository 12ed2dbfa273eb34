"""label-imbalance's verdict: imbalanced class counts (or binary targets) of an unweighted loss, and what the
model predicted for the rare class in the last checked batches (counted in losses.py, where each loss call is
read). Its own module so that the wording, which must say exactly what was counted and never contradict
itself, sits in one place.
"""
from __future__ import annotations

from torchwise.diagnose.catalog import Finding


def class_label(index: int, names) -> str:
    """'class 3', or "class 3 ('dog')" when the run knows its classes' names (the Trainer of `torchwise train`)."""
    if names and 0 <= index < len(names) and str(names[index]) != str(index):
        return f"class {index} ({names[index]!r})"
    return f"class {index}"


def imbalance_classes(c, counts, present, names=None, steps: int = 0, split_counts=None) -> list[Finding]:
    """Imbalance judged on the training split's own class counts when the run gives them (torchwise train: the
    numbers of its data table), else on the labels of the checked batches, and the message says which: the
    checker sees only the batches it checks, a sample that can differ from the split (2 of 128 checked labels
    where the split holds 10 of 490)."""
    whole = split_counts is not None and len(split_counts) == len(counts)
    judged = [int(k) for k in split_counts] if whole else counts
    judged_present = [i for i, k in enumerate(judged) if k > 0] if whole else present
    present_counts = [judged[i] for i in judged_present]
    if len(judged_present) < 2 or c["weighted"] or max(present_counts) < 10 * min(present_counts):
        return []
    big = judged_present[present_counts.index(max(present_counts))]
    small = judged_present[present_counts.index(min(present_counts))]
    ratio = max(present_counts) / min(present_counts)
    if whole:
        counted = f"in the training split's {sum(judged)} examples"
        msg = (f"{class_label(big, names).capitalize()} has {max(present_counts)} training examples and "
               f"{class_label(small, names)} only {min(present_counts)} ({ratio:.0f}x) {counted}, and the loss has "
               "no class weights.")
    else:
        batches = "1 training batch" if c["batches"] == 1 else f"{c['batches']} training batches"
        counted = f"in the {c['n']} labels of the {batches} checked (the checker counts the batches it checks)"
        msg = (f"{class_label(big, names).capitalize()} occurs {max(present_counts)} times and "
               f"{class_label(small, names)} only {min(present_counts)} times ({ratio:.0f}x) {counted}, and the "
               "loss has no class weights.")
    recent = c.get("recent") or []
    said = sum(int(p[small]) for p, _ in recent)
    had = sum(int(k[small]) for _, k in recent)
    evidence = {"counts": judged, "counted_on": "training split" if whole else "checked batches",
                "labels_seen": sum(judged) if whole else c["n"]}
    if whole:
        evidence["checked_batch_counts"] = counts
    if names and len(names) == len(judged):
        evidence["counts_by_class"] = dict(zip(map(str, names), judged))
    return [_imbalance_finding(c["where"], msg, evidence, class_label(small, names), said, had, len(recent), steps)]


IMBALANCE_SETTLED_STEPS = 50  # the first tens of steps: where every model starts, predicting the common class


def imbalance_binary(b, steps: int = 0) -> list[Finding]:
    tot = b["pos"] + b["neg"]
    if tot < 100 or b["weighted"] or min(b["pos"], b["neg"]) == 0 or \
            max(b["pos"], b["neg"]) < 10 * min(b["pos"], b["neg"]):
        return []
    msg = (f"{b['pos']} positive vs {b['neg']} negative targets in the checked batches "
           f"({max(b['pos'], b['neg']) / min(b['pos'], b['neg']):.0f}x) and no pos_weight.")
    recent = b.get("recent") or []
    minority_pos = b["pos"] < b["neg"]
    said = sum(r[0] if minority_pos else r[1] for r in recent)
    had = sum(r[2] if minority_pos else r[3] for r in recent)
    return [_imbalance_finding(b["where"], msg, {"positives": b["pos"], "negatives": b["neg"]},
                               "the positive class" if minority_pos else "the negative class", said, had, len(recent),
                               steps)]


def _imbalance_finding(where, msg, evidence, rare: str, said: int, had: int, calls: int, steps: int) -> Finding:
    """A warning when the model is seen to ignore the rare class (it predicts it for none of its samples in the
    last checked batches: the failure class weights prevent) after IMBALANCE_SETTLED_STEPS steps; otherwise an info
    hint, since an unweighted loss on imbalanced data is often what the task wants, and in its first tens of steps
    any model predicts the common class (that is where training starts, not what it learned). The hint says what
    the model predicted, and when that was never, why it is not yet a warning: never "does predict ... 0 times"."""
    evidence = evidence | {"rare_class_predicted_recently": said, "rare_class_samples_recently": had}
    if calls >= 3 and had >= 5 and said == 0 and steps >= IMBALANCE_SETTLED_STEPS:
        return Finding("label-imbalance", where=where,
                       message=msg + f" In the last {calls} checked batches the model predicted {rare} for none of "
                                     f"its {had} samples: it has learned to ignore it.",
                       evidence=evidence)
    return Finding("label-imbalance", where=where, message=msg + _recent_predictions(rare, said, had, calls, steps),
                   evidence=evidence, severity="info",
                   maybe_fine="Training on the natural class frequencies without weights is a common and valid choice "
                              "when the metric follows them (accuracy, calibrated probabilities). Weights or "
                              "balanced sampling matter when the rare class is what counts (recall, F1, balanced "
                              "accuracy).")


def _recent_predictions(rare: str, said: int, had: int, calls: int, steps: int) -> str:
    """What the model predicted for the rare class in the last checked batches, as one sentence that holds."""
    if not calls:
        return ""
    batches = "batch" if calls == 1 else f"{calls} batches"
    held = f"{had} of its samples" if had != 1 else "1 of its samples"
    if said:
        times = "once" if said == 1 else f"{said} times"
        return f" In the last {batches} checked the model predicted {rare} {times} (they held {held})."
    why = (f"only {steps} optimizer steps were taken, where every model starts by predicting the common classes"
           if steps < IMBALANCE_SETTLED_STEPS else
           f"{held} is too few to tell" if had < 5 else f"{calls} checked batches are too few to tell")
    return (f" In the last {batches} checked the model did not predict {rare} (they held {held}); not yet a "
            f"warning: {why}.")
