"""Detectors, one module per family. Each `decide(watcher)` turns the watcher's evidence into findings.

    losses.py  what goes into the loss: softmax/sigmoid before it, labels, classes, the loss for the task
    optim.py   optimizer steps: zero_grad, learning rate, exploding/vanishing gradients, backward/step under autocast
    model.py   modes, registration, gradient flow, dead ReLU, NaNs, the loss curve, retained graphs
    data.py    loaders and batches: validation augmentation, overlap, shuffling, samplers, speed, BatchNorm,
               input shapes that change under cudnn.benchmark
    calls.py   library calls (diagnose/probes.py): LR schedulers, gradient clipping, GradScaler, DDP sampling
"""
from __future__ import annotations

from torchwise.diagnose.catalog import CATALOG, Finding

_ORDER = list(CATALOG)


def decide_all(w) -> list[Finding]:
    from torchwise.diagnose.checks import calls, data, losses, model, optim

    ls = optim.loss_summary(w)
    found: list[Finding] = []
    found += losses.decide(w)
    found += optim.decide(w, ls)
    found += model.decide(w, ls)
    found += data.decide(w)
    found += calls.decide(w)
    found += getattr(w, "extra_findings", [])
    found = _drop_consequences(found)
    seen, unique = set(), []
    for f in found:
        key = (f.id, f.where)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    unique.sort(key=lambda f: (f.severity != "error", _ORDER.index(f.id)))
    return unique


# A finding that explains others: report the cause, not its symptoms.
_CONSEQUENCES = {
    "nonfinite-input": {"nonfinite-loss", "exploding-gradients", "dead-relu", "lr-too-high", "loss-not-decreasing",
                        "vanishing-gradients", "lr-too-low"},
    "missing-zero-grad": {"lr-too-high", "exploding-gradients", "dead-relu", "loss-not-decreasing", "nonfinite-loss"},
    "lr-too-high": {"exploding-gradients", "dead-relu", "loss-not-decreasing", "nonfinite-loss"},
    "unnormalized-input": {"exploding-gradients", "dead-relu", "loss-not-decreasing", "lr-too-high"},
    "exploding-gradients": {"loss-not-decreasing", "dead-relu", "nonfinite-loss"},
    "dead-relu": {"loss-not-decreasing", "lr-too-low", "no-gradient-flow"},
    # clipped at 1/65536 of their size, updates look like a tiny learning rate
    "clip-scaled-gradients": {"lr-too-low", "loss-not-decreasing", "vanishing-gradients"},
    # an LR collapsed within the first epoch
    "scheduler-stepped-per-batch": {"lr-too-low", "loss-not-decreasing"},
}
_EXPLAINS_FLAT_LOSS = {"softmax-before-loss", "double-sigmoid", "wrong-loss-for-task", "params-not-in-optimizer",
                       "unregistered-submodules", "no-gradient-flow", "lr-too-low", "vanishing-gradients",
                       "no-shuffle", "train-mode-missing", "labels-not-zero-based", "output-classes-mismatch",
                       "nonfinite-loss", "symmetric-init", "scheduler-stepped-per-batch", "clip-scaled-gradients"}


def _drop_consequences(found: list[Finding]) -> list[Finding]:
    ids = {f.id for f in found}
    for cause, effects in _CONSEQUENCES.items():  # in priority order: a dropped finding explains nothing
        if cause in ids:
            ids -= effects
    if ids & _EXPLAINS_FLAT_LOSS:
        ids.discard("loss-not-decreasing")
    return [f for f in found if f.id in ids]
