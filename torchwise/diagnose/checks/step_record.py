"""The optimizer steps' shared record, gathered as the run goes and read by several detector families.

Per optimizer: its update sizes and kind; the order optimizers step in and the losses each step consumed;
the inputs of the models' forwards (a fingerprint each) and which model's output fed which model (a GAN).
optim.py, model.py and accumulation.py read it; it imports none of them, so they need not import each other.
"""
from __future__ import annotations

import math

import torch

from torchwise.diagnose.bounded import put_newest
from torchwise.diagnose.tensors import first_dense_input


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


# a whole run of fewer loss values than this is too short to tell no progress from a slow start: plain SGD at a
# small learning rate sits at chance for its first tens of steps on a working setup (MNIST at lr 0.01), and a
# fine-tuning rate (2e-5) moves a network's weights by little for as long. The verdicts read from the loss curve
# or from update sizes (loss-not-decreasing, lr-too-low, lr-too-high without divergence, vanishing gradients) are
# hints over fewer.
SHORT_RUN_VALUES = 100


def loss_summary(w) -> dict:
    vals = w.loss_values()
    finite = [v for v in vals if math.isfinite(v)]
    first_bad = next((i for i, v in enumerate(vals) if not math.isfinite(v)), None)
    head = vals[:first_bad] if first_bad is not None else vals
    s = {"n": len(vals), "first_bad": first_bad, "first_bad_step": w.loss_watch.loss_steps[first_bad] if first_bad is not None else None}
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
    C = w.loss_watch.cls.get("C")
    chance = math.log(C) if C and C >= 2 else (math.log(2) if w.loss_watch.bin["pos"] + w.loss_watch.bin["neg"] else None)
    s["learned"] = bool(chance and s.get("last") is not None and s["last"] < 0.5 * chance)
    return s


# the judgement state: evidence gathered by the watcher's hooks (they call optim.py, model.py and
# accumulation.py, which write it here)
_ADAPTIVE = {"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam",
             "Adafactor", "Lion", "Lamb", "LAMB", "AdaBelief", "Adan", "Sophia", "SophiaG"}
# an lr at which each kind of optimizer usually trains; what its updates would be there tells whether
# a tiny update comes from the lr or from the gradients
TYPICAL_LR = {"adaptive": 1e-3, "sgd": 0.05}


def jstate(w) -> dict:
    j = w.judgement
    if j is None:
        j = w.judgement = {
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


def roots_of(w, opt) -> set[int]:
    j = jstate(w)
    key = id(opt)
    ids = opt_param_ids(opt)
    cached = j["opt_roots"].get(key)
    if cached is not None and cached[0] == (len(ids), len(w.models.roots)):
        return cached[1]
    roots = {rid for rid, info in w.models.roots.items() if ids & set(info.param_names)}
    j["opt_roots"][key] = ((len(ids), len(w.models.roots)), roots)
    return roots


def note_root_input(w, module, args) -> None:
    """A watched model's forward starts (model_hooks.py: Watcher._root_pre_impl, deep steps): its first input
    tensor, as a fingerprint of its values, and whether it is another model's output (a GAN's fake)."""
    if not w.is_deep or not torch.is_grad_enabled():
        return
    x = first_dense_input(args)
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
    # (a reused address moves to the end: else a GAN's fake, fed to the critic, could be evicted and look unused)
    put_newest(jstate(w)["out_ptrs"], (t.data_ptr(), t.numel()), id(module), size=32)


def adversarial_pair(w) -> dict | None:
    """Two optimizers over disjoint parameters that step alternately, one's model feeding the other's
    (a GAN): their losses pull against each other, and one of them is meant to rise."""
    opts = list(w.optim_steps.optimizers)
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
            ra, rb = roots_of(w, oa), roots_of(w, ob)
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
