"""symmetric-init: hidden layers whose units all start equal (and so get equal updates and stay equal).

The evidence is gathered in deep optimizer steps (optim.py calls inspect_symmetry before each one) and
decided in model.py's decide; where a parameter got its start values comes from watch's function mode.
"""
from __future__ import annotations

import weakref

import torch
from torch import nn

from torchwise.diagnose.catalog import Finding


SYM_LAYERS = (nn.Linear, nn.modules.conv._ConvNd)


def note_param_write(w, func, param) -> None:
    """A function called on a parameter before the first optimizer step (function_mode.FunctionMode): where an
    in-place write (nn.init.*, zero_, fill_, ...) happens is where the parameter got its start values."""
    name = getattr(func, "__name__", "") or ""
    if (name.endswith("_") and not name.endswith("__")) or getattr(func, "__module__", None) == "torch.nn.init":
        from torchwise.diagnose.user_code import user_where
        w.param_init_where[id(param)] = user_where()


def _units(m) -> torch.Tensor:
    """One row per output unit: its weights, then its bias."""
    rows = m.weight.detach().flatten(1).float()
    if m.bias is not None:
        rows = torch.cat([rows, m.bias.detach().float().unsqueeze(1)], 1)
    return rows


def _all_units_equal(m) -> bool:
    # equal up to rounding: units that get the same updates can differ in the last bits (different
    # kernels for different output columns), while random units differ at the scale of the weights
    with torch.no_grad():
        rows = _units(m)
        if float((rows[1] - rows[0]).abs().max()) > 1e-4 * float(rows[:2].abs().max()):
            return False  # the common case, for the cost of two rows
        return float((rows - rows[:1]).abs().max()) <= 1e-4 * float(rows.abs().max())


def inspect_symmetry(w) -> None:
    """Deep optimizer steps: hidden layers whose units are all equal, and whether they still are.

    A layer is looked at once, at the first deep step after its weights are in an optimizer (normally
    step 0, before any update); the model's last layer is left out (a zero-initialized head is fine:
    the targets make its units different at the first step)."""
    sym = w.symmetry
    for rid, info in w.models.roots.items():
        if rid in sym["done"]:
            continue
        # (a transposed convolution's units lie along dim 1 of its weight: left out)
        layers = [m for m in info.module.modules() if isinstance(m, SYM_LAYERS) and not getattr(m, "transposed", False)]
        last = w.last_layer.get(rid, id(layers[-1]) if layers else None)
        done = True
        for m in layers:
            if id(m) in sym["scanned"] or id(m) == last or m.weight.shape[0] < 2 or not m.weight.requires_grad:
                continue
            if id(m.weight) not in w.optim_steps.opt_param_ids or m.weight.grad is None:
                done = False  # its optimizer has not stepped yet, or it is not used (yet): no update can break it
                continue
            sym["scanned"].add(id(m))
            if _all_units_equal(m):
                sym["cands"][id(m)] = {"ref": weakref.ref(m), "name": w.models.module_name(m), "units": m.weight.shape[0],
                                       "value": float(m.weight.detach().flatten()[0]), "start": w.steps,
                                       "last": w.steps, "broken": False,
                                       "where": w.param_init_where.get(id(m.weight)) or w.optim_steps.step_where}
        if done:
            sym["done"].add(rid)
    _recheck_symmetry(w)


def _recheck_symmetry(w) -> None:
    for rec in w.symmetry["cands"].values():
        m = rec["ref"]()
        if m is not None and not rec["broken"] and w.steps > rec["last"]:
            if _all_units_equal(m):
                rec["last"] = w.steps
            else:
                rec["broken"] = True


def decide_symmetry(w) -> list[Finding]:
    # once more now: driven by the Trainer, deep steps after the first few are rare; the
    # candidates are few (none in a randomly initialized model), so this costs nothing
    _recheck_symmetry(w)
    stuck = [r for r in w.symmetry["cands"].values() if not r["broken"] and r["last"] - r["start"] >= 3]
    if not stuck:
        return []
    r = stuck[0]
    others = f" The same holds for {', '.join(x['name'] for x in stuck[1:4])}." if len(stuck) > 1 else ""
    return [Finding("symmetric-init", where=r["where"],
                    message=f"All {r['units']} units of {r['name']} had the same weights and bias at step "
                            f"{r['start']} (first weight {r['value']:.4g}) and were still identical "
                            f"{r['last'] - r['start']} optimizer steps later: the layer works as one unit.{others}",
                    evidence={"layer": r["name"], "units": r["units"], "steps_still_identical": r["last"] - r["start"],
                              "layers": len(stuck)})]
