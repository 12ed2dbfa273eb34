"""What happens to each model output made with gradients on: does a backward() ever reach its graph?

The graph use tells evaluation from training by what the run does, not by how the loop is written: a forward
whose graph no backward() reaches, on rows no backward() ever trained on, was made for evaluation, whether under
no_grad or in a plain `predict(model, x_test)` function. Two detectors read it: eval-without-no-grad (the graph
kept for nothing) and eval-mode-missing (such an evaluation run in train mode). The watcher's model hooks hand
each root output here (on_root_output) and its step hooks settle the uses after each step.
"""
from __future__ import annotations

import torch

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks import step_record

def _out_tensors(out, depth: int = 0) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if depth > 1:
        return []
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    found = []
    for item in items:
        found += _out_tensors(item, depth + 1)
        if len(found) >= 4:
            break
    return found[:4]


def on_root_output(w, module, out) -> None:
    """A watched model's forward has returned (deep steps). Its output is followed for the accuracy check;
    with gradients on, a hook on its graph tells whether any backward() ever reaches it."""
    from torchwise.diagnose.checks.followed import remember
    step_record.note_root_output(w, module, out)
    # an output made under no_grad in train mode is followed by its maker: is it a loss's target (training) or
    # an evaluation (eval-mode-missing)?
    w.objective.note_model_output(out, maker=id(module) if module.training and not torch.is_grad_enabled() else None)
    tensors = _out_tensors(out)
    for t in tensors[:1]:
        if t.is_floating_point() and t.dim() >= 1:
            remember(w.followed, t, "out")
    if not torch.is_grad_enabled() or len(w.graph_uses) >= 256:
        return
    nodes = [t.grad_fn for t in tensors if t.grad_fn is not None]
    if not nodes:
        return  # nothing requires grad (a frozen model): no graph is kept
    from torchwise.diagnose.user_code import user_where
    flag = [False]  # the hook holds only this: no reference cycle through the graph's nodes

    def reached(grad_outputs, flag=flag):
        flag[0] = True

    info = w.models.roots.get(id(module))
    w.graph_uses.append({"step": w.steps, "reached": flag, "handles": [n.register_prehook(reached) for n in nodes],
                         "training": module.training, "where": user_where(),
                         "hashes": w.inputs.last_row_hashes.pop(id(module), None),
                         "mode_layers": bool(info is not None and info.has_mode_layers),
                         "model": info.label if info is not None else type(module).__name__, "root": id(module),
                         "samples": int(tensors[0].shape[0]) if tensors[0].dim() else 1,
                         "key": (tensors[0].data_ptr(), tensors[0].numel())})


def settle_graph_uses(w) -> None:
    """After each optimizer step: a forward whose graph no backward() reached within 2 steps never will
    (a GAN's generator output is reached one optimizer step later, by the generator's backward)."""
    fed_keys = step_record.jstate(w).get("fed_keys", set())
    keep = []
    for rec in w.graph_uses:
        if not rec["reached"][0] and w.steps - rec["step"] < 2:
            keep.append(rec)
            continue
        for h in rec["handles"]:
            h.remove()
        # an output that went on into another model's forward (a GAN's fake, detached for the
        # discriminator's step) was a training input, not an evaluation
        fed = rec.get("key") in fed_keys
        hashes = rec.get("hashes") or []
        if rec["reached"][0] and len(w.inputs.reached_rows) < 500_000:
            w.inputs.reached_rows.update(hashes)
        elif hashes and sum(x in w.inputs.reached_rows for x in hashes) <= _HELD_OUT_SHARE * len(hashes):
            # rows no backward() used are no training rows (a predict() on the test set with gradients on):
            # they must not make a later validation on the same rows look like a leak
            w.inputs.train_hashes.difference_update(hashes)
        if not rec["reached"][0] and not fed and rec["training"] and rec["mode_layers"] and hashes:
            # a forward no backward() used, in train mode, on rows that may never be trained on: evaluation
            # written as a plain function (predict(model, x_test)); judged once the run is over
            held = w.hit_info.setdefault("eval-mode-missing~unused", {"forwards": []})
            if len(held["forwards"]) < 64:
                held["forwards"].append({"where": rec["where"], "samples": rec["samples"], "hashes": hashes,
                                         "model": rec["model"], "step": rec["step"], "root": rec.get("root")})
        if not rec["reached"][0] and not fed:
            u = w.hit_info.setdefault("eval-without-no-grad", {"forwards": 0, "samples": 0, "in_eval_mode": 0})
            u["forwards"] += 1
            u["samples"] += rec["samples"]
            u["in_eval_mode"] += not rec["training"]
            w.hit_where.setdefault("eval-without-no-grad", rec["where"])
    w.graph_uses = keep
    if fed_keys and not keep:
        fed_keys.clear()


def decide_graph_uses(w) -> list[Finding]:
    u = w.hit_info.get("eval-without-no-grad")
    if not u or u["forwards"] < 2:
        return []
    return [Finding("eval-without-no-grad", where=w.hit_where.get("eval-without-no-grad"),
                    message=f"{u['forwards']} forward pass(es) ({u['samples']} samples; {u['in_eval_mode']} in eval "
                            "mode) ran with gradients enabled, and no backward() reached their graph: autograd kept "
                            "their activations for nothing.",
                    evidence=dict(u))]


# a forward whose rows are at most this share of rows trained on is held-out data (a replay buffer's states,
# which the optimizer later samples, reach far more)
_HELD_OUT_SHARE = 0.2
_HELD_OUT_MIN_ROWS = 8  # distinct input rows, over the forwards of one call site, before they are judged held out


def unused_train_mode_forwards(w) -> list[dict]:
    """Forwards in train mode, gradients on, that no backward() reached and whose input rows were (nearly) never
    among the rows of forwards a backward() did reach: evaluation not written as a no_grad loop."""
    held = w.hit_info.get("eval-mode-missing~unused")
    if not held or not w.inputs.reached_rows:
        return []
    # a model that feeds another or is fed by one (a GAN's generator, an autoencoder's decoder) is trained on
    # noise or on another model's output: "rows never trained on" says nothing there, and a forward of it that
    # no backward() uses is a sample drawn to look at, not an evaluation
    chained = {r for pair in step_record.jstate(w)["feeds"] for r in pair}
    # judged per call site and model, over all its forwards: a validation function that feeds one sample at a
    # time (batch size 1, a segmentation net on whole images) shows its held-out rows across its calls
    sites: dict[tuple, list[dict]] = {}
    for f in held["forwards"]:
        if f.get("root") not in chained:
            sites.setdefault((f.get("root"), f["where"]), []).append(f)
    out = []
    for forwards in sites.values():
        hs = {x for f in forwards for x in f["hashes"]}
        if len(hs) >= _HELD_OUT_MIN_ROWS and sum(x in w.inputs.reached_rows for x in hs) <= _HELD_OUT_SHARE * len(hs):
            out.extend(forwards)
    return out
