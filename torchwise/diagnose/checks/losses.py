"""Loss-level checks: what goes into the loss function, and what the targets look like.

`inspect` runs inside the loss call (deep steps only) and keeps small counters on the watcher;
`decide` turns the counters into findings at the end.

The task is judged from what the script does, not from names:

* a language model (next-token prediction, a seq2seq decoder) is recognised when the class-index targets
  are token ids: in the same step the model encoded sequences of token ids ((B, T) or (T, B); with
  nn.Embedding, F.one_hot or a table indexed by the ids) over a vocabulary as large as its output
  (num_embeddings == C), or the loss gets a (B, T, C) model output flattened to (B*T, C) over a large
  vocabulary. Its vocabulary is not all seen in a short run and its token frequencies
  are Zipfian by nature: neither is an output/label mismatch or an imbalance to weight.
* one input shared by index masks (transductive graph learning: model(features, adj) over the whole
  graph, the loss on out[idx_train], evaluation on out[idx_val]) is recognised from the row indices
  the model output is indexed with (followed.py); data.py judges train/val overlap on those rows.
"""
from __future__ import annotations

import math

import torch

from torchwise.diagnose.catalog import CATALOG, Finding
from torchwise.diagnose.checks import head_size
from torchwise.diagnose.checks.followed import count_hit, decide_values_compared, note_train_rows
from torchwise.diagnose.checks.label_balance import class_label, imbalance_binary, imbalance_classes  # noqa: F401

_IGNORE_DEFAULT = -100
_LM_MIN_VOCAB = 100        # a flattened (B, T, C) output over at least this many classes reads as a vocabulary
_RECENT_CALLS = 10         # the last checked loss calls whose predictions tell if a minority class is ignored


def _all_finite(t: torch.Tensor) -> bool:
    from torchwise.diagnose.tensors import all_finite
    return all_finite(t)


# autograd nodes that only move, pick or cast values: a sigmoid's output seen through them is still one
_PASS_THROUGH = frozenset({
    "ViewBackward0", "ReshapeAliasBackward0", "UnsafeViewBackward0", "SqueezeBackward0", "SqueezeBackward1",
    "SqueezeBackward2", "UnsqueezeBackward0", "TBackward0", "TransposeBackward0", "PermuteBackward0",
    "ExpandBackward0", "SelectBackward0", "SliceBackward0", "IndexBackward0", "CloneBackward0",
    "ToCopyBackward0", "AsStridedBackward0", "FlattenBackward0", "ContiguousBackward0", "AliasBackward0",
    "UnbindBackward0", "SplitBackward0", "SplitWithSizesBackward0", "NarrowBackward0", "MaskedSelectBackward0",
})
_SIGMOID_NODES = frozenset({"SigmoidBackward0", "SigmoidBackward1"})


def _through_views(node):
    for _ in range(32):
        if node is None or type(node).__name__ not in _PASS_THROUGH:
            return node
        nxt = node.next_functions
        node = nxt[0][0] if nxt else None
    return node


def origin(t: torch.Tensor) -> str | None:
    """The operation that produced a loss input, from its autograd graph: "sigmoid" when the last operation
    that changed its values was a sigmoid (torch.sigmoid, F.sigmoid, nn.Sigmoid, Tensor.sigmoid(_)), seen
    through views, indexing, copies and casts; "sigmoid-sigmoid" for a sigmoid of a sigmoid; None otherwise
    (another operation, or no graph to read)."""
    node = _through_views(getattr(t, "grad_fn", None))
    if node is None or type(node).__name__ not in _SIGMOID_NODES:
        return None
    nxt = node.next_functions
    inner = _through_views(nxt[0][0] if nxt else None)
    if inner is not None and type(inner).__name__ in _SIGMOID_NODES:
        return "sigmoid-sigmoid"
    return "sigmoid"


def inspect(w, kind: str, inp: torch.Tensor, target: torch.Tensor, kwargs: dict, where: str | None,
            made_by: str | None = None, labelled: bool = True) -> None:
    """One loss call's input and target. `labelled`: the target comes from the data; a target the script made
    (a GAN's labels, a contrastive loss's zeros), computed from a model (a TD target) or the model's own input
    (an autoencoder) tells nothing about labels, so only what is wrong whatever the target (the input's form,
    shapes that broadcast) is judged then."""
    note_train_rows(w, inp)
    if kind in ("ce", "nll"):
        _inspect_classification(w, kind, inp, target, kwargs, where, labelled)
    elif kind in ("bcelogits", "bce"):
        _inspect_binary(w, kind, inp, target, kwargs, where, made_by, labelled)
    elif kind == "reg":
        _inspect_regression(w, inp, target, where, labelled)
    if target.is_floating_point() and w.inputs.nonfinite_input is None and not _all_finite(target):
        w.inputs.nonfinite_input = {"step": w.steps, "n_nonfinite": int((~torch.isfinite(target)).sum()),
                             "numel": target.numel(), "what": "targets", "where": where}


def _input_form(x: torch.Tensor, cdim: int, low_precision: bool) -> str | None:
    """What a classification loss's input is, from its numbers alone.

    "probs": every value in [0, 1] and each slice sums to 1 over the class dim (softmax output);
    "probs-dim<d>": the same over another dim d (softmax over the batch or time dim);
    "ones": every value exactly 1 (softmax over a dim of size 1, e.g. F.softmax(x) on (1, B, C): the
    implicit dim of a 3-D tensor is 0); "zeros": every value exactly 0 (log_softmax over a dim of size 1);
    "logprobs": every value <= 0 and logsumexp over the class dim is 0 (log_softmax output); None: logits.
    """
    if x.numel() < 2:
        return None
    mn, mx = float(x.min()), float(x.max())
    if mn == mx:
        return "ones" if mn == 1.0 else "zeros" if mn == 0.0 else None
    tol = 2e-2 if low_precision else 1e-3
    if mn >= 0 and mx <= 1.0 + tol:
        if bool(((x.sum(cdim) - 1).abs() <= tol).all()):
            return "probs"
        for d in range(x.dim()):
            if d != cdim and x.shape[d] > 1 and bool(((x.sum(d) - 1).abs() <= tol).all()):
                return f"probs-dim{d}"
        return None
    if mx <= tol * 1e-2 and bool((torch.logsumexp(x, cdim).abs() <= 5 * tol).all()):
        return "logprobs"
    return None


def _inspect_classification(w, kind, inp, target, kwargs, where, labelled: bool = True) -> None:
    if inp.dim() < 1:
        return
    cdim = 1 if inp.dim() >= 2 else 0
    C = int(inp.shape[cdim])
    if C == 1:
        count_hit(w, "wrong-loss-for-task", True, where, {"reason": "ce-one-output"})
        return
    x = inp.float()
    form = _input_form(x, cdim, inp.dtype in (torch.float16, torch.bfloat16))
    probs_like = form is not None and form != "logprobs"
    loss = "cross_entropy" if kind == "ce" else "nll_loss"
    count_hit(w, "softmax-before-loss", probs_like, where, {"loss": loss, "form": form, "shape": list(inp.shape)})
    wrong = False
    if kind == "ce":
        count_hit(w, "log-softmax-into-cross-entropy", form == "logprobs", where)
    elif not probs_like and form != "logprobs" and bool(x.max() > 1e-4):
        wrong = True
        count_hit(w, "wrong-loss-for-task", True, where, {"reason": "nll-raw-logits"})
    if not labelled:
        return
    if target.is_floating_point():
        if target.shape == inp.shape:
            t = target.float()
            ok = bool(t.min() >= 0) and bool((t.sum(cdim) - 1).abs().max() < 1e-3)
            if not ok:
                count_hit(w, "wrong-loss-for-task", True, where, {"reason": "ce-real-targets"})
                return
        if not wrong:
            count_hit(w, "wrong-loss-for-task", False, where)
        return
    if not wrong:
        count_hit(w, "wrong-loss-for-task", False, where)
    ignore = kwargs.get("ignore_index", _IGNORE_DEFAULT)
    labels = target.flatten()
    labels = labels[labels != ignore]
    if labels.numel() == 0 or bool(labels.min() < 0) or bool(labels.max() >= C):
        return
    if target.dim() != 1 or inp.dim() != 2:
        return  # dense targets (segmentation, (B, C, T) sequences): per-pixel/token frequencies are another matter
    _count_classes(w, inp, target, labels, kwargs, where, C, ignore)


def _count_classes(w, inp, target, labels, kwargs, where, C: int, ignore) -> None:
    """A classification batch's labels (in range, one per sample): class counts, single-class batches, and
    what the model predicts in the last calls (does it ever predict the rare class?)."""
    c = w.loss_watch.cls
    lm = looks_like_lm(w, inp, labels, C)
    c["lm_calls"] = c.get("lm_calls", 0) + int(lm)
    counts = torch.bincount(labels.cpu(), minlength=C)
    if c["counts"] is None or c["C"] != C:
        c["counts"], c["C"] = counts.clone(), C  # a copy: recent keeps its own batch counts
        c["recent"], c["max_label"], c["max_label_batch"] = [], -1, 0
    else:
        c["counts"] += counts
    c["n"] += labels.numel()
    c["batches"] += 1
    top = int(labels.max())
    if top > c.get("max_label", -1):
        c["max_label"], c["max_label_batch"] = top, c["batches"]
    if labels.numel() >= 4:
        # per number of classes: a multi-task step (a language model's loss over the vocabulary and a choice
        # among 4 candidates) has one order question per loss, and mixing their counts judges neither
        o = c.setdefault("order", {}).setdefault(C, {"single": 0, "batches": 0, "sizes": {}, "counts": None})
        o["single"] += int(bool((labels == labels[0]).all()))
        o["batches"] += 1
        o["sizes"][labels.numel()] = o["sizes"].get(labels.numel(), 0) + 1  # what shuffled batches would hold
        o["counts"] = counts.clone() if o["counts"] is None else o["counts"] + counts
    c["weighted"] = c["weighted"] or kwargs.get("weight") is not None
    c["where"] = c["where"] or where
    if C <= 1000 and not lm:  # what the model predicts in the last calls: does it ever predict the rare class?
        keep = target.flatten() != ignore
        pred = torch.bincount(inp.argmax(1)[keep].cpu(), minlength=C)
        recent = c.setdefault("recent", [])
        recent.append((pred, counts))
        del recent[:-_RECENT_CALLS]


def looks_like_lm(w, inp, labels, C) -> bool:
    """Targets that are token ids: next-token prediction over a vocabulary (see the module doc)."""
    tok = w.tokens_rows.tokens.get(C)  # sequences of token ids encoded over a vocabulary as large as the output
    # ... with a target per position (a next-token shift drops one per sequence): one label per sequence is no token
    if tok is not None and tok["step"] == w.steps and 2 * labels.numel() >= tok.get("positions", 0):
        return True
    if C >= _LM_MIN_VOCAB:
        ptr, n = inp.data_ptr(), inp.numel()
        for ref, _ in list(w.followed.values()):
            t = ref()
            if t is not None and t.dim() >= 3 and t.numel() == n and t.data_ptr() == ptr \
                    and sum(s > 1 for s in t.shape[:-1]) >= 2:
                return True  # a (B, T, C) output flattened to (B*T, C): one prediction per position
    return False


def _inspect_binary(w, kind, inp, target, kwargs, where, made_by=None, labelled: bool = True) -> None:
    x = inp.float()
    # judged by where the input came from, not by its values: logits that happen to lie in (0, 1) are
    # logits; a sigmoid's output is a probability whatever its values
    if kind == "bcelogits":
        count_hit(w, "double-sigmoid", made_by in ("sigmoid", "sigmoid-sigmoid"), where)
    else:  # binary_cross_entropy wants one sigmoid: two are the same mistake
        count_hit(w, "double-sigmoid~bce", made_by == "sigmoid-sigmoid", where)
    t = target.float()
    if bool(t.min() < 0) or bool(t.max() > 1):
        count_hit(w, "wrong-loss-for-task", True, where, {"reason": "bce-targets-not-01",
                                                       "target_max": float(t.max())})
        return
    if not labelled:
        return
    b = w.loss_watch.bin
    pos = t > 0.5
    b["pos"] += int(pos.sum())
    b["neg"] += int((~pos).sum())
    b["weighted"] = b["weighted"] or kwargs.get("pos_weight") is not None or kwargs.get("weight") is not None
    b["where"] = b["where"] or where
    if x.shape == t.shape:  # predicted positives / negatives of the last calls
        said = x > (0.0 if kind == "bcelogits" else 0.5)
        recent = b.setdefault("recent", [])
        recent.append((int(said.sum()), int((~said).sum()), int(pos.sum()), int((~pos).sum())))
        del recent[:-_RECENT_CALLS]


def _inspect_regression(w, inp, target, where, labelled: bool = True) -> None:
    t = target.float()
    if t.numel() < 8:
        return
    try:
        expanded = torch.broadcast_shapes(inp.shape, target.shape).numel() > max(inp.numel(), target.numel())
    except RuntimeError:
        expanded = False
    if expanded:
        count_hit(w, "wrong-loss-for-task", True, where, {"reason": "broadcast", "input_shape": list(inp.shape),
                                                       "target_shape": list(target.shape)})
        return
    if not labelled:
        return
    integral = bool((t == t.round()).all()) and bool(t.min() >= 0)
    if not integral:
        count_hit(w, "wrong-loss-for-task", False, where)
        return
    distinct = int(torch.unique(t).numel())
    onehot = t.dim() == 2 and t.shape[1] >= 2 and bool((t.sum(1) == 1).all()) and bool(t.max() <= 1)
    # one value for the whole batch (a least-squares GAN's real/fake target, a fixed goal) says nothing of
    # class labels: labels of a batch take several values
    labels = 2 <= distinct <= 20 and (inp.shape[-1] == 1 or inp.dim() == 1)
    count_hit(w, "wrong-loss-for-task", bool(onehot or labels), where,
           {"reason": "regression-on-classes", "distinct_targets": distinct, "one_hot": onehot})


def decide(w) -> list[Finding]:
    """The loss family's findings: one function per mistake, called in the order they are listed."""
    out: list[Finding] = []
    out.extend(_softmax_before_loss(w))
    out.extend(_log_softmax_into_cross_entropy(w))
    out.extend(_double_sigmoid(w))
    out.extend(_wrong_loss_for_task(w))
    out.extend(_decide_labels(w))
    out.extend(decide_values_compared(w))
    return out


def _rate(h: dict, key: str) -> tuple[float, int]:
    """The share of the checked calls in which mistake `key` was seen, and how many calls were checked."""
    n = h.get(key + ":n", 0)
    return (h.get(key, 0) / n if n else 0.0), n


def _softmax_before_loss(w) -> list[Finding]:
    """softmax-before-loss: probabilities (or a softmax over the wrong dim) into a loss that wants logits."""
    out: list[Finding] = []
    h = w.hits
    r, n = _rate(h, "softmax-before-loss")
    if n >= 2 and r >= 0.8:
        info = w.hit_info.get("softmax-before-loss", {})
        loss = info.get("loss", "cross_entropy")
        want = "logits (raw scores)" if loss == "cross_entropy" else "log-probabilities (log_softmax over the classes)"
        form = info.get("form") or "probs"
        k, shape = h["softmax-before-loss"], info.get("shape")
        what = {
            "probs": "is already a probability distribution (every value is in [0, 1] and they sum to 1 over "
                     "the class dim)",
            "ones": f"is exactly 1 everywhere (shape {shape}): a softmax ran over a dimension of size 1 (F.softmax "
                    "without dim= picks dim 0 for a 1-D or 3-D tensor, such as an RNN's (1, B, C) hidden-state "
                    "output), so every 'probability' is 1, the loss is constant and no gradient flows back",
            "zeros": f"is exactly 0 everywhere (shape {shape}): a log_softmax ran over a dimension of size 1 "
                     "(log_softmax without dim= picks dim 0 for a 1-D or 3-D tensor), so the loss is constant and "
                     "no gradient flows back",
        }.get(form)
        if what is None:  # probs-dim<d>: a softmax over the wrong dim
            d = form[len("probs-dim"):]
            what = (f"is a softmax over dim {d}, not over the classes (dim {1 if shape and len(shape) >= 2 else 0}) "
                    f"of the shape-{shape} input: every value is in [0, 1] and they sum to 1 over dim {d}")
        out.append(Finding("softmax-before-loss", where=w.hit_where.get("softmax-before-loss"),
                           message=f"In {k} of {n} checked calls the input to {loss} {what}; {loss} expects {want}.",
                           evidence={"calls_with_probabilities": k, "calls_checked": n, "input_form": form,
                                     "input_shape": shape}))
    return out


def _log_softmax_into_cross_entropy(w) -> list[Finding]:
    """log-softmax-into-cross-entropy: redundant, not harmful (a hint)."""
    out: list[Finding] = []
    h = w.hits
    r, n = _rate(h, "log-softmax-into-cross-entropy")
    if n >= 2 and r >= 0.8 and "log-softmax-into-cross-entropy" in CATALOG:
        k = h["log-softmax-into-cross-entropy"]
        out.append(Finding(
            "log-softmax-into-cross-entropy", where=w.hit_where.get("log-softmax-into-cross-entropy"),
            message=f"The input to cross_entropy is already log-probabilities in {k} of {n} calls (every value is "
                    "<= 0 and its logsumexp over the classes is 0: a log_softmax output), and cross_entropy applies "
                    "log_softmax again. log_softmax is idempotent, so the loss and its gradients are exactly those "
                    "of the raw scores: the second log_softmax is redundant, not harmful.",
            evidence={"calls_with_log_probabilities": k, "calls_checked": n}, severity="info",
            maybe_fine="cross_entropy(log_softmax(x)) == cross_entropy(x) in value and gradient, so training is "
                       "unaffected; it only matters where the same output is used as raw logits by something that "
                       "is not shift-invariant (a sigmoid, BCE, averaging logits of several models)."))
    return out


def _double_sigmoid(w) -> list[Finding]:
    """double-sigmoid: a sigmoid before a loss that applies one, or a sigmoid twice."""
    out: list[Finding] = []
    h = w.hits
    for key, form in (("double-sigmoid", "sigmoid-into-logits-loss"), ("double-sigmoid~bce", "sigmoid-twice")):
        r, n = _rate(h, key)
        if n >= 2 and r >= 0.9:
            k = h[key]
            if form == "sigmoid-twice":
                msg = (f"The input to binary_cross_entropy is a sigmoid of a sigmoid in {k} of {n} checked calls: "
                       "the model's output is already a probability and a second sigmoid squeezes it into "
                       "(0.27, 0.73), so the loss can never get near 0.")
            else:
                msg = (f"The input to binary_cross_entropy_with_logits was produced by a sigmoid in {k} of {n} "
                       "checked calls: it is already a probability, and the loss applies a sigmoid again.")
            out.append(Finding("double-sigmoid", where=w.hit_where.get(key), message=msg,
                               evidence={"calls_from_sigmoid": k, "calls_checked": n, "form": form}))
            break
    return out


def _wrong_loss_for_task(w) -> list[Finding]:
    """wrong-loss-for-task: the loss does not fit the outputs and targets."""
    out: list[Finding] = []
    h = w.hits
    r, n = _rate(h, "wrong-loss-for-task")
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
        msg += f" (Seen in {h['wrong-loss-for-task']} of {n} checked loss calls.)"
        out.append(Finding("wrong-loss-for-task", where=w.hit_where.get("wrong-loss-for-task"), message=msg,
                           evidence={k: v for k, v in info.items()} | {"calls": h["wrong-loss-for-task"]}))
    return out



def _decide_labels(w) -> list[Finding]:
    out: list[Finding] = []
    c = w.loss_watch.cls
    if c["counts"] is not None and c["n"] >= 100:
        counts = c["counts"].tolist()
        C = c["C"]
        present = [i for i, k in enumerate(counts) if k > 0]
        split = getattr(w, "class_counts", None)
        if split is not None and len(split) == C and any(split):
            # the run's training split counts every class (torchwise train): the checked batches are a sample of
            # it, where a rare class 0 may be missing without the labels starting at 1
            present = [i for i, k in enumerate(split) if k > 0]
        lo, hi = present[0], present[-1]
        contiguous = len(present) == hi - lo + 1
        lm = c.get("lm_calls", 0) >= 0.5 * c["batches"]  # next-token targets: a vocabulary, not a label set
        if lo >= 1 and len(present) >= 2 and contiguous and not lm:
            out.append(Finding("labels-not-zero-based", where=c["where"],
                               message=f"Over {c['n']} labels the smallest is {lo} and the largest {hi}: class 0 never "
                                       f"occurs, while the model has {C} outputs (0..{C - 1}).",
                               evidence={"min_label": lo, "max_label": hi, "outputs": C, "labels_seen": c["n"]}))
        elif lo == 0 and contiguous and hi + 1 < C and not lm:
            f = head_size.classes_mismatch(c, counts, hi + 1, C)
            if f is not None:
                out.append(f)
        if not lm:
            out.extend(imbalance_classes(c, counts, present, getattr(w, "class_names", None), steps=w.steps,
                                          split_counts=getattr(w, "class_counts", None)))
    out.extend(imbalance_binary(w.loss_watch.bin, steps=w.steps))
    return out
