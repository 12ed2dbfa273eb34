"""output-classes-mismatch: a classification head with more outputs than the data has classes.

Its own module because the decision weighs two things apart from the loss checks around it: the odds that the
unused outputs are real classes not seen yet, and whether they are few enough to be a vocabulary's reserved symbols.
"""
from __future__ import annotations

import math

from torchwise.diagnose.catalog import Finding


def classes_mismatch(c, counts, k: int, C: int) -> Finding | None:
    """Labels 0..k-1 seen, C > k outputs: how likely is it that the C-k others are real classes that did not
    come up yet? Were each of them even a tenth as common as the rarest class seen (frequency q), the
    chance that none appeared among N labels is (1 - (C-k)*q)^N. It is not asked when the seen classes
    have a long tail (Good-Turing: the share of labels whose class was seen once estimates the unseen
    probability mass), nor when the largest label showed up only late (data ordered by label: the next
    classes may follow), nor when every target is class 0: a target made by the loss, not read from data
    (a contrastive loss, InfoNCE/NT-Xent/MoCo, puts the positive in column 0 of each row's logits)."""
    if k == 1:
        return None
    N = c["n"]
    seen = counts[:k]
    rarest = min(seen)
    singletons = sum(1 for x in seen if x == 1)
    if singletons / N >= 0.01 or c.get("max_label_batch", 0) > 0.5 * c["batches"]:
        return None
    q = rarest / (10 * N)
    mass = (C - k) * q
    log10_p = -math.inf if mass >= 1 else N * math.log1p(-mass) / math.log(10)
    if log10_p > -6:
        return None
    if log10_p == -math.inf:
        chance = (f"is nil: {C - k} classes that common would take up more than all the labels")
    else:
        chance = f"is about 1e{math.floor(log10_p)}" if log10_p > -300 else "is below 1e-300"
    few = C - k <= RESERVED_OUTPUTS and 4 * (C - k) <= C  # a blank, padding or delimiter symbol kept as an output
    return Finding("output-classes-mismatch", where=c["where"], severity="info" if few else "",
                   maybe_fine=_RESERVED.format(n=C - k, C=C) if few else "",
                   message=f"The model has {C} outputs, but over {N} labels only classes 0..{k - 1} occur ({k} "
                           f"classes, the rarest {rarest} times): {C - k} outputs never see an example. Were they "
                           f"real classes even a tenth as common as the rarest one seen, the chance that none of "
                           f"them appeared in {N} labels {chance}.",
                   evidence={"outputs": C, "classes_seen": k, "labels_seen": N, "rarest_class_count": rarest,
                             "log10_chance_extra_classes_unseen": None if log10_p == -math.inf else round(log10_p, 1)})


# at most this many outputs beyond the classes seen (and a quarter of the outputs) are an info hint: a vocabulary's
# reserved symbols (a blank, padding, a delimiter shown in the inputs and never asked for) are outputs of that kind,
# and an output that is never the target learns to stay low; a head sized for another data set has many more
RESERVED_OUTPUTS = 2
_RESERVED = ("{n} of the {C} outputs never being a target is what a vocabulary with reserved symbols gives (a blank, a "
             "padding or delimiter class that appears in the inputs only): the model learns to keep them low, and "
             "the other classes' predictions are unaffected. A head sized for another data set has many more unused "
             "outputs.")
