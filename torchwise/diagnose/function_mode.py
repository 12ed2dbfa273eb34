"""The TorchFunctionMode through which the watcher sees functional calls, and the warnings those calls raise.

Its own module because it is the one part of the watcher that sits inside every torch call of the watched
script: what it sees (losses, relu, accumulation, model outputs followed to their comparison, parameter
writes) it hands to the Watcher's public methods, and the warnings raised inside a call are recorded and
issued again from the frame they would name without the mode. The two belong together: the frames the
mode inserts are exactly what the warnings' re-issue has to see through.
"""
from __future__ import annotations

import os
import sys
import threading as _threading
import warnings as _warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from torchwise.diagnose.checks import followed, symmetry
from torchwise.diagnose.objective import LOSS_TARGET_ARG
from torchwise.diagnose.tensors import compiling

_LOSS_KINDS = {
    F.cross_entropy: "ce", F.nll_loss: "nll",
    F.binary_cross_entropy_with_logits: "bcelogits", F.binary_cross_entropy: "bce",
    F.mse_loss: "reg", F.l1_loss: "reg", F.smooth_l1_loss: "reg", F.huber_loss: "reg",
}
_RELU_FUNCS = {F.relu, torch.relu, torch.Tensor.relu}
_TOKEN_FUNCS = {F.embedding, F.one_hot}
# how a hand-written update writes a parameter: p -= lr * p.grad, p.data.add_(g, alpha=-lr), p.copy_(...)
_INPLACE_FUNCS = {getattr(torch.Tensor, n) for n in ("__isub__", "__iadd__", "sub_", "add_", "copy_", "addcmul_",
                                                       "addcdiv_", "mul_", "lerp_")}
_ACCUM_NAMES = {"add", "add_", "__add__", "__radd__", "__iadd__", "sum", "stack", "cat"}
# operations that turn finite inputs into NaN/inf by themselves (log of 0, sqrt of < 0, division by 0, overflow):
# looked at in every deep step of a check run, so that a NaN born late is still named (other operations only
# in the first OP_HUNT_STEPS steps and after a non-finite value is seen)
_NAN_PRONE_NAMES = ("log", "log2", "log10", "log1p", "sqrt", "rsqrt", "div", "true_divide", "pow", "exp", "exp2",
                    "reciprocal", "acos", "asin", "atanh", "acosh", "lgamma", "digamma", "erfinv", "std", "var",
                    "xlogy", "logit", "float_power", "fmod", "remainder")
_NAN_PRONE = {f for f in [getattr(torch, n, None) for n in _NAN_PRONE_NAMES]
              + [getattr(torch.Tensor, n, None) for n in _NAN_PRONE_NAMES]
              + [getattr(torch.Tensor, n + "_", None) for n in _NAN_PRONE_NAMES]
              + [getattr(torch.Tensor, n, None) for n in ("__truediv__", "__rtruediv__", "__itruediv__",
                                                           "__pow__", "__rpow__", "__ipow__", "__mod__")]
              if f is not None}
# torch calls made with gradients off (outside a model's layers and the optimizer's update, which are skimmed
# already) analysed at most this many in a row: a rollout or replay collection under no_grad (PPO's 4,000
# environment steps: ~370,000 distribution and tensor calls before one update) shows what its first calls show,
# and its outputs reach no backward(); the rest passes through with only what a hand-written update needs. The
# count starts again at every optimizer step and at every call made with gradients on (an update converting its
# sampled batch), so that a target computed under no_grad for the next loss is still followed. An evaluation
# pass stays far below it (a few calls per batch outside the model)
NOGRAD_CALLS_IN_A_ROW = 20_000


# --------------------------------------------------------------------------- warnings raised inside torch calls

_OVERRIDES_FILE = os.path.realpath(torch.overrides.__file__)
_ALWAYS = ("always", None, Warning, None, 0)
# the torch call now running through our mode: [warnings.filters while it runs, the show function it
# replaced, the owning thread, the records]; None when no call is running
_live: list | None = None


def _record_warning(msg) -> None:
    """warnings._showwarnmsg while our mode runs a torch call: keep the warning and the frame it names."""
    live = _live
    if live is None or _warnings.filters is not live[0]:
        # a catch_warnings inside the call (torch's own) took over: its recorder, not ours
        return (live[1] if live is not None else _warnings._showwarnmsg_impl)(msg)
    if _threading.get_ident() != live[2]:
        live[3].append((msg, None))  # another thread's warning: issued again as it came
        return None
    live[3].append((msg, _frame_without_mode(msg)))
    return None


def _frame_without_mode(msg):
    """The frame `msg` would name if our mode were not there (None: keep its own filename and line).

    Our mode adds frames between the caller and the torch function: _call_torch, __torch_function__ and,
    for a torch function written in Python (F.softmax), torch.overrides' dispatcher and the function's
    outer call. A warning aimed at the caller (a C++ TORCH_WARN: stacklevel=1; F.softmax: stacklevel=3)
    names one of those frames; without the mode the same stacklevel names the caller (or one above)."""
    f = sys._getframe(2)
    while f is not None and f.f_code is not _CALL_CODE:
        if f.f_code.co_filename == msg.filename and f.f_lineno == msg.lineno:
            return f  # a frame inside the torch call: the same frame without the mode
        f = f.f_back
    if f is None:
        return None
    inserted = [f]
    g = f.f_back
    if g is not None and g.f_code is _TF_CODE:
        inserted.append(g)
        g = g.f_back
    dispatched = False
    while g is not None and os.path.realpath(g.f_code.co_filename) == _OVERRIDES_FILE:
        inserted.append(g)
        g = g.f_back
        dispatched = True
    if dispatched and g is not None:
        inserted.append(g)  # the torch function's outer call, which handed the call to the dispatcher
        g = g.f_back
    up = g

    def climb(frame, n):
        for _ in range(n):
            if frame is None:
                break
            frame = frame.f_back
        return frame

    for i, h in enumerate(inserted):
        if h.f_code.co_filename == msg.filename and h.f_lineno == msg.lineno:
            return climb(up, i)
    h = up
    while h is not None:
        if h.f_code.co_filename == msg.filename and h.f_lineno == msg.lineno:
            return climb(h, len(inserted))
        h = h.f_back
    return None


def _reissue(records: list) -> None:
    """Issue recorded warnings again, each from its frame, as the interpreter would have (its filters,
    the frame's module name and __warningregistry__)."""
    for msg, frame in records:
        if frame is None:
            _warnings.warn_explicit(msg.message, msg.category, msg.filename, msg.lineno, source=msg.source)
            continue
        g = frame.f_globals
        registry = g.get("__warningregistry__")
        if registry is None:
            registry = g["__warningregistry__"] = {}
        module = g.get("__name__")
        if not isinstance(module, str):
            module = "<string>"
        _warnings.warn_explicit(msg.message, msg.category, frame.f_code.co_filename, frame.f_lineno,
                                module=module, registry=registry, source=msg.source)


def _call_torch(func, args, kwargs):
    """func(*args, **kwargs) for our mode, with the warnings it raises attributed to the frame they would
    name without the mode, and judged by the user's filters there ("error" included).

    While the call runs, warnings are recorded (warnings.filters and warnings._showwarnmsg swapped by
    assignment: the warnings API would bump the filters' version, and every registry would forget the
    "default"/"once" warnings it has shown); then each is issued again with warnings.warn_explicit from
    its frame, so filters, catch_warnings and pytest.warns see what they would see without the checker."""
    global _live
    if _live is not None:  # a torch call made inside ours (our mode is off there; user code run by torch)
        return func(*args, **kwargs)
    filters = [_ALWAYS]
    saved_filters, saved_show = _warnings.filters, _warnings._showwarnmsg
    live = _live = [filters, saved_show, _threading.get_ident(), []]
    _warnings.filters, _warnings._showwarnmsg = filters, _record_warning
    try:
        return func(*args, **kwargs)
    finally:
        _live = None
        if _warnings.filters is filters:
            if len(filters) != 1 or filters[0] is not _ALWAYS:
                # the call ran code that changed the filters (a hook calling warnings.simplefilter): keep the
                # entries it added, in front of the user's, as they would be without the swap
                added = [e for e in filters if e is not _ALWAYS]
                if added:
                    saved_filters[:0] = [e for e in added if e not in saved_filters]
                    _warnings._filters_mutated()
            _warnings.filters = saved_filters
        if _warnings._showwarnmsg is _record_warning:
            _warnings._showwarnmsg = saved_show
        if live[3]:
            _reissue(live[3])


_CALL_CODE = _call_torch.__code__


class FunctionMode(TorchFunctionMode):
    """Sees functional calls (losses, relu, accumulation of loss tensors, max/topk of model outputs and
    what they are compared with) in deep steps, and the writes that initialize parameters."""

    def __init__(self, watcher: Any):
        super().__init__()
        self.w = watcher
        self.loaders = watcher.loaders        # read on every torch call: one lookup, as before
        self.loss_watch = watcher.loss_watch  # the losses seen (deep steps)
        self.optim_steps = watcher.optim_steps  # a hand-written update is a step
        self.models = watcher.models          # whether a model's forward is running (its stack of layers)
        self.deep = watcher.deep              # whether this step is a deep one; the NaN hunt
        self.active = True
        self.analysed = 0  # torch calls looked at beyond the NaN hunt (the cost cuts' tests count them)
        self.nograd_run = 0  # of them, made with gradients off in a row (see NOGRAD_CALLS_IN_A_ROW) ...
        self.run_step = 0    # ... since this optimizer step (w.steps): a new step starts a new run

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        w = self.w
        fetching = self.loaders.in_loader_fetch
        if not self.active or compiling() or (fetching and fetching == _threading.get_ident()):
            return func(*args, **kwargs)  # (dynamo must not trace the warnings swap; a batch being made is not the step)
        if self.optim_steps.manual_watch and func in _INPLACE_FUNCS:
            self.optim_steps.note_manual_update(args)
        grad = torch.is_grad_enabled()
        if self.nograd_run >= NOGRAD_CALLS_IN_A_ROW and not grad and self.run_step == w.steps:
            return _call_torch(func, args, kwargs)
        if not (self.deep.active or w.in_loss_scope) or (
                (self.optim_steps.in_step or self.models.stack) and not grad):
            # (the optimizer's own update, and a model's layers under no_grad: nothing a detector reads, but where
            # a no_grad model output made inside a forward goes: its .detach() and .chunk() are the targets)
            if not (self.deep.active and self.models.stack and w.objective.makers_noted):
                return _call_torch(func, args, kwargs)
            out = _call_torch(func, args, kwargs)
            try:
                w.objective.on_call(func, args, kwargs, out)
            except Exception as exc:  # a checker must never break the user's program
                w.health.internal_error("function mode", exc)
            return out
        out = _call_torch(func, args, kwargs)
        deep = self.deep
        if deep.op_hunt or (w.check_mode and deep.nonfinite_op is None and func in _NAN_PRONE):
            deep.hunt_op(func, args, out)
        if self.models.light_forward and func not in _TOKEN_FUNCS:
            return out  # a model's layers in a light deep step: only the NaN hunt above, and its token encodings
        self.analysed += 1
        grad_after = torch.is_grad_enabled()  # (entering no_grad is itself a call made with gradients on)
        if grad_after or self.run_step != w.steps:
            self.nograd_run, self.run_step = 0, w.steps
        self.nograd_run += not grad_after
        try:
            w.objective.on_call(func, args, kwargs, out)
            self.models.outputs.on_call(args, kwargs, bool(self.models.stack))
            source = w.objective.on_loss_term(func, args, kwargs, out, tokens=self.loss_watch.token_targets) \
                if func in LOSS_TARGET_ARG else None
            kind = _LOSS_KINDS.get(func)
            if kind is not None and len(args) >= 2:
                self.loss_watch.on_loss(kind, func, args[0], args[1], kwargs, out, len(args),
                                        source="data" if source == "tokens" else source)
            elif func in _RELU_FUNCS and deep.active:
                w.models.on_relu_func(args[0] if args else None, out)
            elif self.loss_watch.bw_ids and getattr(func, "__name__", "") in _ACCUM_NAMES:
                self.loss_watch.on_accumulate(args, out)
            elif w.followed or func in _TOKEN_FUNCS:  # model outputs -> their max/topk values -> a comparison
                # with labels; token ids encoded for a model (a language model's), even before its first output
                followed.follow(w, func, args, out)
            if not self.optim_steps.optimizers:  # before any step, where a parameter is written is where it is initialized
                param = args[0] if args else kwargs.get("tensor")  # nn.init.* pass it by keyword
                if isinstance(param, nn.Parameter):
                    symmetry.note_param_write(w, func, param)
        except Exception as exc:  # a checker must never break the user's program
            w.health.internal_error("function mode", exc)
        return out


_TF_CODE = FunctionMode.__torch_function__.__code__
