"""accumulation-unscaled: gradients summed over several batches' backward() calls, each on the loss as is.

Only where torch.autograd.backward is patched (torchwise check, torchwise.watch): that sees the
tensor really passed to backward(). Per optimizer, a window is the backward() calls whose gradients
its next step() uses: since its previous step, restarted whenever its gradients were cleared
(so a GAN's generator backward, which also reaches the discriminator, is not counted for the
discriminator's step after D.zero_grad()).
"""
from __future__ import annotations

import weakref

import torch

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks.followed import recall
from torchwise.diagnose.checks.step_record import jstate, median, opt_kind, roots_of
from torchwise.diagnose.detectors.spec import FIXED_OBJECTIVES
from torchwise.diagnose.user_code import user_where


def accum_on_backward(w, tensors, retain_graph: bool = False) -> None:
    loss = tensors if isinstance(tensors, torch.Tensor) else (
        tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else None)
    if not isinstance(loss, torch.Tensor) or not w.accum:
        return
    p = w.loaders.cur_pass
    batch = (p.index, p.n_batches) if p is not None and not p.closed else None
    raw = recall(w.loss_outs, loss) == "loss"  # the loss function's own output, not divided by anything
    j = jstate(w)
    pending, j["pending"] = j["pending"], []  # the models' forwards since the previous backward()
    opts = {id(o): o for o in w.optim_steps.optimizers}
    for oid, st in w.accum.items():
        sample = st["sample"]() if st["sample"] is not None else None
        if sample is None:
            continue
        g = sample.grad
        if g is None or not bool(g.any()):  # cleared since: a new window
            st.update(n=0, raw=0, new=0, batch=None, mixed=False, fps=set(), shapes=set(), retained=False)
        st["n"] += 1
        # a backward() that keeps its graph for the next one: the losses of one sequence's time steps (truncated
        # BPTT, per-step backward()), whose sum is the sequence's gradient, not micro-batches to average
        st["retained"] = st.get("retained", False) or retain_graph
        st["raw"] += raw
        if batch is not None:
            # a loader's batch: new when the loader moved on (a GAN's real and fake halves share one)
            st["new"] += batch != st["batch"]
            # batches of two loaders in one step (multi-task, zip(loader_a, loader_b)) are one combined batch
            st["mixed"] = st["mixed"] or (st["batch"] is not None and batch[0] != st["batch"][0])
        elif j["inputs_seen"] and oid in opts:
            # no loader (get_batch() slicing a tensor or a memmap): new when this optimizer's models got
            # inputs not seen in this window; another model's output (a GAN's fake) is no new batch
            mine = roots_of(w, opts[oid])
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
    j = jstate(w)
    if len(j["seq"]) < 100_000:
        j["seq"].append(id(opt))
        j["marks"].append((id(opt), len(w.loss_watch.losses)))
    st = w.accum.get(id(opt))
    if st is None:
        st = w.accum[id(opt)] = {"sample": None, "n": 0, "raw": 0, "new": 0, "batch": None, "mixed": False,
                                 "where": None, "fps": set(), "shapes": set()}
    elif w.is_deep and st["sample"] is not None and st["n"] and (w.loaders.cur_pass is not None or j["inputs_seen"]):
        w.hits["accumulation-unscaled:n"] = w.hits.get("accumulation-unscaled:n", 0) + 1
        k = st["n"]
        if k >= 2 and st["raw"] == k and st["new"] == k and not st["mixed"] and not st.get("retained"):
            w.hits["accumulation-unscaled"] = w.hits.get("accumulation-unscaled", 0) + 1
            w.hit_where.setdefault("accumulation-unscaled", st["where"])
            info = w.hit_info.setdefault("accumulation-unscaled", {"k": [], "opts": {}})
            info["k"].append(k)
            info.setdefault("opts", {})[id(opt)] = opt_kind(opt)
    st.update(n=0, raw=0, new=0, batch=None, mixed=False, fps=set(), shapes=set(), retained=False)
    sample = st["sample"]() if st["sample"] is not None else None
    if sample is None or sample.grad is None:
        # a small parameter with a non-zero gradient now tells later whether the gradients were cleared
        cands = sorted((p for g in opt.param_groups for p in g["params"] if p.grad is not None),
                       key=lambda t: t.numel())[:3]
        sample = next((p for p in cands if bool(p.grad.any())), None)
        st["sample"] = weakref.ref(sample) if sample is not None else None


def decide_accumulation(w) -> list[Finding]:
    hits, checked = w.hits.get("accumulation-unscaled", 0), w.hits.get("accumulation-unscaled:n", 0)
    if hits < 2 or hits < 0.5 * checked:
        return []
    info = w.hit_info["accumulation-unscaled"]
    opts = {oid: kind for oid, kind in info.get("opts", {}).items() if w.objective.kind(oid) in FIXED_OBJECTIVES}
    # the harm: summed gradients make each update k times the mean's only for a fixed objective's loss, and only
    # an optimizer that follows the gradient's size (SGD-like) moves k times further; Adam-like ones do not
    if not opts:
        return []
    adaptive = all(kind == "adaptive" for kind in opts.values())
    k = median(info["k"])
    return [Finding("accumulation-unscaled", where=w.hit_where.get("accumulation-unscaled"),
                    severity="info" if adaptive else "",
                    message=f"At {hits} of {checked} checked optimizer steps, step() used the gradients summed over "
                            f"{k} backward() calls on {k} different batches, each on the loss function's output "
                            f"as is (not divided by {k}): the update is {k}x the mean gradient's, as with a {k}x "
                            "larger learning rate.",
                    evidence={"batches_per_step": k, "steps": hits, "steps_checked": checked})]
