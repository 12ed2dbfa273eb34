"""Overfit-one-batch: a model/loss pair that works drives the loss on one small batch near zero.

    result = overfit_one_batch(model, inputs, targets, loss_fn)   # model is copied, not changed
    result["ok"], result["initial_loss"], result["final_loss"], result["steps"]
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import nn

from torchwise.diagnose.catalog import Finding


def overfit_one_batch(model: nn.Module, inputs: Any, targets: torch.Tensor, loss_fn: Callable, *,
                      steps: int = 300, lr: float = 1e-3, batch: int = 16, target_ratio: float = 0.05) -> dict:
    """Train a copy of `model` on the first `batch` samples only; report whether the loss nearly vanishes."""
    from torchwise.train.step.precision import choose_precision
    from torchwise.train.step.body import StepRunner

    m = copy.deepcopy(model)
    m.train()
    for mod in m.modules():  # dropout would stop a perfect fit on purpose; it is not what we test
        if isinstance(mod, nn.modules.dropout._DropoutNd):
            mod.p = 0.0
    args = tuple(a[:batch] if isinstance(a, torch.Tensor) and a.dim() > 0 else a for a in
                 (inputs if isinstance(inputs, tuple) else (inputs,)))
    y = targets[:batch]
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=lr)
    device = next((p.device for p in m.parameters()), torch.device("cpu"))
    # The Trainer's own step body (train/step/body.py); fp32, no clipping: the plain loop of the seed's check
    runner = StepRunner(m, opt, loss_fn, choose_precision("fp32", device), device, None)
    micro = [(args, y, int(y.shape[0]))]
    first = last = None
    with torch.enable_grad():
        for i in range(steps):
            # the loss before this step's update: a nan one skips the update, and the loop stops on it
            result = runner.run(micro, measure_norm=False)
            value = result.loss
            if first is None:
                first = value
            last = value
            # a skipped update (non-finite gradients) would repeat: nothing more to learn
            if value != value or value <= first * target_ratio * 0.2 or result.skipped:
                break
    ok = last == last and (last <= first * target_ratio or last < 1e-3)
    return {"ok": bool(ok), "initial_loss": first, "final_loss": last, "steps": i + 1, "batch": int(y.shape[0])}


def overfit_from_capture(capture: dict | None) -> dict:
    """Run the check on what a Watcher captured at the first training step of a script."""
    if not capture or "loss" not in capture or "model" not in capture:
        return {"ok": None, "skipped": "no model/loss call to replay (the loss is not a torch loss function)"}
    func, kwargs = capture["loss"]
    target = capture.get("target")
    if target is None:
        return {"ok": None, "skipped": "the targets of the first batch were not captured"}
    try:
        result = overfit_one_batch(capture["model"], capture["args"], target, lambda o, y: func(o, y, **kwargs))
    except Exception as exc:  # the script reshapes outputs between model and loss: cannot replay
        return {"ok": None, "skipped": f"could not replay the first batch ({type(exc).__name__}: {exc})"}
    if not result["ok"]:
        result["finding"] = Finding(
            "cannot-overfit-batch", where=capture.get("where"),
            message=f"Training a copy of the model on one batch of {result['batch']} samples for {result['steps']} "
                    f"Adam steps (lr 1e-3) only took the loss from {result['initial_loss']:.4g} to "
                    f"{result['final_loss']:.4g}.",
            evidence={k: result[k] for k in ("initial_loss", "final_loss", "steps", "batch")})
    return result
