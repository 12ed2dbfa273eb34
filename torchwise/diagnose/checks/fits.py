"""Several separate fits in one run: a hyperparameter search, cross-validation folds, restarts.

Each fit trains a new model with a new optimizer, one after another (skorch inside GridSearchCV, a loop over
folds, a sweep written by hand). Read as one training, such a run looks broken: the loss climbs back at every
fit, and the search's poor settings (the reason a search exists) train badly. What harms the user is a problem
that no fit escapes, so the detectors that judge a run's course (the loss curve, dead units) judge each fit on
its own and warn only when every fit they could judge shows the harm.
"""
from __future__ import annotations

from torchwise.diagnose.checks.step_record import jstate, opt_param_ids

# the per-step record (jstate's "seq") stops growing here; past it the fits cannot be told apart
_SEQ_CAP = 100_000


def separate_fits(w) -> list[int] | None:
    """The optimizers (by id) in the order their fits ran, when the run holds two or more separate fits: each
    optimizer steps in one unbroken stretch and no two optimize a common parameter. None for one fit, or for
    optimizers that take turns (a GAN, an actor-critic) or share parameters (a new optimizer per stage or per
    epoch over the same model: one model's training, judged as one)."""
    seq = jstate(w)["seq"]
    if len(seq) >= _SEQ_CAP:
        return None
    order: list[int] = []
    for oid in seq:
        if order and order[-1] == oid:
            continue
        if oid in order:
            return None  # it came back after another one stepped: they take turns
        order.append(oid)
    if len(order) < 2:
        return None
    by_id = {id(o): o for o in w.optim_steps.optimizers}
    seen: set[int] = set()
    for oid in order:
        opt = by_id.get(oid)
        if opt is None:
            return None
        params = opt_param_ids(opt)
        if params & seen:
            return None
        seen |= params
    return order


def fit_at_step(w, order: list[int], step: int) -> int:
    """The index (in `order`) of the fit that the forward made before optimizer step number `step` belongs to:
    the fit of the optimizer that made that step, or the last fit when the run ended before it."""
    seq = jstate(w)["seq"]
    if step < len(seq):
        return order.index(seq[step])
    return len(order) - 1


def current_step(w) -> int:
    """How many optimizer steps the per-step record holds now (what fit_at_step takes)."""
    return len(jstate(w)["seq"])
