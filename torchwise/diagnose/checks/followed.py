"""Tensors followed from the models' outputs (deep steps, by watch's function mode), and what they tell.

* accuracy: max/topk over a model output, and its values (not its indices) compared with integer labels
  (compare-values-not-indices);
* the task (losses.py, data.py read it): token-id sequences encoded over a vocabulary (a language model's
  targets are tokens), and model outputs indexed by rows (out[idx_train] and out[idx_val] of one
  full-input forward: transductive learning, judged on its rows).

The evidence of the task is a `TokensAndRows` the watcher owns (`w.tokens_rows`).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import functional as F

from torchwise.diagnose.bounded import put_newest
from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.user_code import user_where


@dataclass
class TokensAndRows:
    """The task's evidence from followed tensors (see the module doc)."""

    # vocabulary size -> {"step": its last encoding's step, "positions": how many ids that encoding held}
    tokens: dict[int, dict] = field(default_factory=dict)
    # (vocabulary size, id of its table or None for one_hot) -> [step, lookups of one position this step that
    # differed from the one before, last ids]
    positions: dict[tuple, list] = field(default_factory=dict)
    # row sets used to index a model output ("sets": key -> rows), the training loss's ("train": rows of the
    # output -> keys), each evaluation step's ("eval": rows of the output -> step -> keys), and "where"
    masks: dict[str, Any] = field(default_factory=lambda: {"sets": {}, "train": {}, "eval": {}})
    rows_of: dict[int, tuple] = field(default_factory=dict)  # id(tensor) -> (weakref, row-set key, rows of the output)


def count_hit(w, key: str, hit: bool, where: str | None, info: dict | None = None) -> None:
    """One check of `key` made (key:n), and a hit if `hit`: the counters a detector later judges a share of."""
    w.hits[key + ":n"] = w.hits.get(key + ":n", 0) + 1
    if hit:
        w.hits[key] = w.hits.get(key, 0) + 1
        w.hit_where.setdefault(key, where)
        if info:
            w.hit_info.setdefault(key, {}).update(info)


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
    put_newest(table, id(t), (weakref.ref(t), kind))


def recall(table: dict, t) -> str | None:
    ent = table.get(id(t))
    return ent[1] if ent is not None and ent[0]() is t else None


def follow(w, func, args: tuple, out) -> None:
    """One function call in a deep step while model outputs are followed (function_mode.FunctionMode)."""
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
    if func in _EMBEDDING_FUNCS:
        _note_tokens(w, args[0], args[1] if len(args) >= 2 else None)
        return
    if func is _ONE_HOT:
        n = args[1] if len(args) >= 2 else -1
        _note_tokens(w, args[0], n if isinstance(n, int) and n > 0 else None)
        return
    if func is _GETITEM and isinstance(args[0], torch.nn.Parameter) and len(args) >= 2 \
            and isinstance(args[1], torch.Tensor):
        _note_tokens(w, args[1], args[0])  # a table indexed by token ids: emb = C[X]
        return
    kind = recall(w.followed, args[0])
    if kind is None:
        return
    if func in _VALUE_FUNCS:
        if kind == "out" and isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor):
            remember(w.followed, out[0], "values")  # a tuple: max/topk over a dim (values, indices)
            if isinstance(out[1], torch.Tensor):
                remember(w.followed, out[1], "pred")
    elif func in _ARGMAX_FUNCS:
        if kind == "out" and isinstance(out, torch.Tensor):
            remember(w.followed, out, "pred")
    elif func is _GETITEM:
        if kind in ("out", "pred") and isinstance(out, torch.Tensor) and len(args) >= 2:
            _note_rows(w, args[0], args[1], out, kind)
    elif (func in _SAME_FUNCS or getattr(func, "__self__", None) is _DATA) and isinstance(out, torch.Tensor) \
            and out is not args[0]:
        remember(w.followed, out, kind)
        sub = _rows_of(w, args[0])
        if sub is not None:
            _remember_rows(w, out, *sub)


# --------------------------------------------------------------------------- tokens and row masks
# Evidence of the task, gathered while model outputs are followed (deep steps):
# * the step of the last encoding of token-id sequences per vocabulary size (TokensAndRows.tokens): nn.Embedding,
#   F.one_hot or a table indexed by ids; a vocabulary as large as the output makes the targets tokens;
# * model outputs indexed by rows, out[idx] (TokensAndRows.rows_of): a training loss on out[idx_train] and an
#   evaluation on out[idx_val] of one full-input forward (transductive learning) are judged on their rows.

_EMBEDDING_FUNCS = {F.embedding}
_ONE_HOT = F.one_hot
_ARGMAX_FUNCS = {torch.argmax, torch.Tensor.argmax}
_GETITEM = torch.Tensor.__getitem__
_MAX_MASKS = 256


def _note_tokens(w, ids: torch.Tensor, weight) -> None:
    """Token ids encoded for the model (nn.Embedding, F.one_hot, a table indexed by ids), per vocabulary size.
    Sequences count (two dims > 1: (B, T) or (T, B)), and so does a decoder fed one position at a time: a
    (B,) or (1, B) lookup of the same vocabulary 3+ times in one step, each with other ids than the last
    (teacher forcing or greedy decoding). A lookup of the same ids again and again is a label embedding (a
    conditional GAN's labels, embedded in the generator and in the discriminator), not text."""
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        V = int(weight.shape[0])
    elif isinstance(weight, int):
        V = weight
    else:
        return
    if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
        return
    table = w.tokens_rows.tokens
    if not (len(table) < 16 or V in table):  # token and position embeddings have their own sizes
        return
    if sum(s > 1 for s in ids.shape) >= 2:
        table[V] = {"step": w.steps, "positions": ids.numel()}
        return
    if ids.numel() < 2 or ids.numel() > 4096:
        return
    pos = w.tokens_rows.positions
    # one table looked up again and again (a decoder's embedding); several tables of one size each looked up once
    # (a table's categorical columns, each with its own embedding) are no decoder
    key = (V, id(weight)) if isinstance(weight, torch.Tensor) else (V, None)
    rec = pos.get(key)
    if rec is None or rec[0] != w.steps:
        rec = [w.steps, 0, None]
        put_newest(pos, key, rec)
    flat = ids.detach().flatten()
    if rec[2] is None or rec[2].shape != flat.shape or not torch.equal(rec[2], flat):
        rec[1] += 1
    rec[2] = flat.clone()
    if rec[1] >= 3:
        table[V] = {"step": w.steps, "positions": ids.numel()}


def masks_of(w) -> dict:
    return w.tokens_rows.masks


def _row_index(t: torch.Tensor, idx) -> frozenset | None:
    """The rows of t that t[idx] selects, when idx picks whole rows with a 1-D index or mask tensor."""
    if isinstance(idx, tuple):
        if not idx or any(i is not Ellipsis and not (isinstance(i, slice) and i == slice(None)) for i in idx[1:]):
            return None
        idx = idx[0]
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or t.dim() < 1 or idx.is_floating_point() \
            or idx.is_complex():
        return None
    n = int(t.shape[0])
    if idx.dtype == torch.bool:
        if idx.numel() != n:
            return None
        rows = idx.nonzero().flatten()
    else:
        rows = idx.long() % max(n, 1)
    if rows.numel() == 0 or rows.numel() > 200_000:
        return None
    return frozenset(rows.cpu().tolist())


def _note_rows(w, t: torch.Tensor, idx, out: torch.Tensor, kind: str) -> None:
    rows = _row_index(t, idx)
    if rows is None:
        return
    m = masks_of(w)
    key = (len(rows), hash(rows))
    if key not in m["sets"]:
        if len(m["sets"]) >= _MAX_MASKS:
            return
        m["sets"][key] = rows
    n = int(t.shape[0])
    remember(w.followed, out, kind)  # out[idx] is followed like out: accuracy on a subset is checked too
    _remember_rows(w, out, key, n)
    if (not torch.is_grad_enabled() or w.phase_now == "eval") and w.steps > 0:  # step 0: a baseline
        m["eval"].setdefault(n, {}).setdefault(w.steps, set()).add(key)
        if "where" not in m:
            m["where"] = user_where()


def _remember_rows(w, t: torch.Tensor, key, n: int) -> None:
    put_newest(w.tokens_rows.rows_of, id(t), (weakref.ref(t), key, n))


def _rows_of(w, t: torch.Tensor):
    ent = w.tokens_rows.rows_of.get(id(t))
    return (ent[1], ent[2]) if ent is not None and ent[0]() is t else None


def note_train_rows(w, inp: torch.Tensor) -> None:
    """A training loss: is its input rows of a model output (out[idx_train])? inp is a detached alias."""
    table = w.tokens_rows.rows_of
    if not table:
        return
    ptr, shape = inp.data_ptr(), inp.shape
    for ref, key, n in list(table.values()):
        t = ref()
        if t is not None and t.shape == shape and t.data_ptr() == ptr:
            masks_of(w)["train"].setdefault(n, set()).add(key)
            return


def shared_input_masks(w) -> dict:
    """Per row count N of a model output indexed by masks: the training-loss rows and, per evaluation
    step, the row sets evaluated. data.py uses it to judge train/val overlap on rows, not inputs."""
    m = w.tokens_rows.masks
    found = {}
    for n, train_keys in m["train"].items():
        train = set().union(*(m["sets"][k] for k in train_keys))
        evals = m["eval"].get(n)
        if not evals:
            continue
        found[n] = {"train": train, "eval": {s: [m["sets"][k] for k in keys] for s, keys in evals.items()},
                    "where": m.get("where")}
    return found


def _values_compared(w, vals: torch.Tensor, labels: torch.Tensor) -> None:
    with torch.no_grad():
        v, y = vals.detach().reshape(-1), labels.detach().reshape(-1)
        info = {"compared": int(y.numel()), "example_value": round(float(v[0]), 4), "example_label": int(y[0])}
        if v.numel() == y.numel():
            info["equal"] = int((v.to(y.device) == y).sum())
    if "compare-values-not-indices" not in w.hits:
        w.hit_info["compare-values-not-indices"] = info  # the first comparison's numbers
    count_hit(w, "compare-values-not-indices", True, user_where())


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
