"""Optimizer-level checks (deep steps): gradients, update sizes, parameters the optimizer misses."""
from __future__ import annotations

import math

import torch

from torchwise.diagnose.catalog import Finding

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
        w.no_grad_events.append({"step": w.steps, "missing": len(missing), "total": len(params),
                                 "ids": {id(p) for p in missing},
                                 "backward_since_step": w._backward_since_step})
    else:
        w.no_grad_events.append({"step": w.steps, "missing": 0, "total": len(params), "ids": set(),
                                 "backward_since_step": w._backward_since_step})
    # parameters of the watched models that got a gradient but are in no optimizer
    for info in w.roots.values():
        for name, p in info.module.named_parameters():
            if p.requires_grad and p.grad is not None and id(p) not in w._opt_param_ids:
                w.not_in_opt.setdefault(id(p), (info.label + "." + name, w.step_where))
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
        w.grad_records.append(rec)
        # parameters that have a gradient now: it must be cleared before the optimizer uses them again
        order = sorted((i for i in range(len(with_grad)) if math.isfinite(gn_l[i]) and gn_l[i] > 0),
                       key=lambda i: -gn_l[i])
        w._zero_sample = [with_grad[i] for i in order[:3]]
    # snapshot for the update size (only tensors that move: frozen or gradient-less ones would dilute it)
    budget, snap = _SNAP_LIMIT, []
    moving = [p for i, p in enumerate(with_grad) if gn_l[i] > 0]
    for p in sorted(moving, key=lambda t: -t.numel()):
        if p.numel() <= budget:
            snap.append((p, p.detach().clone()))
            budget -= p.numel()
    w._snap = snap
    from torchwise.diagnose.checks import model
    model.inspect_symmetry(w)


def _embedding_ids(w) -> set[int]:
    key = tuple(sorted(w.roots))
    cached = getattr(w, "_embedding_cache", None)
    if cached is None or cached[0] != key:
        from torch import nn
        ids = {id(m.weight) for r in w.roots.values() for m in r.module.modules()
               if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
        w._embedding_cache = cached = (key, ids)
    return cached[1]


def inspect_step_post(w, opt) -> None:
    snap = w._snap
    if not snap:
        return
    with torch.no_grad():
        new = [p.detach() for p, _ in snap]
        old = [o for _, o in snap]
        diff = torch._foreach_sub(new, old)
        dn = torch.stack(torch._foreach_norm(diff)).float().norm()
        on = torch.stack(torch._foreach_norm(old)).float().norm()
        ratio = float(dn / on.clamp_min(1e-12))
    w.update_ratios.append((w.steps, ratio))


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def loss_summary(w) -> dict:
    vals = w.loss_values()
    finite = [v for v in vals if math.isfinite(v)]
    first_bad = next((i for i, v in enumerate(vals) if not math.isfinite(v)), None)
    head = vals[:first_bad] if first_bad is not None else vals
    s = {"n": len(vals), "first_bad": first_bad, "first_bad_step": w.loss_steps[first_bad] if first_bad is not None else None}
    if len(head) >= 10:
        s["initial"] = sorted(head[:3])[1]
        k = max(3, len(head) // 10)
        s["first"] = sum(head[:k]) / k
        tail = head[-max(3, len(head) // 4):]
        s["last"] = sum(tail) / len(tail)
        s["max"] = max(head)
    s["finite"] = finite
    # a classification loss far below chance level means the model has learned: a flat curve then is
    # convergence (or fine-tuning a trained model), not a failure to learn
    C = w.cls.get("C")
    chance = math.log(C) if C and C >= 2 else (math.log(2) if w.bin["pos"] + w.bin["neg"] else None)
    s["learned"] = bool(chance and s.get("last") is not None and s["last"] < 0.5 * chance)
    return s


def decide(w, ls: dict) -> list[Finding]:
    out: list[Finding] = []
    h = w.hits
    checks = h.get("zero-grad-checks", 0)
    stale = h.get("missing-zero-grad", 0)
    if stale >= 2 and stale >= 0.8 * checks:
        out.append(Finding("missing-zero-grad", where=w.hit_where.get("missing-zero-grad"),
                           message=f"At {stale} of {checks} checked steps, backward() started while the gradients "
                                   "of the previous optimizer step were still there (never zeroed).",
                           evidence={"steps_with_stale_gradients": stale, "steps_checked": checks}))
    ratios = [r for _, r in w.update_ratios if math.isfinite(r)]
    med = _median(ratios) if ratios else None
    early = ratios[: max(1, len(ratios) // 3)]
    early_med = _median(early) if early else None
    diverged = False
    if ls.get("first") is not None and ls["last"] > 1.5 * ls["initial"]:
        diverged = True
    went_bad = ls["first_bad"] is not None and ls["first_bad"] >= 3 and ls.get("max") is not None \
        and ls.get("first") is not None and ls["max"] > 3 * ls["first"]
    lr_high = False
    if med is not None and (early_med > 1.0 or ((diverged or went_bad) and early_med > 0.01)):
        lr_high = True
        lrs = sorted({g["lr"] for o in w.optimizers for g in o.param_groups if isinstance(g.get("lr"), (int, float))})
        desc = (f"the loss went from {ls['initial']:.4g} (first step) to {ls['last']:.4g} (mean of the last quarter)"
                if ls.get("last") is not None and not went_bad
                else f"the loss rose to {ls.get('max', float('nan')):.4g} and became non-finite at step {ls['first_bad_step']}")
        out.append(Finding("lr-too-high", where=w.step_where,
                           message=f"Each optimizer step changes the weights by {early_med:.2%} of their size "
                                   f"(median, early steps), and {desc}. Learning rate: {lrs}.",
                           evidence={"update_to_weight_ratio": early_med, "lr": lrs, "loss_first": ls.get("first"),
                                     "loss_last": ls.get("last")}))
    lr_low = False
    if med is not None and med < 1e-4 and len(ratios) >= 3 and ls.get("first") is not None \
            and ls["last"] > 0.98 * ls["first"] and not ls["learned"]:
        lr_low = True
        lrs = sorted({g["lr"] for o in w.optimizers for g in o.param_groups if isinstance(g.get("lr"), (int, float))})
        out.append(Finding("lr-too-low", where=w.step_where,
                           message=f"Each optimizer step changes the weights by only {med:.2e} of their size (median over "
                                   f"{len(ratios)} steps) and the loss stays at {ls['first']:.4g} -> {ls['last']:.4g}. "
                                   f"Learning rate: {lrs}.",
                           evidence={"update_to_weight_ratio": med, "lr": lrs}))
    bad_step = ls["first_bad_step"]
    recs = [r for r in w.grad_records if "max_rel" in r and (bad_step is None or r["step"] < bad_step)
            and math.isfinite(r["max_rel"])]
    exploding = False
    if recs:
        med_rel = _median([r["max_rel"] for r in recs])
        peak = max(r["max_rel"] for r in recs)
        maxrel = med_rel if med_rel > 50 else peak
        nonfinite_grads = sum(not r["finite"] for r in w.grad_records)
        peak_total = max(r["total_norm"] for r in recs)
        if (med_rel > 50 or (peak > 1e3 and peak_total > 1e2) or (nonfinite_grads and bad_step is None)) \
                and not lr_high:
            exploding = True
            out.append(Finding("exploding-gradients", where=w.step_where,
                               message=f"Gradient norms reach {maxrel:.3g}x the norm of their weights ("
                                       f"{'median' if med_rel > 50 else 'peak'} over {len(recs)} checked steps; healthy "
                                       f"is well below 1); total gradient norm up to "
                                       f"{max(r['total_norm'] for r in recs):.3g}.",
                               evidence={"grad_to_weight_ratio": maxrel, "steps_checked": len(recs),
                                         "nonfinite_gradient_steps": nonfinite_grads}))
        deep = [r for r in recs if r.get("n_mats", 0) >= 4 and r["last_rel"] > 0 and math.isfinite(r["first_rel"])]
        if len(deep) >= 3:
            q = _median([r["first_rel"] / r["last_rel"] for r in deep])
            if q < 1e-3:
                out.append(Finding("vanishing-gradients", where=w.step_where,
                                   message=f"Relative to their weights, the first layer's gradients are {q:.2e} times "
                                           f"those of the last layer (median over {len(deep)} steps, "
                                           f"{deep[0]['n_mats']} weight matrices).",
                                   evidence={"first_to_last_ratio": q, "layers": deep[0]["n_mats"]}))
    w._lr_flags = {"high": lr_high, "low": lr_low, "exploding": exploding}
    out.extend(_decide_accumulation(w))
    out.extend(_decide_autocast(w))
    return out


# --------------------------------------------------------------------------- accumulation-unscaled
# Only where torch.autograd.backward is patched (torchwise check, torchwise.watch): that sees the
# tensor really passed to backward(). Per optimizer, a window is the backward() calls whose gradients
# its next step() uses: since its previous step, restarted whenever its gradients were cleared
# (so a GAN's generator backward, which also reaches the discriminator, is not counted for the
# discriminator's step after D.zero_grad()).

def accum_on_backward(w, tensors) -> None:
    loss = tensors if isinstance(tensors, torch.Tensor) else (
        tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else None)
    if not isinstance(loss, torch.Tensor) or not w.accum:
        return
    from torchwise.diagnose.checks.losses import recall
    from torchwise.diagnose.watch import user_where
    p = w._cur_pass
    batch = (p.index, p.n_batches) if p is not None and not p.closed else None
    raw = recall(w.loss_outs, loss) == "loss"  # the loss function's own output, not divided by anything
    for st in w.accum.values():
        sample = st["sample"]() if st["sample"] is not None else None
        if sample is None:
            continue
        g = sample.grad
        if g is None or not bool(g.any()):  # cleared since: a new window
            st.update(n=0, raw=0, new=0, batch=None, mixed=False)
        st["n"] += 1
        st["raw"] += raw
        st["new"] += batch is not None and batch != st["batch"]
        # batches of two loaders in one step (multi-task, zip(loader_a, loader_b)) are one combined batch
        st["mixed"] = st["mixed"] or (batch is not None and st["batch"] is not None and batch[0] != st["batch"][0])
        st["batch"] = batch
        if st["n"] == 1:
            st["where"] = user_where()


def accum_on_step(w, opt) -> None:
    """Every step() of an optimizer: judge the window that ends here (deep steps), start the next one."""
    import weakref
    st = w.accum.get(id(opt))
    if st is None:
        st = w.accum[id(opt)] = {"sample": None, "n": 0, "raw": 0, "new": 0, "batch": None, "mixed": False,
                                 "where": None}
    elif w._deep and st["sample"] is not None and st["n"] and w._cur_pass is not None:
        w.hits["accumulation-unscaled:n"] = w.hits.get("accumulation-unscaled:n", 0) + 1
        k = st["n"]
        if k >= 2 and st["raw"] == k and st["new"] == k and not st["mixed"]:
            w.hits["accumulation-unscaled"] = w.hits.get("accumulation-unscaled", 0) + 1
            w.hit_where.setdefault("accumulation-unscaled", st["where"])
            w.hit_info.setdefault("accumulation-unscaled", {"k": []})["k"].append(k)
    st.update(n=0, raw=0, new=0, batch=None, mixed=False)
    sample = st["sample"]() if st["sample"] is not None else None
    if sample is None or sample.grad is None:
        # a small parameter with a non-zero gradient now tells later whether the gradients were cleared
        cands = sorted((p for g in opt.param_groups for p in g["params"] if p.grad is not None),
                       key=lambda t: t.numel())[:3]
        sample = next((p for p in cands if bool(p.grad.any())), None)
        st["sample"] = weakref.ref(sample) if sample is not None else None


def _decide_accumulation(w) -> list[Finding]:
    hits, checked = w.hits.get("accumulation-unscaled", 0), w.hits.get("accumulation-unscaled:n", 0)
    if hits < 2 or hits < 0.5 * checked:
        return []
    ks = w.hit_info["accumulation-unscaled"]["k"]
    k = _median(ks)
    return [Finding("accumulation-unscaled", where=w.hit_where.get("accumulation-unscaled"),
                    message=f"At {hits} of {checked} checked optimizer steps, step() used the gradients summed over "
                            f"{k} backward() calls on {k} different batches, each on the loss function's output "
                            f"as is (not divided by {k}): the update is {k}x the mean gradient's, as with a {k}x "
                            "larger learning rate.",
                    evidence={"batches_per_step": k, "steps": hits, "steps_checked": checked})]


# --------------------------------------------------------------------------- backward-in-autocast
# watch.Watcher._note_autocast asks torch.is_autocast_enabled(device type) as each backward() and each
# optimizer.step() starts: on means the call sits inside the script's `with torch.autocast(...)` block.

def _decide_autocast(w) -> list[Finding]:
    use = w.autocast_use
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
