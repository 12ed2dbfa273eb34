"""train-val-overlap: evaluation samples that the model was trained on.

Its own module because it is the data checks' largest family: rows hashed on the way into the model
(diagnose/model_inputs.py), the chance that a tiny sample space repeats by itself, and the index masks
of one input shared by training and evaluation (transductive learning) are all weighed here.
"""
from __future__ import annotations

from torchwise.diagnose.catalog import Finding


def _chance_match(w) -> float:
    """The chance that a fresh sample matches one of the training samples seen, from how often the first
    training rows repeated each other: N rows with D distinct ones come from a space of about M equally likely
    samples, D = M (1 - exp(-N / M)); the training set then covers len(train_hashes) / M of it. 0 for a data
    set whose samples do not repeat (any real one)."""
    import math
    probe = w.inputs.train_repeats
    n, r = probe["rows"], probe["repeats"]
    if n < 200 or r < 5:
        return 0.0
    d = n - r
    lo, hi = float(d), float(d) * 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid * (1 - math.exp(-n / mid)) < d:
            lo = mid
        else:
            hi = mid
    return min(1.0, len(w.inputs.train_hashes) / hi)


def _trained_before(g: dict, w) -> int:
    """The rows of an evaluation group that had been trained on when they were evaluated. Rows trained on only
    after their evaluation were collected, not validated: a policy's rollout run under no_grad, then the update
    on that rollout (PPO), or states scored before they enter a replay buffer."""
    if "trained_before" in g:
        return min(g["trained_before"], len(g["hashes"]))
    return sum(x in w.inputs.train_hashes for x in g["hashes"])


def train_val_overlap(w) -> list[Finding]:
    masked = _masked_verdicts(w)
    for v in masked.values():
        if v["overlap"]:  # judged on the rows of the output: whether or not the forward was hashed as an evaluation
            return [_masks_overlap_finding(v)]
    if not w.inputs.train_hashes or not w.inputs.eval_groups:
        return []
    fulls, partials, nones, on_train = [], [], [], []
    # a sample space so small that fresh samples repeat (8 values from {-1, 0, 1}): the share of the first
    # training rows that repeat an earlier one is the share of evaluation rows that match training by chance
    chance = _chance_match(w)
    train_passes = [p for p in w.loaders.passes if p.steps > 0]
    trained = {id(getattr(p.loader, "dataset", None)) for p in train_passes}
    train_loaders = {id(p.loader) for p in train_passes}
    for g in w.inputs.eval_groups:
        hs = g["hashes"]
        if len(hs) < 5 or g["step"] == 0:  # before any training step: a baseline, not validation
            continue
        if g.get("root") in w.objective.target_makers:
            continue  # no_grad forwards that make the targets of training (SAC's actor on s_next): not evaluation
        if g.get("loader") is not None and g["loader"] in train_loaders:
            # the very loader the steps came from (check_accuracy(train_loader, model)): a training accuracy the
            # script asks for by name, which misleads no one; another loader over the training set is the mistake
            continue
        if _masked_group(masked, hs, w.inputs.train_hashes):
            nones.append((g, 0, len(hs)))  # rows held out of the training loss were evaluated
            continue
        if g.get("dataset") is not None and g["dataset"] in trained:
            # accuracy over the training data itself: fine next to a real validation set, a mistake alone
            hit = _trained_before(g, w)
            if hit >= 0.9 * len(hs):
                on_train.append((g, hit, len(hs)))
            continue
        hit = _trained_before(g, w)
        frac = hit / len(hs)
        if frac <= 2 * chance + 0.02:
            nones.append((g, hit, len(hs)))  # no more than training samples repeat each other by chance
            continue
        (fulls if frac >= 0.9 else partials if (frac > 0.02 and hit >= 5) else nones).append((g, hit, len(hs)))
    bad = partials or (fulls if not nones else []) or (on_train if not (fulls or partials or nones) else [])
    if not bad:
        return []
    g, hit, n = bad[0]
    # a few identical rows are what a correct split of data with duplicate records gives (tables, repeated
    # measurements): a hint; a split that overlaps (indices that cross, a loader over the training set) shows more
    few = hit / n < FEW_DUPLICATES
    return [Finding("train-val-overlap", where=g["where"], severity="info" if few else "",
                    maybe_fine=_DUPLICATE_RECORDS.format(share=hit / n) if few else "",
                    message=f"{hit} of {n} samples evaluated here ({hit / n:.0%}) are identical to samples the model "
                            "was trained on.",
                    evidence={"overlapping": hit, "evaluated": n, "evaluations": len(w.inputs.eval_groups)})]


FEW_DUPLICATES = 0.10
_DUPLICATE_RECORDS = ("{share:.0%} of the evaluated rows equal training rows: data that holds duplicate records (common "
                      "in tables, or repeated measurements) gives that after a correct split, and new data will hold "
                      "such repeats too; if they are copies of one record, drop duplicates before splitting.")


# One input shared by index masks (transductive learning: one forward over the whole graph, the loss on
# out[idx_train], evaluation on out[idx_val]): the same input rows are in every forward by design, and
# overlap is a matter of the output rows each side uses (followed.shared_input_masks).

def _masked_verdicts(w) -> dict:
    """Per output row count N: did an evaluation use rows held out of the training loss's rows (a real
    validation mask)? If not, and some evaluated row set reaches beyond the training rows while
    overlapping them (idx_val that starts inside idx_train, or every node), that is overlap. Evaluating
    exactly the training rows (training accuracy) alone is not judged here."""
    from torchwise.diagnose.checks.followed import shared_input_masks
    verdicts = {}
    for n, rec in shared_input_masks(w).items():
        train, held_out, best = rec["train"], False, None
        for sets in rec["eval"].values():
            for rows in sets:
                hit = len(rows & train)
                if hit <= 0.02 * len(rows) or hit < 5:
                    held_out = True
                elif hit < len(rows) and (best is None or hit / len(rows) < best[0] / best[1]):
                    best = (hit, len(rows))
        if not held_out and best is None:
            continue
        verdicts[n] = {"overlap": not held_out, "rows": n, "train_rows": len(train), "where": rec.get("where"),
                       "overlapping": best[0] if best else 0, "evaluated": best[1] if best else 0}
    return verdicts


def _masked_group(masked: dict, hs: list, train_hashes: set) -> bool:
    """Whether an evaluation group whose input rows were all trained on is one input shared by masks,
    with a held-out mask evaluated."""
    for n, verdict in masked.items():
        if not verdict["overlap"] and n and len(hs) % n == 0 and sum(x in train_hashes for x in hs) >= 0.9 * len(hs):
            return True
    return False


def _masks_overlap_finding(v: dict) -> Finding:
    return Finding("train-val-overlap", where=v["where"],
                   message=f"Training and evaluation use rows of one forward over the same {v['rows']} inputs (index "
                           f"masks, as in transductive graph learning), and {v['overlapping']} of the "
                           f"{v['evaluated']} rows evaluated ({v['overlapping'] / v['evaluated']:.0%}) are among "
                           f"the {v['train_rows']} rows the training loss uses: the evaluation and training masks "
                           "overlap.",
                   evidence={"overlapping": v["overlapping"], "evaluated": v["evaluated"], "rows_per_forward": v["rows"],
                             "training_rows": v["train_rows"]})

