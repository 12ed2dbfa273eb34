"""Model-level checks: train/eval modes, registration, gradient flow, activations, NaNs, the loss curve."""
from __future__ import annotations

import weakref

import torch

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks import fits, grad_flow, graph_uses, loss_curve, step_record
from torchwise.diagnose.checks.symmetry import decide_symmetry


def _container_of(root_module, module) -> str | None:
    """Name of the plain list/dict/tuple attribute of the root (or a submodule) that holds `module`."""
    for owner_name, owner in root_module.named_modules():
        for attr, value in vars(owner).items():
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
            try:
                if any(v is module for v in items):
                    prefix = f"{owner_name}." if owner_name else ""
                    return f"self.{prefix}{attr} ({type(value).__name__})" if not owner_name else f"{prefix}{attr} ({type(value).__name__})"
            except TypeError:
                continue
    return None


def decide(w, ls: dict) -> list[Finding]:
    """The model family's findings: one function per mistake, called in the order they are listed."""
    out: list[Finding] = []
    out.extend(_mode_mistakes(w))
    unregistered, unreg_param_ids = _unregistered_submodules(w)
    out.extend(unregistered)
    out.extend(_params_not_in_optimizer(w, unreg_param_ids))
    out.extend(grad_flow.no_gradient_flow(w))
    out.extend(_loss_retains_graph(w))
    out.extend(_dead_relu(w))
    out.extend(decide_symmetry(w))
    out.extend(graph_uses.decide_graph_uses(w))
    out.extend(_nonfinite(w, ls))
    # the loss does not go down
    found, _ = loss_curve.judge_loss(w, ls)
    out.extend(found)
    return out


def _mode_mistakes(w) -> list[Finding]:
    """eval-mode-missing and train-mode-missing: the layers that behave by mode, in the wrong one."""
    h = w.hits
    evals, where, info = _eval_forwards_in_train_mode(w)
    unused = [] if evals else graph_uses.unused_train_mode_forwards(w)
    out: list[Finding] = []
    if evals:
        out.append(Finding("eval-mode-missing", where=where,
                           message=f"{evals} forward pass(es) made for evaluation (under torch.no_grad(), "
                                   "or over a loader with no optimizer step) ran with the model still in training mode; "
                                   "its Dropout/BatchNorm layers behave differently there.",
                           evidence={"eval_forwards_in_train_mode": evals} | info))
    elif unused:
        n, samples = len(unused), sum(f["samples"] for f in unused)
        out.append(Finding("eval-mode-missing", where=unused[0]["where"],
                           message=f"{n} forward pass(es) of {unused[0]['model']} ({samples} samples) ran in training "
                                   "mode with gradients on, and no backward() ever used their output: they were "
                                   "made for evaluation (a predict() or validation function), on samples the model "
                                   "never trained on, with its Dropout/BatchNorm layers behaving as in training.",
                           evidence={"eval_forwards_in_train_mode": n, "samples": samples,
                                     "model": unused[0]["model"]}))
    if h.get("train-mode-missing"):
        out.append(Finding("train-mode-missing", where=w.hit_where.get("train-mode-missing"),
                           message=f"{h['train-mode-missing']} optimizer step(s) followed forward passes made in eval mode "
                                   "(model.training == False) by a model with Dropout/BatchNorm layers.",
                           evidence={"steps_trained_in_eval_mode": h["train-mode-missing"], "steps": w.steps}))
    return out


def _eval_forwards_in_train_mode(w) -> tuple[int, str | None, dict]:
    """Forwards made for evaluation in train mode: in an evaluation pass, and under no_grad by a model whose output
    never became a loss's target (a DQN's target network and a distillation teacher run under no_grad to make the
    targets of training: that is training, whatever mode they are in) and whose input is not noise the script
    drew (a generator sampling images to show: nothing is measured on them)."""
    n, where = w.hits.get("eval-mode-missing", 0), w.hit_where.get("eval-mode-missing")
    info = dict(w.hit_info.get("eval-mode-missing", {}))
    makers = w.objective.target_makers
    for root, rec in w.hit_info.get("eval-mode-missing~nograd", {}).items():
        if root in makers or (rec.get("seen") and rec.get("noise") == rec["seen"]):
            continue  # it makes training targets; or every forward of it a deep step saw was on drawn noise
        n += rec["forwards"]
        where = where or rec["where"]
        info.setdefault("model", rec["model"])
    return n, where, info


def _unregistered_submodules(w) -> tuple[list[Finding], set[int]]:
    """unregistered-submodules, and the parameters of those layers (params-not-in-optimizer leaves them out)."""
    from torchwise.diagnose.user_code import where_defined
    out: list[Finding] = []
    unreg_param_ids = set()
    by_root: dict[int, list] = {}
    for rec in w.models.unregistered.values():
        by_root.setdefault(id(rec["root"]), []).append(rec)
    for recs in by_root.values():
        root = recs[0]["root"]
        recs = [r for r in recs if not _registered_another_way(r["ref"], root.param_names)
                and not _registered_since(r["ref"], root.module)]
        if not recs:
            continue
        holder = None
        for rec in recs:
            holder = holder or _container_of(root.module, rec["ref"])
            unreg_param_ids.update(id(p) for p in rec["ref"].parameters())
        n_params = sum(r["n_params"] for r in recs)
        kinds = sorted({r["module"] for r in recs})
        # held nowhere in the model, and a new object of the same kind at forward after forward: built inside forward()
        fresh = holder is None and max(sum(r["module"] == k for r in recs) for k in kinds) >= 2
        how = (" - new objects at every call (built inside forward()), so their weights start random each time"
               if fresh else f" - they are held in {holder}" if holder else "")
        out.append(Finding("unregistered-submodules", where=where_defined(type(root.module)),
                           message=f"{root.label}.forward calls {len(recs)} layer(s) ({', '.join(kinds)}; "
                                   f"{n_params} parameters) that are not registered sub-modules{how}; "
                                   "model.parameters() does not contain them, so they are never trained.",
                           evidence={"layers": len(recs), "parameters": n_params, "held_in": holder,
                                     "built_in_forward": fresh}))
    return out, unreg_param_ids


def _registered_since(layer, root) -> bool:
    """A layer built on the first forward and assigned as an attribute then (a projector made lazily, once):
    a sub-module by the end, trained and saved like any other (params-not-in-optimizer says so if the optimizer
    was made before it)."""
    return any(m is layer for m in root.modules())


def _registered_another_way(layer, registered: dict[int, str]) -> bool:
    """A layer kept in a plain list whose parameters the model registers another way (an nn.ParameterList built
    from them): they are trained and saved; and with no layer that train()/eval() changes, nothing is lost."""
    from torchwise.models.structure import behaves_by_mode
    params = list(layer.parameters())
    return bool(params) and all(id(p) in registered for p in params) and \
        not any(behaves_by_mode(m) for m in layer.modules())


def _params_not_in_optimizer(w, unreg_param_ids: set[int]) -> list[Finding]:
    """Parameters with a gradient but in no optimizer."""
    out: list[Finding] = []
    missing = {pid: v for pid, v in w.optim_steps.not_in_opt.items() if pid not in w.optim_steps.opt_param_ids and pid not in unreg_param_ids}
    for pid in _held_out_copies(w):
        missing.pop(pid, None)
    if missing and w.optim_steps.optimizers:
        names = [v[0] for v in missing.values()]
        out.append(Finding("params-not-in-optimizer", where=w.optim_steps.step_where,
                           message=f"{len(names)} parameter tensor(s) get gradients but are in no optimizer, so they are "
                                   f"never updated: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}.",
                           evidence={"parameters": names[:20], "count": len(names)}))
    return out


def _held_out_copies(w) -> set[int]:
    """Parameters of a model held out of every optimizer on purpose: a copy of an optimized model (the same
    parameter shapes, in order), as a DQN's target network, a momentum encoder or a teacher made from the
    student are. Gradients that reach them are wasted work, not lost updates."""
    shapes = {id(r): [tuple(p.shape) for p in r.module.parameters()] for r in w.models.roots.values()}
    trained = [rid for rid, r in ((id(r), r) for r in w.models.roots.values())
               if any(id(p) in w.optim_steps.opt_param_ids for p in r.module.parameters())]
    out: set[int] = set()
    for r in w.models.roots.values():
        ids = [id(p) for p in r.module.parameters()]
        if not ids or any(i in w.optim_steps.opt_param_ids for i in ids):
            continue
        if any(shapes[t] == shapes[id(r)] for t in trained if t != id(r)):
            out.update(ids)
    return out


def _loss_retains_graph(w) -> list[Finding]:
    """loss-retains-graph: loss tensors kept alive with their graphs, or summed into one."""
    out: list[Finding] = []
    h = w.hits
    if h.get("loss-retains-graph"):
        how = w.hit_info.get("loss-retains-graph", {}).get("how")
        holders = w.loss_watch.retained_holders
        if how == "kept alive":
            msg = (f"{w.loss_watch.retained_losses} loss tensors were still alive with their graphs 3 or more steps after "
                   f"their backward(), held by {', '.join(holders) or 'a container of the program'}: one more "
                   "graph in memory at every step.")
        elif how == "kept inside a total":
            msg = (f"The graphs of {w.loss_watch.retained_losses} losses were still alive 3 or more steps after their "
                   "backward(), held inside another tensor's graph: a running total or average built from the "
                   "loss tensor (`total += loss / n`), not from loss.item(), so every step's graph stays in memory.")
        elif how == "evaluation total":
            msg = (f"In {h['loss-retains-graph']} evaluation pass(es), the losses of earlier batches still had "
                   "their graphs at the end of the pass: they are summed as tensors (`total += loss * n`), so "
                   "the graph of every batch stays in memory until the pass ends.")
        else:
            msg = (f"At {h['loss-retains-graph']} of {w.steps} steps, a loss tensor that already went through "
                   "backward() was added into a running total that requires grad, so every step's graph stays "
                   "in memory.")
        evidence = {"occurrences": h["loss-retains-graph"]}
        if holders:
            evidence["held_by"] = holders
        out.append(Finding("loss-retains-graph", where=w.hit_where.get("loss-retains-graph"), message=msg,
                           evidence=evidence))
    return out


def _relu_is_dead(rec: dict) -> bool:
    fr = rec["fractions"]
    return min(fr[-3:]) >= 0.5 and sum(f >= 0.5 for f in fr) >= 0.5 * len(fr)


def _dead_relu(w) -> list[Finding]:
    """dead-relu: the first ReLU whose units output 0 for every sample checked. In a run of separate fits (a search,
    cross-validation) only when every fit with a ReLU that could be judged has a dead one: a setting of a search that
    kills its units is one the search discards (checks/fits.py)."""
    judged = [(key, rec) for key, rec in w.models.relu.items() if len(rec["fractions"]) >= 3 and rec["units"] >= 4]
    dead = [(key, rec) for key, rec in judged if _relu_is_dead(rec)]
    if not dead:
        return []
    order = fits.separate_fits(w)
    if order is not None:
        fit_of = {key: fits.fit_at_step(w, order, rec.get("step", 0)) for key, rec in judged}
        if {fit_of[key] for key, _ in dead} != set(fit_of.values()):
            return []
        dead = dead[-1:]  # the last fit's, where every fit has one
    rec = dead[0][1]
    fr = rec["fractions"]
    of_fits = f" ({len(order)} separate fits, each with a dead ReLU)" if order is not None else ""
    return [Finding("dead-relu", where=rec["where"],
                    message=f"{fr[-1]:.0%} of the {rec['units']} units of {rec['label']} output 0 for every "
                            f"sample of every batch checked (last {min(3, len(fr))} checks of at least "
                            f"{RELU_WINDOW} samples each; {len(fr)} checked){of_fits}.",
                    evidence={"dead_fraction": fr[-1], "units": rec["units"], "checks": len(fr)})]


def _nonfinite(w, ls: dict) -> list[Finding]:
    """nonfinite-input (a batch with NaN/inf) or else nonfinite-loss, with the module or operation that made it."""
    out: list[Finding] = []
    ni = w.inputs.nonfinite_input
    if ni is not None and (ls["first_bad"] is None or ni["step"] <= (ls["first_bad_step"] or 0)):
        out.append(Finding("nonfinite-input", where=ni["where"],
                           message=f"A training batch's {ni['what']} contain {ni['n_nonfinite']} NaN/inf value(s) out of "
                                   f"{ni['numel']} (step {ni['step']}).",
                           evidence={"nonfinite_values": ni["n_nonfinite"], "values": ni["numel"], "step": ni["step"],
                                     "in": ni["what"]}))
    elif ls["first_bad"] is not None and not getattr(w, "lr_flags", {}).get("high") \
            and not getattr(w, "lr_flags", {}).get("exploding"):
        c = w.deep.nonfinite_culprit
        if c is not None and c["params_finite"]:
            culprit = f"The first module whose output went non-finite is {c['module']} (step {c['step']}; its inputs " \
                      f"and weights were finite; {c['n_nonfinite']} of {c['numel']} values)."
            where = c["where"]
        elif c is not None:
            culprit = f"{c['module']} was the first module with a non-finite output, but its weights were already " \
                      "non-finite: an earlier update wrote NaN/inf into them."
            where = c["where"]
        else:
            culprit = "All module outputs were finite: the loss computation itself produced it (log of 0, division by 0)."
            where = w.loss_watch.backward_where
        op = w.deep.nonfinite_op
        if op is not None:
            culprit += f" The operation that produced it: {op['op']} at {op['where']}."
            where = op["where"] or where
        out.append(Finding("nonfinite-loss", where=where,
                           message=f"The loss is NaN/inf from step {ls['first_bad_step']} on. {culprit}",
                           evidence={"first_nonfinite_step": ls["first_bad_step"],
                                     "culprit": c["module"] if c else "loss computation",
                                     "operation": op["op"] if op else None}))
    return out


# --------------------------------------------------------------------------- eval-without-no-grad

def undecided(w) -> dict[str, str]:
    """Detectors of this module that could not judge this run, and why (for the coverage report)."""
    out: dict[str, str] = {}
    _, why = loss_curve.judge_loss(w, step_record.loss_summary(w))
    if why:
        out["loss-not-decreasing"] = why
    few = [r for r in w.models.relu.values() if len(r["fractions"]) < 3]
    if w.models.relu and len(few) == len(w.models.relu):
        out["dead-relu"] = (f"ReLU outputs were seen over fewer than 3 windows of {RELU_WINDOW} training samples "
                            "(too few deep steps)")
    return out


# --------------------------------------------------------------------------- evidence hooks
# The functions the watcher's hooks (model_hooks.py, step_hooks.py, backward_hooks.py) call with evidence
# for the detectors above.

RELU_WINDOW = 8  # samples pooled before a unit is called dead: several batches when batches are small


def record_relu(w, key, out: torch.Tensor, label: str) -> None:
    """A training-mode ReLU output (deep steps): which units were positive for any sample, pooled over
    consecutive sampled batches until they hold RELU_WINDOW samples, so batch size 1 is judged too. A unit
    counts as dead only if it is 0 on every sample of every batch of the window."""
    if not torch.is_grad_enabled() or out.dim() < 2:
        return
    from torchwise.diagnose.user_code import user_where
    with torch.no_grad():
        # a unit is alive where its largest value over the batch (and positions) is positive: one reduction,
        # ten times cheaper than a boolean copy of the output transposed to put the channels first
        if out.dim() == 2:
            alive = out.amax(0) > 0
        elif out.dim() == 3:  # (N, L, features)
            alive = out.amax((0, 1)) > 0
        else:  # (N, C, positions...): per channel
            alive = out.amax((0, *range(2, out.dim()))) > 0
        units = alive.numel()
        rec = w.models.relu.setdefault(key, {"label": label, "fractions": [], "units": units, "where": None,
                                             "step": fits.current_step(w)})
        acc = rec.get("acc")
        if acc is None or acc.shape != alive.shape or rec["units"] != units:
            rec["units"], rec["acc"], rec["acc_n"] = units, alive, 0
        else:
            rec["acc"] = acc | alive
        rec["acc_n"] = rec.get("acc_n", 0) + int(out.shape[0])
        if rec["acc_n"] >= RELU_WINDOW:
            rec["fractions"].append(1.0 - float(rec["acc"].float().mean()))
            rec["acc"], rec["acc_n"] = None, 0
    if rec["where"] is None:
        rec["where"] = user_where()


def accumulation_retains(w, args: tuple, out) -> bool:
    """An addition/sum/stack/cat with a loss that already went through backward() (function_mode.FunctionMode): whether
    it builds a running total across steps, the thing that keeps every step's graph alive. Adding two
    losses of this step (a GAN's errD = errD_real + errD_fake, kept for printing) is not: the sum dies
    with the step. Each such result is remembered; adding a backward()'ed loss into one made at an
    earlier step is retention."""
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return False
    totals = step_record.jstate(w).setdefault("totals", {})
    flat = []
    for a in args:
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    has_loss = old_total = involves_total = False
    start = w.steps
    for a in flat:
        if not isinstance(a, torch.Tensor):
            continue
        ref = w.loss_watch.bw_ids.get(id(a))
        if ref is not None and ref() is a:
            has_loss = True
        rec = totals.get(id(a))
        if rec is not None and rec[0]() is a:
            involves_total = True
            start = min(start, rec[1])
            if rec[1] < w.steps:
                old_total = True
    if has_loss or involves_total:
        prev = totals.get(id(out))
        if prev is not None and prev[0]() is out:
            start = min(start, prev[1])
        totals[id(out)] = (weakref.ref(out), start)
        if len(totals) > 64:
            for k in [k for k, (r, _) in totals.items() if r() is None][:32] or list(totals)[:32]:
                del totals[k]
    return has_loss and old_total
