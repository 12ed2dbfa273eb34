"""Loss-level checks: what goes into the loss function, and what the targets look like.

`inspect` runs inside the loss call (deep steps only) and keeps small counters on the watcher;
`decide` turns the counters into findings at the end.
"""
from __future__ import annotations

import weakref

import torch
from torch.nn import functional as F

from torchwise.diagnose.catalog import Finding

_IGNORE_DEFAULT = -100


def _count(w, key: str, hit: bool, where: str | None, info: dict | None = None) -> None:
    w.hits[key + ":n"] = w.hits.get(key + ":n", 0) + 1
    if hit:
        w.hits[key] = w.hits.get(key, 0) + 1
        w.hit_where.setdefault(key, where)
        if info:
            w.hit_info.setdefault(key, {}).update(info)


def inspect(w, kind: str, inp: torch.Tensor, target: torch.Tensor, kwargs: dict, where: str | None) -> None:
    if kind in ("ce", "nll"):
        _inspect_classification(w, kind, inp, target, kwargs, where)
    elif kind in ("bcelogits", "bce"):
        _inspect_binary(w, kind, inp, target, kwargs, where)
    elif kind == "reg":
        _inspect_regression(w, inp, target, where)
    if target.is_floating_point() and not bool(torch.isfinite(target).all()) and w.nonfinite_input is None:
        w.nonfinite_input = {"step": w.steps, "n_nonfinite": int((~torch.isfinite(target)).sum()),
                             "numel": target.numel(), "what": "targets", "where": where}


def _inspect_classification(w, kind, inp, target, kwargs, where) -> None:
    if inp.dim() < 1:
        return
    C = int(inp.shape[1]) if inp.dim() >= 2 else int(inp.shape[0])
    if C == 1:
        _count(w, "wrong-loss-for-task", True, where, {"reason": "ce-one-output"})
        return
    x = inp.float()
    probs_like = bool(x.min() >= 0) and bool(x.max() <= 1.0 + 1e-4)
    if probs_like and inp.dim() >= 2:
        sums = x.sum(1)
        probs_like = bool((sums - 1).abs().max() < 1e-3)
    if kind == "ce":
        _count(w, "softmax-before-loss", probs_like, where, {"loss": "cross_entropy"})
    else:
        _count(w, "softmax-before-loss", probs_like, where, {"loss": "nll_loss"})
        if not probs_like and bool(x.max() > 1e-4):
            _count(w, "wrong-loss-for-task", True, where, {"reason": "nll-raw-logits"})
    if target.is_floating_point():
        if target.shape == inp.shape:
            t = target.float()
            ok = bool(t.min() >= 0) and bool((t.sum(1) - 1).abs().max() < 1e-3)
            if not ok:
                _count(w, "wrong-loss-for-task", True, where, {"reason": "ce-real-targets"})
        return
    ignore = kwargs.get("ignore_index", _IGNORE_DEFAULT)
    labels = target.flatten()
    labels = labels[labels != ignore]
    if labels.numel() == 0 or bool(labels.min() < 0) or bool(labels.max() >= C):
        return
    if target.dim() != 1:
        return  # dense targets (segmentation, sequences): class frequencies per pixel/token are another matter
    c = w.cls
    counts = torch.bincount(labels.cpu(), minlength=C)
    if c["counts"] is None or c["C"] != C:
        c["counts"], c["C"] = counts, C
    else:
        c["counts"] += counts
    c["n"] += labels.numel()
    c["batches"] += 1
    if labels.numel() >= 4:
        c["single"] += int(bool((labels == labels[0]).all()))
        c["batches_multi"] = c.get("batches_multi", 0) + 1
    c["weighted"] = c["weighted"] or kwargs.get("weight") is not None
    c["where"] = c["where"] or where


def _inspect_binary(w, kind, inp, target, kwargs, where) -> None:
    x = inp.float()
    if kind == "bcelogits" and x.numel() >= 8:
        _count(w, "double-sigmoid", bool(x.min() > 0) and bool(x.max() < 1), where)
    t = target.float()
    if bool(t.min() < 0) or bool(t.max() > 1):
        _count(w, "wrong-loss-for-task", True, where, {"reason": "bce-targets-not-01",
                                                       "target_max": float(t.max())})
        return
    b = w.bin
    b["pos"] += int((t > 0.5).sum())
    b["neg"] += int((t <= 0.5).sum())
    b["weighted"] = b["weighted"] or kwargs.get("pos_weight") is not None or kwargs.get("weight") is not None
    b["where"] = b["where"] or where


def _inspect_regression(w, inp, target, where) -> None:
    t = target.float()
    if t.numel() < 8:
        return
    try:
        expanded = torch.broadcast_shapes(inp.shape, target.shape).numel() > max(inp.numel(), target.numel())
    except RuntimeError:
        expanded = False
    if expanded:
        _count(w, "wrong-loss-for-task", True, where, {"reason": "broadcast", "input_shape": list(inp.shape),
                                                       "target_shape": list(target.shape)})
        return
    integral = bool((t == t.round()).all()) and bool(t.min() >= 0)
    if not integral:
        _count(w, "wrong-loss-for-task", False, where)
        return
    distinct = int(torch.unique(t).numel())
    onehot = t.dim() == 2 and t.shape[1] >= 2 and bool((t.sum(1) == 1).all()) and bool(t.max() <= 1)
    labels = distinct <= 20 and inp.shape[-1] == 1 or (inp.dim() == 1 and distinct <= 20)
    _count(w, "wrong-loss-for-task", bool(onehot or labels), where,
           {"reason": "regression-on-classes", "distinct_targets": distinct, "one_hot": onehot})


def decide(w) -> list[Finding]:
    out: list[Finding] = []
    h = w.hits

    def rate(key):
        n = h.get(key + ":n", 0)
        return (h.get(key, 0) / n if n else 0.0), n

    r, n = rate("softmax-before-loss")
    if n >= 2 and r >= 0.8:
        loss = w.hit_info.get("softmax-before-loss", {}).get("loss", "cross_entropy")
        want = "logits (raw scores)" if loss == "cross_entropy" else "log-probabilities (log_softmax)"
        out.append(Finding("softmax-before-loss", where=w.hit_where.get("softmax-before-loss"),
                           message=f"The input to {loss} is already a probability distribution in {h['softmax-before-loss']} "
                                   f"of {n} calls (every row is >= 0 and sums to 1); {loss} expects {want}.",
                           evidence={"calls_with_probabilities": h["softmax-before-loss"], "calls_checked": n}))
    r, n = rate("double-sigmoid")
    if n >= 2 and r >= 0.9:
        out.append(Finding("double-sigmoid", where=w.hit_where.get("double-sigmoid"),
                           message=f"Every input to binary_cross_entropy_with_logits lies strictly between 0 and 1 "
                                   f"({h['double-sigmoid']} of {n} calls): they are already sigmoid outputs.",
                           evidence={"calls_in_0_1": h["double-sigmoid"], "calls_checked": n}))
    r, n = rate("wrong-loss-for-task")
    if h.get("wrong-loss-for-task", 0) >= 2 and r >= 0.8:
        info = w.hit_info.get("wrong-loss-for-task", {})
        reason = info.get("reason")
        msg = {
            "ce-one-output": "cross_entropy gets a single output per sample: softmax over one value is always 1, "
                             "the loss is always 0 and nothing is learned. A binary task needs one logit and "
                             "binary_cross_entropy_with_logits (or two outputs and cross_entropy).",
            "nll-raw-logits": "nll_loss gets positive values, so its input is not log-probabilities: apply "
                              "log_softmax first, or use cross_entropy on the raw outputs.",
            "ce-real-targets": "cross_entropy gets real-valued targets that are not class probabilities: this "
                               "looks like a regression target; use mse_loss / l1_loss.",
            "bce-targets-not-01": f"binary cross entropy gets targets outside [0, 1] (max {info.get('target_max')}): "
                                  "these look like class indices; use cross_entropy with C outputs.",
            "broadcast": f"The regression loss gets an input of shape {info.get('input_shape')} and a target of shape "
                         f"{info.get('target_shape')}; they broadcast to a matrix, so every prediction is compared "
                         "with every target.",
            "regression-on-classes": f"A regression loss (MSE/L1) is used on class labels: targets are integers with "
                                     f"{info.get('distinct_targets')} distinct values"
                                     f"{' in one-hot rows' if info.get('one_hot') else ''}; this treats classes as "
                                     "ordered numbers. Use cross_entropy with one output per class.",
        }.get(reason, "The loss does not fit the outputs/targets.")
        out.append(Finding("wrong-loss-for-task", where=w.hit_where.get("wrong-loss-for-task"), message=msg,
                           evidence={k: v for k, v in info.items()} | {"calls": h["wrong-loss-for-task"]}))
    out.extend(_decide_labels(w))
    out.extend(decide_values_compared(w))
    return out


def _decide_labels(w) -> list[Finding]:
    out: list[Finding] = []
    c = w.cls
    if c["counts"] is not None and c["n"] >= 100:
        counts = c["counts"].tolist()
        C = c["C"]
        present = [i for i, k in enumerate(counts) if k > 0]
        lo, hi = present[0], present[-1]
        contiguous = len(present) == hi - lo + 1
        if lo >= 1 and len(present) >= 2 and contiguous:
            out.append(Finding("labels-not-zero-based", where=c["where"],
                               message=f"Over {c['n']} labels the smallest is {lo} and the largest {hi}: class 0 never "
                                       f"occurs, while the model has {C} outputs (0..{C - 1}).",
                               evidence={"min_label": lo, "max_label": hi, "outputs": C, "labels_seen": c["n"]}))
        elif lo == 0 and contiguous and hi + 1 < C and c["n"] >= 10 * C:
            out.append(Finding("output-classes-mismatch", where=c["where"],
                               message=f"The model has {C} outputs, but over {c['n']} labels only classes 0..{hi} "
                                       f"occur ({hi + 1} classes): {C - hi - 1} outputs never see an example.",
                               evidence={"outputs": C, "classes_seen": hi + 1, "labels_seen": c["n"]}))
        present_counts = [counts[i] for i in present]
        if len(present) >= 2 and not c["weighted"] and max(present_counts) >= 10 * min(present_counts):
            big, small = present_counts.index(max(present_counts)), present_counts.index(min(present_counts))
            out.append(Finding("label-imbalance", where=c["where"],
                               message=f"Class {present[big]} occurs {max(present_counts)} times and class "
                                       f"{present[small]} only {min(present_counts)} times "
                                       f"({max(present_counts) / min(present_counts):.0f}x) in {c['n']} training labels, "
                                       "and the loss has no class weights.",
                               evidence={"counts": counts, "labels_seen": c["n"]}))
    b = w.bin
    tot = b["pos"] + b["neg"]
    if tot >= 100 and not b["weighted"] and min(b["pos"], b["neg"]) > 0 and \
            max(b["pos"], b["neg"]) >= 10 * min(b["pos"], b["neg"]):
        out.append(Finding("label-imbalance", where=b["where"],
                           message=f"{b['pos']} positive vs {b['neg']} negative targets "
                                   f"({max(b['pos'], b['neg']) / min(b['pos'], b['neg']):.0f}x) and no pos_weight.",
                           evidence={"positives": b["pos"], "negatives": b["neg"]}))
    return out


# --------------------------------------------------------------------------- accuracy: values vs indices
# The TorchFunctionMode follows a model's output through max/topk over a dim; the first result of
# those is the values (scores), the second the indices (classes). Comparing the values with integer
# labels is the `pred, _ = torch.max(out, 1)` slip.

_VALUE_FUNCS = {torch.max, torch.Tensor.max, torch.topk, torch.Tensor.topk}
_EQ_FUNCS = {torch.eq, torch.ne, torch.Tensor.eq, torch.Tensor.ne, torch.Tensor.__eq__, torch.Tensor.__ne__}
# what keeps a followed tensor the same numbers (out.data, out.detach().cpu(), values.squeeze(), ...)
_SAME_FUNCS = {torch.Tensor.detach, torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.float, torch.Tensor.clone,
               torch.Tensor.view, torch.Tensor.reshape, torch.Tensor.squeeze, torch.Tensor.flatten,
               torch.Tensor.view_as, torch.squeeze, torch.flatten, torch.reshape,
               F.softmax, F.log_softmax, torch.softmax, torch.log_softmax, torch.Tensor.softmax,
               torch.Tensor.log_softmax}
_DATA = torch._C.TensorBase.__dict__.get("data")


def remember(table: dict, t: torch.Tensor, kind: str) -> None:
    """Remember a tensor weakly by id (bounded; a dead tensor whose id was reused fails the weakref test)."""
    table[id(t)] = (weakref.ref(t), kind)
    if len(table) > 64:
        for k in list(table)[:32]:
            del table[k]


def recall(table: dict, t) -> str | None:
    ent = table.get(id(t))
    return ent[1] if ent is not None and ent[0]() is t else None


def follow(w, func, args: tuple, out) -> None:
    """One function call in a deep step while model outputs are followed (watch._Mode)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return
    if func in _EQ_FUNCS:
        if len(args) >= 2 and isinstance(args[1], torch.Tensor):
            for vals, labels in ((args[0], args[1]), (args[1], args[0])):
                if recall(w.followed, vals) == "values" and vals.is_floating_point() and labels.numel() >= 2 \
                        and not labels.is_floating_point() and not labels.is_complex() and labels.dtype != torch.bool:
                    _values_compared(w, vals, labels)
                    return
        return
    kind = recall(w.followed, args[0])
    if kind is None:
        return
    if func in _VALUE_FUNCS:
        if kind == "out" and isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor):
            remember(w.followed, out[0], "values")  # a tuple: max/topk over a dim (values, indices)
    elif (func in _SAME_FUNCS or getattr(func, "__self__", None) is _DATA) and isinstance(out, torch.Tensor) \
            and out is not args[0]:
        remember(w.followed, out, kind)


def _values_compared(w, vals: torch.Tensor, labels: torch.Tensor) -> None:
    with torch.no_grad():
        v, y = vals.detach().reshape(-1), labels.detach().reshape(-1)
        info = {"compared": int(y.numel()), "example_value": round(float(v[0]), 4), "example_label": int(y[0])}
        if v.numel() == y.numel():
            info["equal"] = int((v.to(y.device) == y).sum())
    from torchwise.diagnose.watch import user_where
    if "compare-values-not-indices" not in w.hits:
        w.hit_info["compare-values-not-indices"] = info  # the first comparison's numbers
    _count(w, "compare-values-not-indices", True, user_where())


def decide_values_compared(w) -> list[Finding]:
    n = w.hits.get("compare-values-not-indices", 0)
    if not n:
        return []
    info = w.hit_info.get("compare-values-not-indices", {})
    equal = f" ({info['equal']} of {info['compared']} equal)" if "equal" in info else ""
    return [Finding("compare-values-not-indices", where=w.hit_where.get("compare-values-not-indices"),
                    message=f"{n} comparison(s) matched integer labels against the values of max/topk over the "
                            f"model's output, not the indices: e.g. score {info.get('example_value')} against label "
                            f"{info.get('example_label')}, over {info.get('compared')} samples{equal}. The accuracy "
                            "computed from it says nothing about the model.",
                    evidence={"comparisons": n} | info)]
