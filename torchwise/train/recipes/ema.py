"""An exponential moving average (EMA) of a model's weights: evaluated, saved and exported in place of them.

    ema = EMA(model, decay=0.999)
    ...  optimizer.step(); ema.update(model)        # after every optimizer step that changed the weights
    with ema.applied(model):                        # the EMA weights in the model, the live ones back after
        metrics = evaluate(model)
    ema.copy_to(export_model)                       # for good: the final weights, an export

What is averaged. The floating-point parameters, in an fp32 shadow kept on each parameter's own device
(fp16 / bf16 weights are averaged in fp32: at decay 0.999 one step moves the shadow by 0.1% of the
difference, below what bf16 can even represent). Buffers are not averaged but copied from the live model
at each update: BatchNorm's running mean and variance already are moving averages of the live model's
activations, and integer buffers (num_batches_tracked, a step counter) have no meaningful average.

The update, with n the number of updates done before this one:

    d = min(decay, (1 + n) / (10 + n))      (warmup=True, the default)   or   d = decay
    shadow = shadow * d + param * (1 - d)

The warm-up (TensorFlow's ExponentialMovingAverage with num_updates) makes d start at 0.1 and grow
towards `decay`, so early on the shadow follows the weights closely instead of staying near the random
initialisation for thousands of steps: with decay=0.999 the plain average needs ~5,000 steps before the
initial weights weigh less than 1%; with the warm-up d reaches 0.999 after 8,991 updates, and a short run
still ends with a useful average. `decay_at(n)` gives the d of update n.

Wrappers: the model may come wrapped by DDP / DataParallel (`.module`) or torch.compile; the names of the
shadow are those of the user's model inside (torchwise.weights.unwrap_model), so a compiled run's EMA
loads into an uncompiled model. Under DDP every rank sees the same weights and keeps the same EMA, with no
communication. The state (`state_dict()`) is tensors and an int: torch.load(weights_only=True) reads it,
and loading it back gives the shadow bit for bit (a resumed run continues the same average).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from torchwise.errors import CheckpointError, TorchwiseError
from torchwise.weights import unwrap_model

# torch._foreach_* run one kernel per group of tensors instead of one per tensor (hundreds of launches
# per step on a GPU); every torch this package supports has them, the per-tensor loop is the fallback.
HAS_FOREACH = hasattr(torch, "_foreach_mul_") and hasattr(torch, "_foreach_add_")


def _averaged(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The (name, parameter) pairs the EMA averages: the floating-point parameters of the user's model."""
    return [(name, p) for name, p in unwrap_model(module).named_parameters() if p.is_floating_point()]


def _copied(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """What is copied from the live model, not averaged: every buffer, and any non-floating parameter."""
    model = unwrap_model(module)
    pairs = [(name, b) for name, b in model.named_buffers()]
    return pairs + [(name, p) for name, p in model.named_parameters() if not p.is_floating_point()]


class EMA:
    """EMA(model, decay=0.999, warmup=True, foreach=None): an fp32 shadow of model's floating parameters.

    foreach: None uses torch._foreach ops where torch has them; False forces the per-tensor loop (the
    same arithmetic, one tensor at a time)."""

    def __init__(self, model: nn.Module, decay: float = 0.999, *, warmup: bool = True,
                 foreach: bool | None = None):
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 < decay < 1.0:
            raise TorchwiseError("The EMA decay must be a number in (0, 1).", values={"decay": decay},
                                 fix="A usual value is 0.999 (an average over about the last 1,000 steps).")
        self.decay = float(decay)
        self.warmup = bool(warmup)
        self.foreach = HAS_FOREACH if foreach is None else bool(foreach) and HAS_FOREACH
        self.updates = 0
        with torch.no_grad():
            self.shadow = {name: p.detach().to(torch.float32, copy=True) for name, p in _averaged(model)}
            self.buffers = {name: b.detach().clone() for name, b in _copied(model)}
        if not self.shadow:
            raise TorchwiseError("The model has no floating-point parameters to average.",
                                 values={"model": type(unwrap_model(model)).__name__},
                                 fix="Build the EMA from the model being trained (after it has its layers).")

    # ------------------------------------------------------------------ the average
    def decay_at(self, n: int) -> float:
        """The decay of update number n (0 for the first): min(decay, (1+n)/(10+n)) with the warm-up."""
        return min(self.decay, (1.0 + n) / (10.0 + n)) if self.warmup else self.decay

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the shadow towards the model's current weights; call once after each optimizer step."""
        live = self._matching(_averaged(model), self.shadow, "parameters")
        d = self.decay_at(self.updates)
        shadows = [_on_device(self.shadow, name, p) for name, p in live]
        params = [p.detach().float() for _, p in live]  # no copy for fp32 weights
        for group_s, group_p in _by_device(shadows, params):
            if self.foreach:
                torch._foreach_mul_(group_s, d)
                torch._foreach_add_(group_s, group_p, alpha=1.0 - d)
            else:
                for s, p in zip(group_s, group_p):
                    s.mul_(d).add_(p, alpha=1.0 - d)
        for name, b in self._matching(_copied(model), self.buffers, "buffers"):
            _on_device(self.buffers, name, b).copy_(b)
        self.updates += 1

    # ------------------------------------------------------------------ using the average
    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[nn.Module]:
        """The EMA weights inside `model` for the block (evaluation, saving, export); the live weights and
        buffers are put back afterwards bit for bit, also when the block raises. The tensors are written in
        place, so the model's parameters stay the same objects (an optimizer or a compiled graph holding
        them is undisturbed)."""
        with torch.no_grad():
            live = [t for _, t in self._matching(_averaged(model), self.shadow, "parameters")]
            live += [t for _, t in self._matching(_copied(model), self.buffers, "buffers")]
            saved = [t.detach().clone() for t in live]
        try:
            self.copy_to(model)
            yield model
        finally:
            with torch.no_grad():
                for t, keep in zip(live, saved):
                    t.copy_(keep)

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """Write the EMA weights (cast to each parameter's dtype) and the copied buffers into `model`."""
        for name, p in self._matching(_averaged(model), self.shadow, "parameters"):
            p.copy_(self.shadow[name])
        for name, b in self._matching(_copied(model), self.buffers, "buffers"):
            b.copy_(self.buffers[name])

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """{'updates': n, 'shadow': {name: fp32 tensor}, 'buffers': {name: tensor}}: what resumes the average
        exactly (the decay and warm-up are settings, given again to the constructor). Like torch's own
        state_dicts it holds the EMA's tensors themselves: save it (torch.save copies them), or clone it."""
        return {"updates": self.updates, "shadow": dict(self.shadow), "buffers": dict(self.buffers)}

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state_dict() (also one read with map_location='cpu': each tensor goes where its
        shadow lives)."""
        if not isinstance(state, Mapping) or not {"updates", "shadow", "buffers"} <= set(state):
            raise CheckpointError("This is not an EMA state.", values={"keys": sorted(map(str, state))
                                                                       if isinstance(state, Mapping) else type(state).__name__},
                                  fix="Pass what EMA.state_dict() returned (a checkpoint's 'ema' entry).")
        for kind, mine in (("shadow", self.shadow), ("buffers", self.buffers)):
            theirs = state[kind]
            _same_names(sorted(mine), sorted(theirs), f"EMA {kind}")
            for name, tensor in theirs.items():
                if tuple(tensor.shape) != tuple(mine[name].shape):
                    raise CheckpointError(f"An EMA {kind} tensor has another shape than the model's.",
                                          values={"name": name, "in the state": tuple(tensor.shape),
                                                  "in the model": tuple(mine[name].shape)},
                                          fix="Load the EMA of the same architecture.")
                mine[name].copy_(tensor)
        self.updates = int(state["updates"])

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _matching(pairs: list[tuple[str, torch.Tensor]], mine: Mapping[str, torch.Tensor],
                  kind: str) -> list[tuple[str, torch.Tensor]]:
        """`pairs` when their names are the EMA's (same model); a clear error otherwise."""
        names = [name for name, _ in pairs]
        if len(names) != len(mine) or any(name not in mine for name in names):
            _same_names(sorted(mine), sorted(names), f"model's {kind}")
        return pairs


def _same_names(expected: list[str], got: list[str], what: str) -> None:
    if expected == got:
        return
    missing, unexpected = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    raise CheckpointError(f"The {what} do not match the EMA's: not the model it was built from.",
                          values={"missing": missing[:10], "unexpected": unexpected[:10],
                                  "EMA has": len(expected), "given": len(got)},
                          fix="Build the EMA from the model you train (EMA(model, ...)) and pass that same model "
                              "(wrapped or not) to update(), applied() and copy_to().")


def _on_device(store: dict[str, torch.Tensor], name: str, live: torch.Tensor) -> torch.Tensor:
    """store[name], moved once to the live tensor's device when the model moved after the EMA was built
    (e.g. EMA built on the CPU, model then sent to the GPU): the average lives where the weights do."""
    kept = store[name]
    if kept.device != live.device:
        kept = store[name] = kept.to(live.device)
    return kept


def _by_device(shadows: list[torch.Tensor], params: list[torch.Tensor]) -> Iterator[tuple[list, list]]:
    """The (shadow, param) lists split by device: a foreach call takes the tensors of one device."""
    groups: dict[torch.device, tuple[list, list]] = {}
    for s, p in zip(shadows, params):
        group = groups.setdefault(s.device, ([], []))
        group[0].append(s)
        group[1].append(p)
    yield from groups.values()
