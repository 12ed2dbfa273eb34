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
                                 "backward_since_step": w.backward_since_step})
    else:
        w.no_grad_events.append({"step": w.steps, "missing": 0, "total": len(params), "ids": set(),
                                 "backward_since_step": w.backward_since_step})
    # parameters of the watched models that got a gradient but are in no optimizer
    for info in w.roots.values():
        for name, p in info.module.named_parameters():
            if p.requires_grad and p.grad is not None and id(p) not in w.opt_param_ids:
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
        w.zero_sample = [with_grad[i] for i in order[:3]]
    # snapshot for the update size (only tensors that move: frozen or gradient-less ones would dilute it)
    budget, snap = _SNAP_LIMIT, []
    moving = [p for i, p in enumerate(with_grad) if gn_l[i] > 0]
    for p in sorted(moving, key=lambda t: -t.numel()):
        if p.numel() <= budget:
            snap.append((p, p.detach().clone()))
            budget -= p.numel()
    w.snap = snap
    from torchwise.diagnose.checks import model
    model.inspect_symmetry(w)


def _embedding_ids(w) -> set[int]:
    key = tuple(sorted(w.roots))
    cached = getattr(w, "embedding_cache", None)
    if cached is None or cached[0] != key:
        from torch import nn
        ids = {id(m.weight) for r in w.roots.values() for m in r.module.modules()
               if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
        w.embedding_cache = cached = (key, ids)
    return cached[1]


def inspect_step_post(w, opt) -> None:
    snap = w.snap
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
    # per optimizer too: what an update size means depends on the optimizer's kind and its lr
    j = jstate(w)
    j["upd"].setdefault(id(opt), []).append(ratio)
    lrs = [g["lr"] for g in opt.param_groups if isinstance(g.get("lr"), (int, float))]
    j["opt_info"][id(opt)] = {"kind": opt_kind(opt), "lr": max(lrs) if lrs else None, "name": type(opt).__name__}


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
    s["vals"] = vals
    # a classification loss far below chance level means the model has learned: a flat curve then is
    # convergence (or fine-tuning a trained model), not a failure to learn
    C = w.cls.get("C")
    chance = math.log(C) if C and C >= 2 else (math.log(2) if w.bin["pos"] + w.bin["neg"] else None)
    s["learned"] = bool(chance and s.get("last") is not None and s["last"] < 0.5 * chance)
    return s


# --------------------------------------------------------------------------- judgement state
# Evidence gathered by this module's own functions (watch.py calls them): per-optimizer update sizes,
# the order optimizers step in, which losses each step consumed, the inputs of the models' forwards.

_ADAPTIVE = {"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam",
             "Adafactor", "Lion", "Lamb", "LAMB", "AdaBelief", "Adan", "Sophia", "SophiaG"}
# an lr at which each kind of optimizer usually trains; what its updates would be there tells whether
# a tiny update comes from the lr or from the gradients
_TYPICAL_LR = {"adaptive": 1e-3, "sgd": 0.05}


def jstate(w) -> dict:
    j = w.__dict__.get("_judgement")
    if j is None:
        j = w.__dict__["_judgement"] = {
            "upd": {}, "opt_info": {}, "seq": [], "marks": [], "pending": [], "inputs_seen": 0,
            "out_ptrs": {}, "feeds": set(), "opt_roots": {}, "undecided": {}, "exploding": None}
    return j


def opt_kind(opt) -> str:
    """'adaptive' (the update's size does not follow the gradient's: Adam, RMSprop, Adagrad, ...),
    'sgd', or 'other'."""
    names = {c.__name__ for c in type(opt).__mro__}
    if names & _ADAPTIVE:
        return "adaptive"
    if "SGD" in names:
        return "sgd"
    g = opt.param_groups[0] if opt.param_groups else {}
    if "betas" in g or ("eps" in g and ("alpha" in g or "lr_decay" in g)):
        return "adaptive"
    return "other"


def opt_param_ids(opt) -> set[int]:
    return {id(p) for g in opt.param_groups for p in g["params"]}


def _roots_of(w, opt) -> set[int]:
    j = jstate(w)
    key = id(opt)
    ids = opt_param_ids(opt)
    cached = j["opt_roots"].get(key)
    if cached is not None and cached[0] == (len(ids), len(w.roots)):
        return cached[1]
    roots = {rid for rid, info in w.roots.items() if ids & set(info.param_names)}
    j["opt_roots"][key] = ((len(ids), len(w.roots)), roots)
    return roots


def note_root_input(w, module, args) -> None:
    """A watched model's forward starts (watch.py: Watcher._root_pre_impl, deep steps): its first input
    tensor, as a fingerprint of its values, and whether it is another model's output (a GAN's fake)."""
    if not w._deep or not torch.is_grad_enabled():
        return
    x = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if x is None and args and isinstance(args[0], (tuple, list)):
        x = next((a for a in args[0] if isinstance(a, torch.Tensor)), None)
    if x is None or x.numel() == 0:
        return
    j = jstate(w)
    src = j["out_ptrs"].get((x.data_ptr(), x.numel()))
    fed = src is not None and src != id(module)
    if fed:
        j["feeds"].add((src, id(module)))
        fk = j.setdefault("fed_keys", set())
        if len(fk) < 4096:
            fk.add((x.data_ptr(), x.numel()))
    with torch.no_grad():
        flat = x.detach().reshape(-1)
        n = flat.numel()
        idx = torch.linspace(0, n - 1, steps=min(n, 64), device=flat.device).long()
        fp = hash((tuple(x.shape), tuple(flat[idx].float().tolist())))
    j["inputs_seen"] += 1
    pend = j["pending"]
    pend.append((id(module), fp, fed, tuple(x.shape[1:])))
    del pend[:-64]


def note_root_output(w, module, out) -> None:
    """Where a model's output lives, to recognise it as another model's input (model.on_root_output)."""
    t = out if isinstance(out, torch.Tensor) else None
    if t is None and isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        t = out[0]
    if t is None:
        return
    ptrs = jstate(w)["out_ptrs"]
    ptrs[(t.data_ptr(), t.numel())] = id(module)
    if len(ptrs) > 32:
        for k in list(ptrs)[:16]:
            del ptrs[k]


def adversarial_pair(w) -> dict | None:
    """Two optimizers over disjoint parameters that step alternately, one's model feeding the other's
    (a GAN): their losses pull against each other, and one of them is meant to rise."""
    opts = list(w.optimizers)
    if len(opts) < 2:
        return None
    j = jstate(w)
    seq = j["seq"]
    counts = {}
    for o in seq:
        counts[o] = counts.get(o, 0) + 1
    for a in range(len(opts)):
        for b in range(a + 1, len(opts)):
            oa, ob = opts[a], opts[b]
            if counts.get(id(oa), 0) < 3 or counts.get(id(ob), 0) < 3:
                continue
            if opt_param_ids(oa) & opt_param_ids(ob):
                continue
            pair = [o for o in seq if o in (id(oa), id(ob))]
            switches = sum(1 for x, y in zip(pair, pair[1:]) if x != y)
            if switches < 0.5 * min(counts[id(oa)], counts[id(ob)]):
                continue  # one trained after the other, not against it
            ra, rb = _roots_of(w, oa), _roots_of(w, ob)
            fed = any((s in ra and d in rb) or (s in rb and d in ra) for s, d in j["feeds"])
            if fed or not j["inputs_seen"]:
                return {"optimizers": (type(oa).__name__, type(ob).__name__), "fed": fed}
    return None


def loss_curves(w, ls: dict) -> dict[int, list[float]]:
    """Per optimizer, the mean of the losses each of its steps consumed (the backward() calls since the
    previous step of any optimizer)."""
    vals = ls.get("vals") or []
    marks = jstate(w)["marks"]
    curves: dict[int, list[float]] = {}
    prev = 0
    for oid, n in marks:
        window = [v for v in vals[prev:n]]
        prev = n
        if window:
            curves.setdefault(oid, []).append(sum(window) / len(window))
    return curves


def _lr_low_evidence(w) -> dict | None:
    """An optimizer whose updates are tiny because of its lr: tiny now, and healthy at a usual lr for its
    kind. Tiny updates at a usual lr come from tiny gradients (a squashing softmax, vanishing gradients):
    not the lr's fault, and lr-too-low would send the user the wrong way."""
    j = jstate(w)
    best = None
    for oid, rs in j["upd"].items():
        rs = [r for r in rs if math.isfinite(r)]
        info = j["opt_info"].get(oid) or {}
        if len(rs) < 3 or not info.get("lr"):
            continue
        r = _median(rs)
        if r >= 1e-4:
            continue
        typical = _TYPICAL_LR.get(info["kind"])
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
    for step, v in zip(w.loss_steps, ls.get("vals") or []):
        if math.isfinite(v):
            loss_at[step] = max(loss_at.get(step, 0.0), abs(v))
    per_loss = [r["max_rel"] / max(1.0, loss_at.get(r["step"], 1.0)) for r in recs]
    med_rel = _median([r["max_rel"] for r in recs])
    peak = max(r["max_rel"] for r in recs)
    med_pl, peak_pl = _median(per_loss), max(per_loss)
    peak_total = max(r["total_norm"] for r in recs)
    peak_total_pl = max(r["total_norm"] / max(1.0, loss_at.get(r["step"], 1.0)) for r in recs)
    nonfinite = sum(not r["finite"] for r in w.grad_records)
    big = med_pl > 50 or (peak_pl > 1e3 and peak_total_pl > 1e2)
    ratios = [r for _, r in w.update_ratios if math.isfinite(r)]
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
    if not w.update_ratios and w.optimizers:
        for key in ("lr-too-high", "lr-too-low"):
            out.setdefault(key, "no optimizer step was measured (no deep step with gradients)")
    ex = j.get("exploding")
    if ex and ex["big"] and not ex["symptom"]:
        out["exploding-gradients"] = (
            f"gradients reach {ex['rel']:.3g}x the weights' norm ({ex['rel_per_loss']:.3g}x per unit of loss), "
            "but the loss does not rise, nothing went non-finite and the updates stay small: no sign they do harm")
    return out


def decide(w, ls: dict) -> list[Finding]:
    out: list[Finding] = []
    jstate(w)["undecided"] = {}
    h = w.hits
    checks = h.get("zero-grad-checks", 0)
    stale = h.get("missing-zero-grad", 0)
    if stale >= 2 and stale >= 0.8 * checks:
        out.append(Finding("missing-zero-grad", where=w.hit_where.get("missing-zero-grad"),
                           message=f"At {stale} of {checks} checked steps, backward() started while the gradients "
                                   "of the previous optimizer step were still there (never zeroed).",
                           evidence={"steps_with_stale_gradients": stale, "steps_checked": checks}))
    j = jstate(w)
    adv = adversarial_pair(w)
    ratios = [r for _, r in w.update_ratios if math.isfinite(r)]
    med = _median(ratios) if ratios else None
    early = ratios[: max(1, len(ratios) // 3)]
    early_med = _median(early) if early else None
    diverged = False
    # a rising loss is a symptom, except in an adversarial pair, where one loss rises by design
    if ls.get("first") is not None and ls["last"] > 1.5 * ls["initial"] and adv is None:
        diverged = True
    went_bad = ls["first_bad"] is not None and ls["first_bad"] >= 3 and ls.get("max") is not None \
        and ls.get("first") is not None and ls["max"] > 3 * ls["first"]
    kinds = {i["kind"] for i in j["opt_info"].values()}
    # Adam & co. move each weight by about lr per step whatever the gradient's size: an update of 1% of
    # the weights is their normal working point at lr=1e-3; with SGD it follows the gradient
    high_with_symptom = 0.05 if kinds == {"adaptive"} else 0.01
    lr_high = False
    if med is not None and (early_med > 1.0 or ((diverged or went_bad) and early_med > high_with_symptom)):
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
    low = _lr_low_evidence(w) if med is not None and len(ratios) >= 3 else None
    if low is not None and ls.get("first") is not None and ls["last"] > 0.98 * ls["first"] and not ls["learned"] \
            and not _flat_for_another_reason(w):
        lr_low = True
        out.append(Finding("lr-too-low", where=w.step_where,
                           message=f"Each optimizer step changes the weights by only {low['ratio']:.2e} of their size "
                                   f"(median over {low['steps']} steps of {low['optimizer']}, lr={low['lr']:.3g}; at a "
                                   f"usual lr for it ({low['typical']:g}) that would be about {low['at_typical']:.1e}) "
                                   f"and the loss stays at {ls['first']:.4g} -> {ls['last']:.4g}.",
                           evidence={"update_to_weight_ratio": low["ratio"], "lr": low["lr"],
                                     "optimizer": low["optimizer"], "ratio_at_usual_lr": low["at_typical"]}))
    bad_step = ls["first_bad_step"]
    recs = [r for r in w.grad_records if "max_rel" in r and (bad_step is None or r["step"] < bad_step)
            and math.isfinite(r["max_rel"])]
    exploding = False
    if recs:
        ex = _exploding_evidence(w, ls, recs, diverged=diverged, went_bad=went_bad)
        j["exploding"] = ex
        if ex["big"] and ex["symptom"] and not lr_high:
            exploding = True
            out.append(Finding("exploding-gradients", where=w.step_where,
                               message=f"Gradient norms reach {ex['rel']:.3g}x the norm of their weights "
                                       f"({ex['which']} over {len(recs)} checked steps; {ex['rel_per_loss']:.3g}x per unit "
                                       f"of loss; healthy is well below 1); total gradient norm up to "
                                       f"{ex['peak_total']:.3g}; {ex['symptom']}.",
                               evidence={"grad_to_weight_ratio": ex["rel"], "per_unit_of_loss": ex["rel_per_loss"],
                                         "steps_checked": len(recs), "symptom": ex["symptom"],
                                         "nonfinite_gradient_steps": ex["nonfinite"]}))
        deep = [r for r in recs if r.get("n_mats", 0) >= 4 and r["last_rel"] > 0 and math.isfinite(r["first_rel"])]
        if len(deep) >= 3:
            q = _median([r["first_rel"] / r["last_rel"] for r in deep])
            # Adam & co. rescale each weight's gradient by its own size: a small first-layer gradient still
            # moves the first layer by ~lr, so the ratio alone is no harm there
            if q < 1e-3 and kinds and kinds <= {"adaptive"}:
                j["undecided"]["vanishing-gradients"] = (
                    f"the first layer's gradients are {q:.1e} times the last layer's (relative to their weights), "
                    "but the optimizer normalises each weight's gradient, so that alone does not stop it learning")
            elif q < 1e-3:
                out.append(Finding("vanishing-gradients", where=w.step_where,
                                   message=f"Relative to their weights, the first layer's gradients are {q:.2e} times "
                                           f"those of the last layer (median over {len(deep)} steps, "
                                           f"{deep[0]['n_mats']} weight matrices).",
                                   evidence={"first_to_last_ratio": q, "layers": deep[0]["n_mats"]}))
    w.lr_flags = {"high": lr_high, "low": lr_low, "exploding": exploding}
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
    p = w.cur_pass
    batch = (p.index, p.n_batches) if p is not None and not p.closed else None
    raw = recall(w.loss_outs, loss) == "loss"  # the loss function's own output, not divided by anything
    j = jstate(w)
    pending, j["pending"] = j["pending"], []  # the models' forwards since the previous backward()
    opts = {id(o): o for o in w.optimizers}
    for oid, st in w.accum.items():
        sample = st["sample"]() if st["sample"] is not None else None
        if sample is None:
            continue
        g = sample.grad
        if g is None or not bool(g.any()):  # cleared since: a new window
            st.update(n=0, raw=0, new=0, batch=None, mixed=False, fps=set(), shapes=set())
        st["n"] += 1
        st["raw"] += raw
        if batch is not None:
            # a loader's batch: new when the loader moved on (a GAN's real and fake halves share one)
            st["new"] += batch != st["batch"]
            # batches of two loaders in one step (multi-task, zip(loader_a, loader_b)) are one combined batch
            st["mixed"] = st["mixed"] or (st["batch"] is not None and batch[0] != st["batch"][0])
        elif j["inputs_seen"] and oid in opts:
            # no loader (get_batch() slicing a tensor or a memmap): new when this optimizer's models got
            # inputs not seen in this window; another model's output (a GAN's fake) is no new batch
            mine = _roots_of(w, opts[oid])
            data = [(fp, shape) for rid, fp, fed, shape in pending if rid in mine and not fed]
            fps = st.setdefault("fps", set())
            shapes = st.setdefault("shapes", set())
            if data and not any(fp in fps for fp, _ in data):
                st["new"] += 1
            fps.update(fp for fp, _ in data)
            shapes.update(shape for _, shape in data)
            st["mixed"] = st["mixed"] or len(shapes) > 1  # different kinds of input: different tasks
        st["batch"] = batch
        if st["n"] == 1:
            st["where"] = user_where()


def accum_on_step(w, opt) -> None:
    """Every step() of an optimizer: judge the window that ends here (deep steps), start the next one."""
    import weakref
    j = jstate(w)
    if len(j["seq"]) < 100_000:
        j["seq"].append(id(opt))
        j["marks"].append((id(opt), len(w.losses)))
    st = w.accum.get(id(opt))
    if st is None:
        st = w.accum[id(opt)] = {"sample": None, "n": 0, "raw": 0, "new": 0, "batch": None, "mixed": False,
                                 "where": None, "fps": set(), "shapes": set()}
    elif w._deep and st["sample"] is not None and st["n"] and (w.cur_pass is not None or j["inputs_seen"]):
        w.hits["accumulation-unscaled:n"] = w.hits.get("accumulation-unscaled:n", 0) + 1
        k = st["n"]
        if k >= 2 and st["raw"] == k and st["new"] == k and not st["mixed"]:
            w.hits["accumulation-unscaled"] = w.hits.get("accumulation-unscaled", 0) + 1
            w.hit_where.setdefault("accumulation-unscaled", st["where"])
            w.hit_info.setdefault("accumulation-unscaled", {"k": []})["k"].append(k)
    st.update(n=0, raw=0, new=0, batch=None, mixed=False, fps=set(), shapes=set())
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
