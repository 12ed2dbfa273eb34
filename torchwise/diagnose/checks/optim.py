"""Optimizer-level checks (deep steps): gradients, update sizes, parameters the optimizer misses."""
from __future__ import annotations

import math

import torch

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks.accumulation import decide_accumulation
from torchwise.diagnose.checks.step_record import SHORT_RUN_VALUES, TYPICAL_LR, adversarial_pair, jstate, median, opt_kind
from torchwise.diagnose.checks.symmetry import inspect_symmetry
from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES

_SNAP_LIMIT = 20_000_000  # elements copied to measure the update size; larger models: the biggest tensors


def _params(opt) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"] if p.requires_grad]


def inspect_step_pre(w, opt) -> None:
    params = _params(opt)
    if not params:
        return
    with_grad = [p for p in params if p.grad is not None]
    missing = [p for p in params if p.grad is None]
    if missing:
        w.optim_steps.no_grad_events.append({"step": w.steps, "missing": len(missing), "total": len(params),
                                 "ids": {id(p) for p in missing},
                                 "backward_since_step": w.optim_steps.backward_since_step})
    else:
        w.optim_steps.no_grad_events.append({"step": w.steps, "missing": 0, "total": len(params), "ids": set(),
                                 "backward_since_step": w.optim_steps.backward_since_step})
    # parameters of the watched models that got a gradient but are in no optimizer
    for info in w.models.roots.values():
        for name, p in info.module.named_parameters():
            if p.requires_grad and p.grad is not None and id(p) not in w.optim_steps.opt_param_ids:
                w.optim_steps.not_in_opt.setdefault(id(p), (info.label + "." + name, w.optim_steps.step_where))
    gn_l: list[float] = []
    if with_grad:
        gn = torch.stack(torch._foreach_norm([p.grad for p in with_grad])).float()
        wn = torch.stack(torch._foreach_norm([p.detach() for p in with_grad])).float()
        gn_l, wn_l = torch.stack([gn, wn]).tolist()  # one device sync for all the numbers
        total = math.sqrt(sum(g * g for g in gn_l))
        rec = {"step": w.steps, "total_norm": total, "finite": math.isfinite(total)}
        # zero-initialised tensors (a common choice for last layers) have no meaningful ratio yet
        # embedding tables are excluded: only the rows of the tokens in the batch get a gradient
        sparse = _embedding_ids(w)
        rel = [gn_l[i] / wn_l[i] for i, p in enumerate(with_grad)
               if p.dim() >= 2 and wn_l[i] > 1e-6 and id(p) not in sparse]
        if rel:
            rec.update(max_rel=max(rel), first_rel=rel[0], last_rel=rel[-1], n_mats=len(rel))
        w.optim_steps.grad_records.append(rec)
        # parameters that have a gradient now: it must be cleared before the optimizer uses them again
        order = sorted((i for i in range(len(with_grad)) if math.isfinite(gn_l[i]) and gn_l[i] > 0),
                       key=lambda i: -gn_l[i])
        w.optim_steps.zero_sample = [with_grad[i] for i in order[:3]]
    # snapshot for the update size (only tensors that move: frozen or gradient-less ones would dilute it)
    budget, snap = _SNAP_LIMIT, []
    moving = [p for i, p in enumerate(with_grad) if gn_l[i] > 0]
    for p in sorted(moving, key=lambda t: -t.numel()):
        if p.numel() <= budget:
            snap.append((p, p.detach().clone()))
            budget -= p.numel()
    w.optim_steps.snap = snap
    inspect_symmetry(w)


def _embedding_ids(w) -> set[int]:
    key = tuple(sorted(w.models.roots))
    cached = getattr(w, "embedding_cache", None)
    if cached is None or cached[0] != key:
        from torch import nn
        ids = {id(m.weight) for r in w.models.roots.values() for m in r.module.modules()
               if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
        w.embedding_cache = cached = (key, ids)
    return cached[1]


def inspect_step_post(w, opt) -> None:
    snap = w.optim_steps.snap
    if not snap:
        return
    with torch.no_grad():
        new = [p.detach() for p, _ in snap]
        old = [o for _, o in snap]
        diff = torch._foreach_sub(new, old)
        dn = torch.stack(torch._foreach_norm(diff)).float().norm()
        on = torch.stack(torch._foreach_norm(old)).float().norm()
        ratio = float(dn / on.clamp_min(1e-12))
    w.optim_steps.update_ratios.append((w.steps, ratio))
    # per optimizer too: what an update size means depends on the optimizer's kind and its lr
    j = jstate(w)
    j["upd"].setdefault(id(opt), []).append(ratio)
    lrs = [g["lr"] for g in opt.param_groups if isinstance(g.get("lr"), (int, float))]
    j["opt_info"][id(opt)] = {"kind": opt_kind(opt), "lr": max(lrs) if lrs else None, "name": type(opt).__name__}


# --------------------------------------------------------------------------- learning rate, gradients

def _lr_low_evidence(w) -> dict | None:
    """An optimizer whose updates are tiny because of its lr: tiny now, and healthy at a usual lr for its
    kind. Tiny updates at a usual lr come from tiny gradients (a squashing softmax, vanishing gradients):
    not the lr's fault, and lr-too-low would send the user the wrong way."""
    j = jstate(w)
    best = None
    for oid, rs in j["upd"].items():
        rs = [r for r in rs if math.isfinite(r)]
        info = j["opt_info"].get(oid) or {}
        if len(rs) < 3 or not info.get("lr") or w.objective.kind(oid) not in FIXED_OBJECTIVES:
            continue  # (a flat loss is no harm where the objective is not supposed to fall)
        r = median(rs)
        if r >= 1e-4:
            continue
        typical = TYPICAL_LR.get(info["kind"])
        if typical is None:  # an optimizer we do not know: the size alone, as before
            at_typical, typical = float("nan"), float("nan")
        else:
            if info["lr"] >= typical:
                continue
            at_typical = r * typical / info["lr"]
            if at_typical < 1e-3:
                continue
        rec = {"ratio": r, "lr": info["lr"], "optimizer": info["name"], "typical": typical,
               "at_typical": at_typical, "steps": len(rs)}
        best = best or rec
    return best


def _flat_for_another_reason(w) -> bool:
    """Evidence already collected of a cause that flattens the loss on its own (losses.py's hits)."""
    h = w.hits
    for key in ("softmax-before-loss", "double-sigmoid", "double-sigmoid~bce", "wrong-loss-for-task", "labels-not-zero-based",
                "clip-scaled-gradients", "output-classes-mismatch"):
        n, checks = h.get(key, 0), h.get(key + ":n", 0)
        if n and (not checks or n >= 0.5 * checks):
            return True
    return False


def _exploding_evidence(w, ls: dict, recs: list, *, diverged: bool, went_bad: bool) -> dict:
    """Gradient size judged against the loss's own scale (a loss summed over a batch has gradients
    batch-size times those of its mean), and a symptom that they do harm."""
    loss_at: dict[int, float] = {}
    for step, v in zip(w.loss_watch.loss_steps, ls.get("vals") or []):
        if math.isfinite(v):
            loss_at[step] = max(loss_at.get(step, 0.0), abs(v))
    per_loss = [r["max_rel"] / max(1.0, loss_at.get(r["step"], 1.0)) for r in recs]
    med_rel = median([r["max_rel"] for r in recs])
    peak = max(r["max_rel"] for r in recs)
    med_pl, peak_pl = median(per_loss), max(per_loss)
    peak_total = max(r["total_norm"] for r in recs)
    peak_total_pl = max(r["total_norm"] / max(1.0, loss_at.get(r["step"], 1.0)) for r in recs)
    nonfinite = sum(not r["finite"] for r in w.optim_steps.grad_records)
    big = med_pl > 50 or (peak_pl > 1e3 and peak_total_pl > 1e2)
    ratios = [r for _, r in w.optim_steps.update_ratios if math.isfinite(r)]
    symptom = ""
    if nonfinite and ls["first_bad_step"] is None:
        symptom, big = f"{nonfinite} checked step(s) had non-finite gradients", True
    elif went_bad:
        symptom = f"the loss became non-finite at step {ls['first_bad_step']}"
    elif diverged:
        symptom = f"the loss rose from {ls['initial']:.4g} to {ls['last']:.4g}"
    elif ratios and max(ratios) > 1.0:
        symptom = f"one update changed the weights by {max(ratios):.3g}x their size"
    return {"big": big, "symptom": symptom, "rel": med_rel if med_pl > 50 else peak,
            "rel_per_loss": med_pl if med_pl > 50 else peak_pl, "which": "median" if med_pl > 50 else "peak",
            "peak_total": peak_total, "nonfinite": nonfinite}


def undecided(w) -> dict[str, str]:
    """Detectors of this module that could not judge this run, and why (for the coverage report)."""
    j = jstate(w)
    out = dict(j["undecided"])
    if not w.optim_steps.update_ratios and w.optim_steps.optimizers:
        for key in ("lr-too-high", "lr-too-low"):
            out.setdefault(key, "no optimizer step was measured (no deep step with gradients)")
    ex = j.get("exploding")
    if ex and ex["big"] and not ex["symptom"]:
        out["exploding-gradients"] = (
            f"gradients reach {ex['rel']:.3g}x the weights' norm ({ex['rel_per_loss']:.3g}x per unit of loss), "
            "but the loss does not rise, nothing went non-finite and the updates stay small: no sign they do harm")
    return out


def decide(w, ls: dict) -> list[Finding]:
    """The optimizer family's findings: one function per mistake, called in the order they are listed (the
    learning-rate verdicts first: exploding-gradients is not reported where lr-too-high explains it)."""
    jstate(w)["undecided"] = {}
    out = _missing_zero_grad(w)
    ev = _update_evidence(w, ls)
    high = _lr_too_high(w, ls, ev)
    low = _lr_too_low(w, ls, ev)
    _hints_without_harm(ls, ev, high, low)
    recs = _gradient_records(w, ls)
    exploding = _exploding_gradients(w, ls, recs, ev, lr_high=any(f.counts for f in high))
    vanishing = _vanishing_gradients(w, recs, ev["kinds"])
    out += high + low + exploding + vanishing
    # (a hint explains nothing: the flags say which verdicts count)
    w.lr_flags = {"high": any(f.counts for f in high), "low": any(f.counts for f in low), "exploding": bool(exploding)}
    out.extend(decide_accumulation(w))
    out.extend(_decide_autocast(w))
    return out


def _hints_without_harm(ls: dict, ev: dict, high: list[Finding], low: list[Finding]) -> None:
    """Update-size verdicts need the harm in this run: a loss that diverges or goes non-finite (lr-too-high), or
    one that stays flat over a run long enough to tell (SHORT_RUN_VALUES) and does not go down. Without it each is
    an info hint saying why it may be fine."""
    n, first, last = ls.get("n", 0), ls.get("first"), ls.get("last")
    fell = first is not None and last is not None and (last < 0.98 * first or ls.get("learned"))
    short = n < SHORT_RUN_VALUES
    for f in high:
        if not (ev["diverged"] or ev["went_bad"]) and (short or fell):
            f.severity, f.maybe_fine = "info", _NO_HARM_HIGH.format(n=n) if short else _LOSS_FELL
    for f in low:
        if short:
            f.severity, f.maybe_fine = "info", _SHORT.format(n=n)


_SHORT = ("The whole run made {n} loss values: a slow start (a fine-tuning learning rate, a warm-up, plain SGD at a "
          "small rate) looks the same over that few steps; a longer run tells them apart.")
_NO_HARM_HIGH = ("The whole run made {n} loss values and the loss neither diverged nor became non-finite: large "
                 "early updates (a warm-up, a perturbation step such as SAM's, weights that start near zero) need not "
                 "harm; a longer run tells.")
_LOSS_FELL = "The loss goes down in this run, so the update sizes are not holding training back."


def _missing_zero_grad(w) -> list[Finding]:
    """missing-zero-grad: backward() adding into the previous step's gradients, at (nearly) every checked step
    of one optimizer (a loop that zeroes at the wrong place does it every time; one that forgets once in a
    while is not this mistake)."""
    for key, (checks, stale, where) in w.optim_steps.zero_grad_by_opt.items():
        if stale >= 2 and stale >= 0.8 * checks:
            site = key[1] if isinstance(key, tuple) and key[1] else None
            at = f" (its step() at {site})" if site else ""
            return [Finding("missing-zero-grad", where=where,
                            message=f"At {stale} of {checks} checked steps of one optimizer{at}, backward() started "
                                    "while the gradients of its previous step were still there (never zeroed).",
                            evidence={"steps_with_stale_gradients": stale, "steps_checked": checks})]
    return []


def _update_evidence(w, ls: dict) -> dict:
    """What the learning-rate verdicts weigh: the update-to-weight ratios (median, early steps), whether the
    loss diverged or went non-finite after rising, and the kinds of optimizer."""
    adv = adversarial_pair(w)
    ratios = [r for _, r in w.optim_steps.update_ratios if math.isfinite(r)]
    med = median(ratios) if ratios else None
    early = ratios[: max(1, len(ratios) // 3)]
    early_med = median(early) if early else None
    diverged = False
    # a rising loss is a symptom only of a fixed objective: a GAN's, a policy gradient's or a TD error's loss
    # rises by design
    if ls.get("first") is not None and ls["last"] > 1.5 * ls["initial"] and adv is None and w.objective.all_fixed():
        diverged = True
    went_bad = ls["first_bad"] is not None and ls["first_bad"] >= 3 and ls.get("max") is not None \
        and ls.get("first") is not None and ls["max"] > 3 * ls["first"]
    kinds = {i["kind"] for i in jstate(w)["opt_info"].values()}
    return {"ratios": ratios, "med": med, "early_med": early_med, "diverged": diverged, "went_bad": went_bad,
            "kinds": kinds}


def _lr_too_high(w, ls: dict, ev: dict) -> list[Finding]:
    """lr-too-high: large updates from the start, or moderate ones with a loss that diverges."""
    out: list[Finding] = []
    med, early_med, kinds, diverged, went_bad = ev["med"], ev["early_med"], ev["kinds"], ev["diverged"], ev["went_bad"]
    # Adam & co. move each weight by about lr per step whatever the gradient's size: an update of 1% of
    # the weights is their normal working point at lr=1e-3; with SGD it follows the gradient
    high_with_symptom = 0.05 if kinds == {"adaptive"} else 0.01
    if med is not None and (early_med > 1.0 or ((diverged or went_bad) and early_med > high_with_symptom)):
        lrs = sorted({g["lr"] for o in w.optim_steps.optimizers for g in o.param_groups if isinstance(g.get("lr"), (int, float))})
        desc = (f"the loss went from {ls['initial']:.4g} (first step) to {ls['last']:.4g} (mean of the last quarter)"
                if ls.get("last") is not None and not went_bad
                else f"the loss rose to {ls.get('max', float('nan')):.4g} and became non-finite at step {ls['first_bad_step']}")
        out.append(Finding("lr-too-high", where=w.optim_steps.step_where,
                           message=f"Each optimizer step changes the weights by {early_med:.2%} of their size "
                                   f"(median, early steps), and {desc}. Learning rate: {lrs}.",
                           evidence={"update_to_weight_ratio": early_med, "lr": lrs, "loss_first": ls.get("first"),
                                     "loss_last": ls.get("last")}))
    return out


def _lr_too_low(w, ls: dict, ev: dict) -> list[Finding]:
    """lr-too-low: tiny updates for the optimizer and a loss that stays where it started."""
    out: list[Finding] = []
    med, ratios = ev["med"], ev["ratios"]
    low = _lr_low_evidence(w) if med is not None and len(ratios) >= 3 else None
    if low is not None and ls.get("first") is not None and ls["last"] > 0.98 * ls["first"] and not ls["learned"] \
            and not _flat_for_another_reason(w):
        out.append(Finding("lr-too-low", where=w.optim_steps.step_where,
                           message=f"Each optimizer step changes the weights by only {low['ratio']:.2e} of their size "
                                   f"(median over {low['steps']} steps of {low['optimizer']}, lr={low['lr']:.3g}; at a "
                                   f"usual lr for it ({low['typical']:g}) that would be about {low['at_typical']:.1e}) "
                                   f"and the loss stays at {ls['first']:.4g} -> {ls['last']:.4g}.",
                           evidence={"update_to_weight_ratio": low["ratio"], "lr": low["lr"],
                                     "optimizer": low["optimizer"], "ratio_at_usual_lr": low["at_typical"]}))
    return out


def _gradient_records(w, ls: dict) -> list[dict]:
    """The deep steps' gradient records before the loss went non-finite, with a finite largest ratio."""
    bad_step = ls["first_bad_step"]
    return [r for r in w.optim_steps.grad_records if "max_rel" in r and (bad_step is None or r["step"] < bad_step)
            and math.isfinite(r["max_rel"])]


def _exploding_gradients(w, ls: dict, recs: list[dict], ev: dict, *, lr_high: bool) -> list[Finding]:
    """exploding-gradients: gradients large against their weights, with a symptom (unless lr-too-high)."""
    if not recs:
        return []
    out: list[Finding] = []
    j, diverged, went_bad = jstate(w), ev["diverged"], ev["went_bad"]
    ex = _exploding_evidence(w, ls, recs, diverged=diverged, went_bad=went_bad)
    j["exploding"] = ex
    if ex["big"] and ex["symptom"] and not lr_high:
        out.append(Finding("exploding-gradients", where=w.optim_steps.step_where,
                           message=f"Gradient norms reach {ex['rel']:.3g}x the norm of their weights "
                                   f"({ex['which']} over {len(recs)} checked steps; {ex['rel_per_loss']:.3g}x per unit "
                                   f"of loss; healthy is well below 1); total gradient norm up to "
                                   f"{ex['peak_total']:.3g}; {ex['symptom']}.",
                           evidence={"grad_to_weight_ratio": ex["rel"], "per_unit_of_loss": ex["rel_per_loss"],
                                     "steps_checked": len(recs), "symptom": ex["symptom"],
                                     "nonfinite_gradient_steps": ex["nonfinite"]}))
    return out


def _vanishing_gradients(w, recs: list[dict], kinds: set) -> list[Finding]:
    """vanishing-gradients: the first layer's gradients tiny against the last layer's (relative to weights)."""
    out: list[Finding] = []
    j = jstate(w)
    deep = [r for r in recs if r.get("n_mats", 0) >= 4 and r["last_rel"] > 0 and math.isfinite(r["first_rel"])]
    if len(deep) >= 3:
        q = median([r["first_rel"] / r["last_rel"] for r in deep])
        # Adam & co. rescale each weight's gradient by its own size: a small first-layer gradient still
        # moves the first layer by ~lr, so the ratio alone is no harm there
        if q < 1e-3 and kinds and kinds <= {"adaptive"}:
            j["undecided"]["vanishing-gradients"] = (
                f"the first layer's gradients are {q:.1e} times the last layer's (relative to their weights), "
                "but the optimizer normalises each weight's gradient, so that alone does not stop it learning")
        elif q < 1e-3:
            normalised = _has_normalisation(w)
            out.append(Finding("vanishing-gradients", where=w.optim_steps.step_where,
                               severity="info" if normalised else "", maybe_fine=_NORMALISED if normalised else "",
                               message=f"Relative to their weights, the first layer's gradients are {q:.2e} times "
                                       f"those of the last layer (median over {len(deep)} steps, "
                                       f"{deep[0]['n_mats']} weight matrices).",
                               evidence={"first_to_last_ratio": q, "layers": deep[0]["n_mats"]}))
    return out


def _has_normalisation(w) -> bool:
    """Whether a watched model normalises its activations (BatchNorm, LayerNorm, GroupNorm...): a weight followed by
    one is scale-invariant, so its gradient relative to its size says nothing about how much the layer learns."""
    from torch import nn
    norms = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)
    return any(isinstance(m, norms) for info in w.models.roots.values() for m in info.module.modules())


_NORMALISED = ("The model normalises its activations (BatchNorm, LayerNorm, GroupNorm): a weight followed by a "
               "normalisation layer is scale-invariant, so a small gradient relative to its size is not a sign that "
               "the layer stops learning (residual networks with normalisation train their first layers well).")


# --------------------------------------------------------------------------- backward-in-autocast
# LossAndBackward.note_autocast (backward_hooks.py) asks torch.is_autocast_enabled(device type) as each backward()
# and each optimizer.step() starts: on means the call sits inside the script's `with torch.autocast(...)` block.

def _decide_autocast(w) -> list[Finding]:
    use = w.loss_watch.autocast_use
    if not use["backward_in"] and not use["step_in"]:
        return []
    parts = []
    if use["backward_in"]:
        parts.append(f"{use['backward_in']} of {use['backward']} backward() calls")
    if use["step_in"]:
        parts.append(f"{use['step_in']} of {use['step']} optimizer.step() calls")
    return [Finding("backward-in-autocast", where=use["where"] or use["where_step"],
                    message=f"{' and '.join(parts)} started while autocast was still on ({use['device']}, "
                            f"{use['dtype']}): they run inside the autocast region (a `with torch.autocast(...)` block, or a "
                            f"function decorated with it), which should end once the loss is computed (first at "
                            f"optimizer step {use['first_step']}).",
                    evidence={"backward calls in autocast": use["backward_in"], "backward calls": use["backward"],
                              "steps in autocast": use["step_in"], "steps": use["step"],
                              "autocast": f"{use['device']}, {use['dtype']}"})]
