"""Watch a training run and find its silent mistakes, using PyTorch's own hooks.

One implementation serves three doors:

* `torchwise check script.py` runs an unmodified script under a `Watcher` in *global* mode:
  global module forward (pre-)hooks, global optimizer step pre/post hooks, a TorchFunctionMode
  that sees functional losses (F.cross_entropy, ...), relu and loss bookkeeping, a patched
  `torch.autograd.backward` (which `Tensor.backward` calls) and patched `DataLoader.__init__` /
  `__iter__`. Nothing is known in advance: models are found as the top-level modules with
  parameters that get called, optimizers at their first step, loaders when iterated.
* `torchwise.watch(model=None, optimizer=None)` is a context manager around a user's own loop
  (global mode, or local hooks on the given model/optimizer).
* The Trainer attaches a Watcher to its own model/optimizer in *driven* mode: it tells the Watcher
  what it already knows (phase, loss, the end of each step) instead of being watched by hooks.

Cost model. Cheap observations run every step (a local forward pre-hook on each model, the
optimizer step hooks, a detached copy of the loss). Expensive ones (per-module hooks, loss
inspection, gradient/weight norms, parameter snapshots for the update size) run only in *deep*
steps: the first `deep_first` optimizer steps and then every `deep_every`-th step.
Driven mode goes further, because the Trainer itself guarantees what the cheap hooks watch for
(zero_grad, train/eval mode): between deep steps no hook is registered at all, and after the first
`deep_first` steps a deep step runs only while the deep steps' extra time stays within
`deep_budget` (1% by default; the Trainer passes 0.5%) of the training time, measured as it runs.

API for the Trainer (and anyone driving the loop themselves)::

    w = Watcher(deep_every=50, deep_first=5)     # check_mode=False: no script-only machinery
    w.attach(model, optimizer)                   # local hooks only; call once, before training
    w.attach_loaders(train=train_loader, val=val_loader)   # optional: enables the loader checks
                                                 #   (patches DataLoader.__iter__ until detach())
    w.phase("train")  /  w.phase("eval")         # what the loop is doing now
    with w.loss_scope():                         # around the loss computation only:
        loss = loss_fn(outputs, targets)         #   sees F.cross_entropy & co. with their inputs
    w.observe_backward(loss)                     # just before loss.backward()
    ...optimizer.step()  # the step hooks do the rest
    # driven mode (attach(model, optimizer, driven=True)): the loop calls, after every step,
    w.end_step(stepped=True)                     #   stepped=False for a skipped step
    findings = w.findings()                      # list[catalog.Finding]; cheap to call repeatedly
    w.detach()                                   # removes every hook; the Watcher stays readable

`Finding.to_dict()` gives {"id", "severity", "title", "message", "where", "evidence", "why",
"fix", "detected_by"}; `w.report()` the whole JSON report; `w.render()` the text a person reads.
The overfit-one-batch sanity test is `torchwise.script_check.sanity.overfit_one_batch(model, inputs,
targets, loss_fn)` (works on a copy). Measured cost of the Trainer path: bench/bench_check_overhead.py.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading as _threading
import time
import warnings as _warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks import accumulation, followed, step_record, symmetry
from torchwise.diagnose.checks import model as _model_checks
from torchwise.diagnose.shape_watch import SAMPLE_SHAPES_KEPT, sample_shape_key
from torchwise.diagnose.tensors import all_finite, autocast_dtype, compiling, quiet
from torchwise.diagnose.user_code import called_by_torchwise, user_where, where_defined


_NULL_SCOPE = contextlib.nullcontext()  # reusable: entering it twice is fine
IDLE_FORWARDS = 2_000  # model forwards with no optimizer step after which a checked script is stopped
SWALLOWED_STOPS = 200   # StopScript raises a script may swallow (a bare except:) before check ends it itself
STRICT_ENV = "TORCHWISE_CHECK_STRICT"  # "1": a detector's own failure fails the check (tests, the corpus)


def _unserializable(fn):
    """A tensor hook of ours: torch.save(model) skips it without a warning (it never belongs to the model)."""
    return torch.utils.hooks.unserializable_hook(fn)
NONFINITE_HUNT_STEPS = 50
# check mode: every operation's output is looked at for NaN/inf in the first OP_HUNT_STEPS optimizer steps (a
# NaN from the start), and again from the first non-finite loss or module output on (the next forwards)
OP_HUNT_STEPS = 10  # deep steps after the first nan/inf loss, looking for the module that makes it
TRAIN_REPEAT_PROBE = 5000  # training rows over which the chance of a repeated sample is measured


class StopScript(BaseException):
    """Raised from an optimizer step hook to stop a checked script once enough is known.

    A BaseException, so that the script's own `except Exception:` blocks do not swallow it. A bare
    `except:` does; so once the stop is asked for, every hook raises it again (Watcher._raise_stop).
    """


# --------------------------------------------------------------------------- records

def _behaves_by_mode(m: nn.Module) -> bool:
    """Whether model.train()/eval() changes what this layer computes: Dropout with p > 0, BatchNorm (and
    InstanceNorm) that keeps running statistics. nn.Dropout(p=0.0), common in transformer configs, does not."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return float(getattr(m, "p", 0.0)) > 0.0
    if isinstance(m, nn.modules.batchnorm._NormBase):
        return bool(getattr(m, "track_running_stats", True)) or isinstance(m, nn.modules.batchnorm._BatchNorm)
    return False


@dataclass
class RootInfo:
    """A top-level model (a module with parameters called from outside any other module)."""

    module: nn.Module
    label: str
    module_ids: set[int]
    names: dict[int, str]             # id(submodule) -> qualified name
    param_names: dict[int, str]       # id(param) -> qualified name
    has_mode_layers: bool
    handles: list = field(default_factory=list)
    n_forward: int = 0
    where_forward: str | None = None
    has_conv: bool = False            # convolution layers: cudnn.benchmark searches their algorithms per shape
    lazy: bool = False                # had uninitialized (Lazy*) parameters when first seen


@dataclass
class PassInfo:
    """One iteration over a DataLoader (normally one epoch or one validation run)."""

    loader: Any
    index: int
    site: str | None
    n_batches: int = 0
    steps: int = 0
    fwd_train_mode: int = 0
    fwd_eval_mode: int = 0
    fwd_no_grad: int = 0
    where_train_mode_fwd: str | None = None
    waits: list = field(default_factory=list)
    gaps: list = field(default_factory=list)
    last_return: float | None = None
    ended: bool = False
    closed: bool = False
    # loss-average-wrong-count: each batch's size (None: not readable), the index in Watcher.losses of each
    # backward() during the pass, and how many of the deep steps' losses came straight from a torch loss
    # function with reduction="mean" (or not)
    batch_sizes: list = field(default_factory=list)
    loss_idx: list = field(default_factory=list)
    mean_losses: int = 0
    other_losses: int = 0

    @property
    def is_eval(self) -> bool:
        return self.n_batches > 0 and self.steps == 0 and (self.fwd_train_mode + self.fwd_eval_mode) > 0


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


class _Mode(TorchFunctionMode):
    """Sees functional calls (losses, relu, accumulation of loss tensors, max/topk of model outputs and
    what they are compared with) in deep steps, and the writes that initialize parameters."""

    def __init__(self, watcher: "Watcher"):
        super().__init__()
        self.w = watcher
        self.active = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        w = self.w
        if not self.active or compiling():  # (dynamo must not trace the warnings swap)
            return func(*args, **kwargs)
        if w.manual_watch and func in _INPLACE_FUNCS:
            w.note_manual_update(args)
        if not (w.is_deep or w.in_loss_scope):
            return _call_torch(func, args, kwargs)
        out = _call_torch(func, args, kwargs)
        if w.op_hunt or (w.check_mode and w.nonfinite_op is None and func in _NAN_PRONE):
            w.hunt_op(func, args, out)
        try:
            kind = _LOSS_KINDS.get(func)
            if kind is not None and len(args) >= 2:
                w.on_loss(kind, func, args[0], args[1], kwargs, out, len(args))
            elif func in _RELU_FUNCS and w.is_deep:
                w.on_relu_func(args[0] if args else None, out)
            elif w.bw_ids and getattr(func, "__name__", "") in _ACCUM_NAMES:
                w.on_accumulate(args, out)
            elif w.followed or func in _TOKEN_FUNCS:  # model outputs -> their max/topk values -> a comparison
                # with labels; token ids encoded for a model (a language model's), even before its first output
                followed.follow(w, func, args, out)
            if not w.optimizers:  # before any step, where a parameter is written is where it is initialized
                param = args[0] if args else kwargs.get("tensor")  # nn.init.* pass it by keyword
                if isinstance(param, nn.Parameter):
                    symmetry.note_param_write(w, func, param)
        except Exception as exc:  # a checker must never break the user's program
            w.internal_error("function mode", exc)
        return out


_TF_CODE = _Mode.__torch_function__.__code__


class _PassIter:
    """Wraps a DataLoader iterator: times each batch and marks the current pass."""

    def __init__(self, it: Iterator, info: PassInfo, watcher: "Watcher"):
        self._it = it
        self._info = info
        self._w = watcher

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        return getattr(self._it, name)

    def __next__(self):
        self._w.maybe_stop()
        info = self._info
        t0 = time.perf_counter()
        try:
            batch = next(self._it)
        except StopIteration:
            info.ended = True
            self._w.end_pass(info)
            raise
        t1 = time.perf_counter()
        if info.last_return is not None:
            info.gaps.append(t1 - info.last_return)
            info.waits.append(t1 - t0)
        info.last_return = t1
        info.n_batches += 1
        if len(info.batch_sizes) < 100_000:
            info.batch_sizes.append(_batch_size(batch))
        self._w.cur_pass = info
        return batch


def _batch_size(batch: Any) -> int | None:
    """The number of samples in a batch a DataLoader returned: the first dimension of its first tensor."""
    for _ in range(3):
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0]) if batch.dim() else None
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (tuple, list)) and batch:
            batch = batch[0]
        else:
            return None
    return None


class OutputTap:
    """sys.stdout / sys.stderr while a script runs under check: every write goes to the stream as before, and
    what the script printed is kept (bounded), marked with how many training passes over a loader had ended
    when it was written (loss-average-wrong-count reads the epoch's printed loss from it)."""

    MAX_CHARS = 2_000_000

    def __init__(self, stream: Any, watcher: "Watcher"):
        self._tw_stream = stream
        self._tw_watcher = watcher
        self._tw_on = True

    def stop_recording(self) -> None:
        """Keep passing writes on, but record none: the script is over (a logging handler may still write)."""
        self._tw_on = False

    def write(self, text):
        n = self._tw_stream.write(text)
        if self._tw_on:
            try:
                w = self._tw_watcher
                if isinstance(text, str) and w.train_passes_ended and w.printed_chars < self.MAX_CHARS \
                        and any(c.isdigit() for c in text):
                    w.printed_chars += len(text)
                    w.printed.append((w.train_passes_ended, text, user_where(2)))
            except Exception:  # the script's output comes first
                pass
        return n

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._tw_stream, name)

    def __iter__(self):
        return iter(self._tw_stream)


# --------------------------------------------------------------------------- the watcher

class Watcher:
    """Collects evidence from a training run and turns it into findings (see the module doc)."""

    def __init__(self, *, check_mode: bool = False, max_steps: int | None = None,
                 deep_first: int | None = None, deep_every: int | None = None,
                 hash_rows: bool | None = None, deep_budget: float = 0.01):
        self.check_mode = check_mode
        self.driven = False
        # the names of the class indices, when the run knows them (torchwise train: the folder names); findings
        # about classes say "class 3 ('dog')" instead of an index the user has to look up
        self.class_names: list[str] | None = None
        # driven mode: deep steps after the first deep_first cost at most this share of the run's time
        # (see _deep_affordable)
        self.deep_budget = deep_budget
        self._next_deep = 0
        self._step_times: dict[bool, list[float]] = {True: [], False: []}
        self._elapsed = self._deep_time = 0.0
        self._deep_count = 0
        self._last_end: float | None = None
        self._driven_handles: list = []
        self.max_steps = max_steps or None
        self.deep_first = deep_first if deep_first is not None else (100 if check_mode else 5)
        self.deep_every = deep_every if deep_every is not None else (5 if check_mode else 50)
        self.hash_rows = check_mode if hash_rows is None else hash_rows
        self.steps = 0
        self.backwards = 0
        self._deep = True
        self._loss_scope = False
        self._attached = False
        self._global = False
        self.handles: list = []
        self._deep_handles: list = []
        self.patches: list[tuple[Any, str, Any]] = []
        self._mode: _Mode | None = None
        self._stack: list[nn.Module] = []
        self.roots: dict[int, RootInfo] = {}
        self._local_ids: set[int] = set()  # every module of the models (local mode watches only those)
        self._not_roots: set[int] = set()
        self.optimizers: list[torch.optim.Optimizer] = []
        self.opt_param_ids: set[int] = set()
        self._local_opts: set[int] = set()
        self.step_where: str | None = None
        self.backward_where: str | None = None
        # loss values and per-step evidence
        self.losses: list[torch.Tensor] = []
        self.loss_steps: list[int] = []
        self.loss_where: dict[str, str | None] = {}
        self.cls: dict[str, Any] = {"counts": None, "n": 0, "batches": 0, "single": 0, "weighted": False,
                                    "where": None, "C": None}
        self.bin: dict[str, Any] = {"pos": 0, "neg": 0, "weighted": False, "where": None}
        self.hits: dict[str, int] = {}
        self.hit_where: dict[str, str | None] = {}
        self.hit_info: dict[str, dict] = {}
        # optimizer-level evidence (deep steps)
        self.grad_records: list[dict] = []
        self.update_ratios: list[tuple[int, float]] = []
        self.snap: list | None = None
        self.zero_sample: list = []
        self._grad_hooks: dict[int, Any] = {}
        self._zg_state: dict[int, str] = {}
        self._zg_params: dict[int, Any] = {}
        self._zg_where: str | None = None
        self._opt_id_cache: dict[int, set[int]] = {}
        self.stepped_since_backward = False
        self.backward_since_step = 0
        self.not_in_opt: dict[int, tuple[str, str]] = {}
        self.no_grad_events: list[dict] = []
        # modules
        self.unregistered: dict[int, dict] = {}
        self.relu: dict[Any, dict] = {}
        self.bn_batches: list[int] = []
        self.bn_counts: dict[int, dict] = {}  # id(BatchNorm) -> its name and (batch, values per channel) per forward
        self.bn_where: str | None = None
        self.nonfinite_culprit: dict | None = None
        self.nonfinite_input: dict | None = None
        self.first_nonfinite_loss_step: int | None = None
        self.nonfinite_op: dict | None = None
        self.op_hunt = check_mode  # check runs are short: look for the op that makes NaN from the start
        self.input_stats: dict[str, Any] = {"n": 0, "max_abs_mean": 0.0, "max_std": 0.0, "scale_ratio": 0.0,
                                            "where": None, "max_abs": 0.0}
        self._pending_evalmode_train: str | None = None
        # retention
        self.bw_ids: dict[int, weakref.ref] = {}
        self._bw_refs: list[tuple[int, weakref.ref]] = []
        self.retained_losses = 0
        # evidence of symmetric-init, compare-values-not-indices, eval-without-no-grad, accumulation-unscaled
        # (gathered and decided in checks/model.py, losses.py, optim.py)
        self.followed: dict[int, tuple[weakref.ref, str]] = {}  # model outputs and max/topk values of them
        self.loss_outs: dict[int, tuple[weakref.ref, str]] = {}  # tensors returned by loss functions
        self.last_layer: dict[int, int] = {}                    # root id -> last Linear/Conv its forward ran
        self.param_init_where: dict[int, str | None] = {}
        self.graph_uses: list[dict] = []
        self.symmetry: dict[str, Any] = {"scanned": set(), "done": set(), "cands": {}}
        self.tokens_rows = followed.TokensAndRows()  # the task's evidence: token ids encoded, outputs indexed by rows
        self.judgement: dict | None = None  # the optimizer steps' shared record (checks/step_record.jstate)
        self.accum: dict[int, dict] | None = None               # per optimizer; only with the backward patch
        # phases and data
        self._phase: str | None = None
        self.passes: list[PassInfo] = []
        self.cur_pass: PassInfo | None = None
        self.loader_sites: "weakref.WeakKeyDictionary[Any, str | None]" = weakref.WeakKeyDictionary()
        self.sampler_epochs: dict[int, list] = {}
        self.eval_seen = False
        self._after_epoch = False
        self._eval_since_epoch = False
        self.epoch_without_eval = False
        self.train_hashes: set[int] = set()
        self.train_repeats = {"rows": 0, "repeats": 0, "done": False}  # repeats among the first training rows (see _hash_rows)
        self.eval_groups: list[dict] = []
        self._eval_group_open = False
        self.val_aug_checked: set[int] = set()
        self.val_aug_candidates: list[dict] = []
        self.overfit_capture: dict | None = None
        self.eval_forwards = 0  # forwards under no_grad or in the eval phase (ReduceLROnPlateau's evidence)
        # backward-in-autocast: backward()/step() calls checked, and those that started with autocast on
        self.autocast_use: dict[str, Any] = {"backward": 0, "step": 0, "backward_in": 0, "step_in": 0,
                                             "where": None, "where_step": None, "dtype": None, "device": None,
                                             "first_step": None}
        # cudnn-benchmark-varying-shapes (not in driven mode: the Trainer switches benchmark off itself):
        # per-sample input shapes of convolutional models' training forwards while cudnn.benchmark was True
        self.bench_shapes: dict[str, Any] = {"shapes": {}, "forwards": 0, "where": None, "device": None,
                                             "model": None}
        self.calls: Any = None  # probes.CallProbes in global mode: schedulers, clipping, GradScaler, DDP
        self.capture_overfit = False
        self._findings: list[Finding] | None = None
        # hand-written updates (no optimizer object): parameters written in place after a backward()
        self.manual_watch = False       # on once a backward() has run and no optimizer has stepped
        self.manual_steps = 0
        self._param_ptrs: dict[int, int] = {}  # storage address -> id(param), for p.data.add_(...)
        self._manual_since_backward = False
        # the checker's own failures: counted and shown, never the script's (strict: they fail the check)
        self.strict = os.environ.get(STRICT_ENV) == "1"
        self.internal_errors: list[dict] = []
        # stopping a checked script: why, how often it swallowed the stop, and the last resort
        self.stop_reason: str | None = None
        self._stops_raised = 0
        self._stop_since: float | None = None
        self.on_force_stop: Any = None   # runner: finish the report and end the process
        self._fwd_since_step = 0
        self._last_train_input: weakref.ref | None = None  # the last training forward's input tensor
        # loss-average-wrong-count: what the script printed (OutputTap), training passes that ended, and the
        # loss tensors returned by a torch loss function with reduction="mean" (deep steps)
        self.printed: list[tuple[int, str, str | None]] = []
        self.printed_chars = 0
        self.train_passes_ended = 0
        self._mean_loss_outs: dict[int, weakref.ref] = {}

    # ------------------------------------------------------------------ the checker's own health

    def internal_error(self, where: str, exc: BaseException) -> None:
        """A hook or detector of ours failed: lose that evidence, never the user's run; count and show it."""
        if isinstance(exc, StopScript):
            raise exc
        if len(self.internal_errors) < 20:
            import traceback
            self.internal_errors.append({"where": where, "error": f"{type(exc).__name__}: {exc}",
                                         "traceback": "".join(traceback.format_exception(type(exc), exc,
                                                                                         exc.__traceback__))})
        else:
            self.internal_errors[-1]["more"] = self.internal_errors[-1].get("more", 0) + 1

    def request_stop(self, reason: str) -> None:
        """Stop the checked script at the next hook (check mode only)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self._stop_since = time.perf_counter()
        self._raise_stop()

    def _raise_stop(self) -> None:
        """Raise StopScript; a script that keeps swallowing it (a bare except: around its loop) is ended
        by the runner's on_force_stop, which reports what was seen and exits."""
        self._stops_raised += 1
        if self._stops_raised > SWALLOWED_STOPS or (
                self._stops_raised > 1 and time.perf_counter() - (self._stop_since or 0.0) > 30.0):
            if self.on_force_stop is not None:
                self.on_force_stop()
        raise StopScript()

    def maybe_stop(self) -> None:
        if self.stop_reason is not None and self.check_mode:
            self._raise_stop()

    # ------------------------------------------------------------------ attach / detach

    def attach(self, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
               *, global_hooks: bool | None = None, driven: bool = False) -> "Watcher":
        """Start watching. With no model, or global_hooks=True, every model/optimizer/loader in the
        process is watched (what `torchwise check` does); otherwise only the given ones.
        driven=True (local mode only): the loop calls end_step() after each step, and the per-step
        hooks exist only in deep steps and evaluation passes."""
        if self._attached:
            return self
        self._attached = True
        self._global = (model is None) if global_hooks is None else global_hooks
        self.driven = driven and not self._global
        self._next_deep = self.deep_every
        if model is not None:
            self._add_root(model)
        if optimizer is not None:
            self._add_optimizer(optimizer)
            if not self._global:
                self._local_opts.add(id(optimizer))
                if not self.driven:
                    self.handles.append(optimizer.register_step_pre_hook(self._on_step_pre))
                    self.handles.append(optimizer.register_step_post_hook(self._on_step_post))
        if not self.driven:
            # The models' own hook dicts stay untouched: a hook stored in a module is pickled by
            # torch.save(model), copied by deepcopy and compiled by torch.jit.script.
            from torch.nn.modules.module import register_module_forward_pre_hook
            self.handles.append(register_module_forward_pre_hook(self._global_root_pre))
        if self._global:
            from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
            self.handles.append(register_optimizer_step_pre_hook(self._on_step_pre))
            self.handles.append(register_optimizer_step_post_hook(self._on_step_post))
            self.patch_backward()
            self.patch_dataloader()
            from torchwise.diagnose.probes import CallProbes
            self.calls = CallProbes(self)
            self.calls.install()
            self.enter_function_mode()
        self._set_deep(True)
        return self

    def enter_function_mode(self) -> None:
        """Enter the TorchFunctionMode that sees functional losses, relu and accumulation (global mode, or a
        user's own loop under watch(model)); detach() leaves it."""
        self._mode = _Mode(self)
        self._mode.__enter__()

    def detach(self) -> None:
        """Remove every hook and patch. Findings stay available."""
        if not self._attached:
            return
        self._set_deep(False)
        if self._mode is not None:
            self._mode.active = False
            try:
                from torch.overrides import _get_current_function_mode_stack
                stack = _get_current_function_mode_stack()
                if stack and stack[-1] is self._mode:
                    self._mode.__exit__(None, None, None)
                # else: the user entered a mode of their own on top and has not left it; ours stays
                # underneath, inert, rather than popping theirs
            except Exception:
                pass
            self._mode = None
        for h in list(self.handles) + list(self._grad_hooks.values()) + self._driven_handles:
            h.remove()
        self.handles.clear()
        self._driven_handles.clear()
        self._grad_hooks.clear()
        for info in self.roots.values():
            for h in info.handles:
                h.remove()
            info.handles.clear()
        for owner, name, original in reversed(self.patches):
            setattr(owner, name, original)
        self.patches.clear()
        self._attached = False

    def attach_loaders(self, train: Any = None, val: Any = None) -> None:
        """Tell the Watcher which loaders are which (Trainer); their passes are then tracked."""
        for loader in (train, val):
            if loader is not None and loader not in self.loader_sites:
                self.loader_sites[loader] = None
        if not any(o is torch.utils.data.DataLoader for o, _, _ in self.patches):
            self.patch_dataloader()

    # ------------------------------------------------------------------ trainer-facing API

    def phase(self, name: str) -> None:
        """'train' or 'eval': what the loop does from now on (for loops the Watcher cannot infer)."""
        self._phase = name
        if self.driven:
            self._sync_driven_hooks()

    @property
    def phase_now(self) -> str | None:
        """What phase() last said the loop does ('train', 'eval'), or None when nothing said it."""
        return self._phase

    @property
    def in_loss_scope(self) -> bool:
        """Whether the loop is inside loss_scope() now (functional losses are inspected there)."""
        return self._loss_scope

    def loss_scope(self):
        """Wrap the loss computation: functional losses inside are inspected in deep steps."""
        if not self._deep or self._mode is not None:
            return _NULL_SCOPE  # most steps: no generator-based context manager to build
        return self._deep_loss_scope()

    @contextlib.contextmanager
    def _deep_loss_scope(self):
        self._loss_scope = True
        mode = _Mode(self)
        try:
            with mode:
                yield
        finally:
            self._loss_scope = False

    def observe_backward(self, loss: torch.Tensor) -> None:
        """Call just before loss.backward() when the Watcher is not in global mode."""
        if self._global:
            return
        if self.driven and not self._deep:
            self.backwards += 1  # the loss value comes with end_step()
            return
        self.on_backward(loss)

    def end_step(self, stepped: bool = True, nonfinite_loss: bool = False, loss: float | None = None) -> None:
        """Driven mode: one training step is over. stepped=False: the loop skipped its optimizer step;
        nonfinite_loss=True: because the loss was nan/inf (the next steps look for the culprit); loss:
        the step's mean loss, for the loss curve (a float the loop has anyway: no tensor kept per step)."""
        now = time.perf_counter()
        was_deep = self._deep
        if self._last_end is not None:
            dt = now - self._last_end
            times = self._step_times[was_deep]
            times.append(dt)
            del times[:-16]
            self._elapsed += dt
            if was_deep:
                self._deep_time += dt
                self._deep_count += 1
        if was_deep:  # the next one at least deep_every steps later, and only when the budget allows
            self._next_deep = self.steps + (1 if stepped else 0) + self.deep_every
        if nonfinite_loss and self.first_nonfinite_loss_step is None:
            self.first_nonfinite_loss_step = self.steps
        if loss is not None and len(self.losses) < 200_000:
            self.losses.append(loss)
            self.loss_steps.append(self.steps)
        if stepped:
            self._after_step()
        else:
            want = self._want_deep()
            if want != self._deep:
                self._set_deep(want)
        self._last_end = time.perf_counter()  # the Watcher's own bookkeeping is not counted as step time

    def _deep_affordable(self) -> bool:
        """Driven mode: whether one more deep step keeps the deep steps' extra time within deep_budget of
        the time measured so far. A deep step's extra time is its duration less a plain step's (medians
        of the last 16 of each kind, so that an evaluation pass between two steps does not move them);
        it is about one plain step on a tiny model and a few percent of one on a large model."""
        plain, deep = self._step_times[False], self._step_times[True]
        if len(plain) < 3 or not deep:
            return False
        p, d = statistics.median_high(plain), statistics.median_high(deep)
        spent = self._deep_time - self._deep_count * p
        return spent + max(0.0, d - p) <= self.deep_budget * self._elapsed

    # ------------------------------------------------------------------ deep steps

    @property
    def is_deep(self) -> bool:
        """Whether the step now running is a deep one (expensive observations on)."""
        return self._deep

    def _set_deep(self, on: bool) -> None:
        self._deep = on
        if on and not self._deep_handles and self._attached:
            if not self.driven:  # global hooks (see attach); local mode filters by the models' modules
                from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
                self._deep_handles.append(register_module_forward_pre_hook(self._mod_pre))
                self._deep_handles.append(register_module_forward_hook(self._mod_post))
            else:
                for info in self.roots.values():
                    for m in info.module.modules():
                        self._deep_handles.append(m.register_forward_pre_hook(self._mod_pre))
                        self._deep_handles.append(m.register_forward_hook(self._mod_post))
        elif not on and self._deep_handles:
            for h in self._deep_handles:
                h.remove()
            self._deep_handles.clear()
        self._stack.clear()
        if self.driven:
            self._sync_driven_hooks()

    def _sync_driven_hooks(self) -> None:
        """Driven mode: the model's root hook and the optimizer hooks exist in deep steps and evaluation
        passes only. The Trainer guarantees what they watch in between (zero_grad, train/eval mode),
        and a registered hook costs even when it returns at once."""
        want = self._attached and (self._deep or self._phase == "eval")
        if want and not self._driven_handles:
            for info in self.roots.values():  # first, as when registered at attach time
                self._driven_handles.append(info.module.register_forward_pre_hook(self._root_pre, prepend=True))
            for opt in self.optimizers:
                if id(opt) in self._local_opts:
                    self._driven_handles.append(opt.register_step_pre_hook(self._on_step_pre))
                    self._driven_handles.append(opt.register_step_post_hook(self._on_step_post))
        elif not want and self._driven_handles:
            for h in self._driven_handles:
                h.remove()
            self._driven_handles.clear()

    def _want_deep(self) -> bool:
        s = self.steps
        if s < self.deep_first or self._want_nonfinite_hunt():
            return True
        if self.driven:
            return s >= self._next_deep and self._deep_affordable()
        return s % self.deep_every == 0

    def _want_nonfinite_hunt(self) -> bool:
        # bounded: a nan that no module makes (log(0) in the loss, one bad batch) must not leave every
        # later step deep
        first = self.first_nonfinite_loss_step
        return (first is not None and self.nonfinite_culprit is None and not self.check_mode
                and self.steps - first < NONFINITE_HUNT_STEPS)

    # ------------------------------------------------------------------ models

    def _add_root(self, module: nn.Module) -> RootInfo:
        info = self.roots.get(id(module))
        if info is not None:
            return info
        names = {}
        for name, m in module.named_modules():
            names.setdefault(id(m), name)
        info = RootInfo(
            module=module, label=type(module).__name__, module_ids=set(names), names=names,
            param_names={id(p): n for n, p in module.named_parameters()},
            has_mode_layers=any(_behaves_by_mode(m) for m in module.modules()),
            has_conv=any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules()),
            lazy=any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters()),
        )
        self.roots[id(module)] = info
        self._local_ids |= info.module_ids
        for p in module.parameters():
            self._param_ptrs[p.untyped_storage().data_ptr()] = id(p)
        return info

    def module_name(self, m: nn.Module) -> str:
        for info in self.roots.values():
            name = info.names.get(id(m))
            if name is not None:
                return f"{info.label}.{name} ({type(m).__name__})" if name else info.label
        return type(m).__name__

    def _mod_pre_impl(self, module: nn.Module, args: tuple) -> None:
        stack = self._stack
        if not stack:
            mid = id(module)
            if self._global and mid not in self.roots and mid not in self._not_roots:
                if mid in self._local_ids:  # a part of a known model called directly (vae.decode(z)): not a model
                    self._not_roots.add(mid)
                elif next(module.parameters(), None) is not None:
                    self._add_root(module)
                    self._root_pre(module, args)  # the hook just added runs from the next call on
                else:
                    self._not_roots.add(mid)
        else:
            root = self.roots.get(id(stack[0]))
            if root is not None and id(module) not in root.module_ids and id(module) not in self.unregistered \
                    and not any(id(m) in self.unregistered for m in stack):
                if next(module.parameters(recurse=False), None) is not None or next(module.parameters(), None) is not None:
                    self.unregistered[id(module)] = {"module": type(module).__name__, "root": root, "ref": module,
                                                     "n_params": sum(p.numel() for p in module.parameters())}
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and torch.is_grad_enabled():
            x = args[0] if args else None
            if isinstance(x, torch.Tensor) and x.dim() >= 2 and x.shape[1] > 0:
                # the values each channel's mean and variance come from: batch x positions (N*H*W for
                # BatchNorm2d, N*L for BatchNorm1d on (N, C, L), N on (N, C))
                per_channel = x.numel() // int(x.shape[1])
                rec = self.bn_counts.get(id(module))
                if rec is None:
                    rec = self.bn_counts[id(module)] = {"name": self.module_name(module), "counts": []}
                if len(rec["counts"]) < 1000:
                    rec["counts"].append((int(x.shape[0]), per_channel))
                if len(self.bn_batches) < 10_000:
                    self.bn_batches.append(int(x.shape[0]))
                if self.bn_where is None:
                    self.bn_where = where_defined(stack[0]) if stack else None
        stack.append(module)

    def _mod_post_impl(self, module: nn.Module, args: tuple, out: Any) -> None:
        stack = self._stack
        if stack and stack[-1] is module:
            stack.pop()
        if stack and isinstance(module, symmetry.SYM_LAYERS):
            self.last_layer[id(stack[0])] = id(module)
        elif not stack and id(module) in self.roots:
            _model_checks.on_root_output(self, module, out)
        if isinstance(module, nn.ReLU) and isinstance(out, torch.Tensor) and module.training:
            self._record_relu(module, out, self.module_name(module))
        if self.nonfinite_culprit is None and isinstance(out, torch.Tensor) and out.is_floating_point() \
                and (self.check_mode or self.first_nonfinite_loss_step is not None):
            if not all_finite(out):
                ins = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
                if all(all_finite(a) for a in ins):
                    params_ok = all(all_finite(p) for p in module.parameters(recurse=False))
                    self.nonfinite_culprit = {
                        "module": self.module_name(module), "step": self.steps, "params_finite": params_ok,
                        "where": where_defined(type(module).forward) or user_where(),
                        "n_nonfinite": int((~torch.isfinite(out)).sum()), "numel": out.numel()}
                    if self.nonfinite_op is None and self._mode is not None:
                        self.op_hunt = True  # the module made it: name its operation at the next forwards

    # Hooks never break the user's program: a checker bug loses evidence, not the training run.
    def _mod_pre(self, module, args):
        if compiling() or (not self._global and id(module) not in self._local_ids):
            return
        try:
            with quiet():
                self._mod_pre_impl(module, args)
        except Exception as exc:
            self.internal_error("module forward pre-hook", exc)

    def _mod_post(self, module, args, out):
        if compiling() or (not self._global and id(module) not in self._local_ids):
            return
        try:
            with quiet():
                self._mod_post_impl(module, args, out)
        except Exception as exc:
            self.internal_error("module forward hook", exc)

    def _global_root_pre(self, module, args):
        if id(module) in self.roots:  # one dict lookup for the many modules that are not a model
            self._root_pre(module, args)

    def _root_pre(self, module, args):
        if compiling():
            return
        self.maybe_stop()
        try:
            with quiet():
                self._root_pre_impl(module, args)
        except Exception as exc:
            self.internal_error("model forward pre-hook", exc)
        if self.max_steps and self.check_mode and self._fwd_since_step >= IDLE_FORWARDS:
            what = "since the last optimizer step" if self.steps or self.manual_steps else "and no optimizer step"
            self.request_stop(f"{IDLE_FORWARDS:,} model forwards {what} (an inference or evaluation loop "
                              "that does not end)")

    def _on_step_pre(self, opt, args=(), kwargs=None):
        if compiling():
            return
        self.maybe_stop()
        try:
            with quiet():
                self._on_step_pre_impl(opt, args, kwargs)
        except Exception as exc:
            self.internal_error("optimizer step pre-hook", exc)

    def _record_relu(self, key: Any, out: torch.Tensor, label: str) -> None:
        _model_checks.record_relu(self, key, out, label)  # pooled over batches: batch size 1 is judged too

    def on_relu_func(self, x: Any, out: Any) -> None:
        if self._stack and isinstance(self._stack[-1], nn.ReLU):
            return  # the module hook measures it, with the module's name
        if isinstance(out, torch.Tensor):
            where = user_where()
            self._record_relu(("f", where), out, f"relu at {where}")

    def _root_pre_impl(self, module: nn.Module, args: tuple) -> None:
        info = self.roots.get(id(module))
        if info is None:
            return
        if self._deep and self.accum is not None:
            step_record.note_root_input(self, module, args)  # new input values: a new batch (get_batch())
        if info.lazy:
            info.lazy = any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())
            if info.lazy or not self.steps:
                return  # a forward that builds lazy layers (before training) is neither training nor evaluation
        info.n_forward += 1
        self._fwd_since_step += 1
        grad = torch.is_grad_enabled()
        training = module.training
        p = self.cur_pass
        is_train_fwd = grad and training and self._phase != "eval"
        if p is not None and not p.closed:
            if training:
                p.fwd_train_mode += 1
                if p.where_train_mode_fwd is None:
                    p.where_train_mode_fwd = user_where()
            else:
                p.fwd_eval_mode += 1
            p.fwd_no_grad += not grad
        evaluating = (not grad) or self._phase == "eval"
        if evaluating:
            self.eval_seen = True
            self.eval_forwards += 1
            self._eval_since_epoch = True
            if training and info.has_mode_layers:
                self._hit("eval-mode-missing", info={"model": info.label})
        elif not training and info.has_mode_layers:
            self._pending_evalmode_train = self._pending_evalmode_train or (user_where() or "?")
        else:
            self._pending_evalmode_train = None  # the forward that feeds the next step() runs in train mode
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if x is None and args and isinstance(args[0], (tuple, list)):
            x = next((a for a in args[0] if isinstance(a, torch.Tensor)), None)
        if x is None:
            return
        if is_train_fwd and info.has_conv and not self.driven and torch.backends.cudnn.benchmark:
            self._note_sample_shape(info, args, x)
        if self._deep:
            self._inspect_input(x, train=is_train_fwd)
        if self.capture_overfit and self.overfit_capture is None and is_train_fwd and self.steps == 0:
            import copy
            try:
                clone = copy.deepcopy(module, memo={id(self): self})  # our hooks must not drag the watcher along
                for m in clone.modules():
                    for hooks in (m._forward_pre_hooks, m._forward_hooks):
                        for key in [k for k, h in hooks.items() if getattr(h, "__self__", None) is self]:
                            del hooks[key]
                self.overfit_capture = {"model": clone, "args": tuple(
                    a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)}
            except Exception:
                self.overfit_capture = {}
        if self.hash_rows and x.dim() >= 1 and x.shape[0] > 0:
            train = grad and self._phase != "eval"
            if train:
                self._last_train_input = weakref.ref(x)
            elif self._last_train_input is not None and self._last_train_input() is x:
                return  # the batch the last step trained on, looked at again (a reconstruction shown at the
                #         end of an epoch): not an evaluation of the model on training data
            self._hash_rows(x, train, id(module))

    def _note_sample_shape(self, info: RootInfo, args: tuple, x: torch.Tensor) -> None:
        """A training forward of a convolutional model with cudnn.benchmark on: the shape of its inputs
        without the batch dimension (a short last batch is not a new shape), and the step it first came in."""
        st = self.bench_shapes
        shapes = st["shapes"]
        key = sample_shape_key(args) or (tuple(x.shape[1:]),)  # x: the first tensor of a list argument
        if key not in shapes:
            if len(shapes) >= SAMPLE_SHAPES_KEPT or called_by_torchwise(2):
                return  # enough known; or the Trainer's own loop, which switches benchmark off by itself
            shapes[key] = self.steps
            if st["where"] is None:
                st.update(where=user_where(), device=x.device.type, model=info.label)
        st["forwards"] += 1

    def _inspect_input(self, x: torch.Tensor, train: bool) -> None:
        if not x.is_floating_point() or x.numel() == 0:
            return
        with torch.no_grad():
            if not all_finite(x):
                if self.nonfinite_input is None:
                    self.nonfinite_input = {"step": self.steps, "n_nonfinite": int((~torch.isfinite(x)).sum()),
                                            "numel": x.numel(), "what": "inputs", "where": user_where()}
                return
            if not train or x.dim() < 2 or x.shape[0] < 2:
                return
            xf = x.float()
            st = self.input_stats
            st["n"] += 1
            st["max_abs_mean"] = max(st["max_abs_mean"], abs(float(xf.mean())))
            st["max_std"] = max(st["max_std"], float(xf.std()))
            st["max_abs"] = max(st["max_abs"], float(xf.abs().max()))
            if x.dim() == 2 and x.shape[1] >= 2 and x.shape[0] >= 8:
                s = xf.std(0)
                s = s[s > 1e-6]
                if s.numel() >= 2:
                    st["scale_ratio"] = max(st["scale_ratio"], float(s.max() / s.min()))
                    st["max_feature_std"] = max(st.get("max_feature_std", 0.0), float(s.max()))
            if st["where"] is None:
                st["where"] = user_where()

    def _hash_rows(self, x: torch.Tensor, train: bool, root: int) -> None:
        if not x.is_floating_point() and x.dtype not in (torch.int64, torch.int32, torch.uint8):
            return
        rows = x.detach()
        if rows.device.type != "cpu":
            rows = rows.cpu()
        rows = rows.reshape(rows.shape[0], -1)
        if rows.dtype in (torch.bfloat16, torch.float16):
            rows = rows.float()  # numpy has no bfloat16
        if rows.shape[1] > 2048:  # large samples (images): a fixed spread of 2048 values identifies them
            rows = rows[:, :: rows.shape[1] // 2048]
        rows = rows.contiguous().numpy()
        if train:
            self._eval_group_open = False
            hashes = [hash((root, r.tobytes())) for r in rows]
            probe = self.train_repeats
            if not probe["done"]:
                # within the first pass over the training data (it ends with its loader, or at the first
                # evaluation): how often a sample repeats by itself (a tiny input space, a generator);
                # evaluation samples match training ones at that rate by chance
                probe["done"] = probe["rows"] >= TRAIN_REPEAT_PROBE or bool(self.eval_groups) or \
                    any(p.closed and p.steps for p in self.passes)
                if not probe["done"]:
                    probe["rows"] += len(hashes)
                    probe["repeats"] += sum(h in self.train_hashes for h in hashes)
            if len(self.train_hashes) < 500_000:
                self.train_hashes.update(hashes)
        else:
            cur = self.cur_pass if self.cur_pass is not None and not self.cur_pass.closed else None
            key = cur.index if cur is not None else None
            if not self._eval_group_open or not self.eval_groups or self.eval_groups[-1]["key"] != key:
                self.eval_groups.append({"key": key, "hashes": [], "where": user_where(), "step": self.steps,
                                         "root": root,
                                         "dataset": id(getattr(cur.loader, "dataset", None)) if cur else None})
                self._eval_group_open = True
            group = self.eval_groups[-1]
            if len(group["hashes"]) < 100_000:
                group["hashes"].extend(hash((root, r.tobytes())) for r in rows)

    # ------------------------------------------------------------------ losses

    def on_loss(self, kind: str, func: Any, inp: Any, target: Any, kwargs: dict, out: Any, npos: int = 2) -> None:
        if not isinstance(inp, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        if isinstance(out, torch.Tensor):
            followed.remember(self.loss_outs, out, "loss")
            if out.dim() == 0 and kwargs.get("reduction", "mean") == "mean" and npos == 2 and \
                    kwargs.get("size_average") is None and kwargs.get("reduce") is None:
                self._mean_loss_outs[id(out)] = weakref.ref(out)
                if len(self._mean_loss_outs) > 64:
                    for k in list(self._mean_loss_outs)[:32]:
                        del self._mean_loss_outs[k]
        if self.loss_where.get(kind) is None:
            self.loss_where[kind] = user_where()
        where = self.loss_where[kind]
        if self.capture_overfit and self.overfit_capture and "loss" not in self.overfit_capture and self.steps == 0:
            self.overfit_capture.update(loss=(func, dict(kwargs)), target=target.detach().clone(), where=where)
        if self._phase == "eval" or not torch.is_grad_enabled():
            return
        from torchwise.diagnose.checks import losses
        made_by = losses.origin(inp) if kind in ("bcelogits", "bce") else None
        with torch.no_grad():
            losses.inspect(self, kind, inp.detach(), target.detach(), kwargs, where, made_by)

    def _hit(self, id: str, *, info: dict | None = None, where: str | None = None) -> None:
        self.hits[id] = self.hits.get(id, 0) + 1
        if id not in self.hit_where:
            self.hit_where[id] = where or user_where()
        if info:
            self.hit_info.setdefault(id, {}).update(info)

    # ------------------------------------------------------------------ backward

    def patch_backward(self) -> None:
        original = torch.autograd.backward
        watcher = self

        def backward(tensors, *args, **kwargs):
            watcher.maybe_stop()
            try:
                with quiet():
                    watcher.on_backward(tensors)
                    if watcher.is_deep:
                        accumulation.accum_on_backward(watcher, tensors)
            except Exception as exc:
                watcher.internal_error("backward patch", exc)
            return original(tensors, *args, **kwargs)

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        self.accum = {}
        self.patches.append((torch.autograd, "backward", original))
        torch.autograd.backward = backward

    def _note_autocast(self, what: str, tensor: Any) -> None:
        """backward-in-autocast: a backward() ("backward") or optimizer.step() ("step") starts; is autocast
        still on for the device of `tensor` (the loss, or the optimizer's first parameter)?"""
        if not isinstance(tensor, torch.Tensor):
            return
        use = self.autocast_use
        use[what] += 1
        dtype = autocast_dtype(tensor.device.type)
        if dtype is None:
            return
        use[what + "_in"] += 1
        key = "where" if what == "backward" else "where_step"
        if use[key] is None:
            use[key] = user_where()
        if use["dtype"] is None:
            use.update(dtype=str(dtype).replace("torch.", ""), device=tensor.device.type, first_step=self.steps)

    def on_backward(self, tensors: Any) -> None:
        first = tensors if isinstance(tensors, torch.Tensor) else (
            tensors[0] if isinstance(tensors, (tuple, list)) and tensors else None)
        self._note_autocast("backward", first)
        loss = tensors if isinstance(tensors, torch.Tensor) else (
            tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else None)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            return
        self.backwards += 1
        if self.backward_where is None:
            self.backward_where = user_where()
        if not self.optimizers and self._global:  # no optimizer yet: perhaps a hand-written update follows
            self.manual_watch = self._manual_since_backward = True
        value = loss.detach().reshape(())
        if len(self.losses) < 200_000 and not self.driven:  # driven: end_step() brings the value
            self.losses.append(value)
            self.loss_steps.append(self.steps)
            cur = self.cur_pass
            if cur is not None and not cur.closed:
                cur.loss_idx.append(len(self.losses) - 1)
                if self._deep:
                    ref = self._mean_loss_outs.get(id(loss))
                    if ref is not None and ref() is loss:
                        cur.mean_losses += 1
                    else:
                        cur.other_losses += 1
        if self._deep:
            if loss.grad_fn is not None:
                ref = weakref.ref(loss)
                self._bw_refs.append((self.steps, ref))
                self.bw_ids[id(loss)] = ref
                if len(self.bw_ids) > 64:
                    for k in list(self.bw_ids)[:32]:
                        del self.bw_ids[k]
            if self.first_nonfinite_loss_step is None and not bool(torch.isfinite(value)):
                self.first_nonfinite_loss_step = self.steps
                self.op_hunt = self._mode is not None  # name the operation at the next forward
        self.stepped_since_backward = False
        self.backward_since_step += 1

    def _watch_grad_clearing(self, params: list) -> None:
        """Check that the gradient this step consumed is cleared before the optimizer uses these params again.

        A tensor hook runs whenever a new gradient arrives for a parameter, *before* it is added to
        .grad: if .grad still holds the consumed gradient, the parameter is "stale"; if .grad was
        cleared (None or zeros), it is "fresh". The verdict is taken at the next step() of an
        optimizer that holds the parameter, so gradient accumulation (several backward() per step)
        and GANs (a generator backward flowing through the discriminator) stay correct.
        """
        for p in params:
            pid = id(p)
            self._zg_state[pid] = "consumed"
            if pid in self._grad_hooks:
                continue
            ref = weakref.ref(p)

            @_unserializable
            def hook(grad, ref=ref, pid=pid):
                param = ref()
                state = self._zg_state.get(pid)
                if param is None or state not in ("consumed", "stale"):
                    return None
                cleared = param.grad is None or not bool(param.grad.ne(0).any())
                if cleared:
                    self._zg_state[pid] = "fresh"
                elif state == "consumed":
                    self._zg_state[pid] = "stale"
                    self._zg_where = user_where() or self.backward_where
                return None

            self._grad_hooks[pid] = p.register_hook(hook)
            self._zg_params[pid] = ref

    def _verdict_grad_clearing(self, opt) -> None:
        if not self._zg_state:
            return
        ids = self._opt_ids(opt)
        mine = [pid for pid in self._zg_state if pid in ids]
        if not mine:
            return
        stale = False
        for pid in mine:
            state = self._zg_state.pop(pid)
            ref = self._zg_params.pop(pid, None)
            handle = self._grad_hooks.pop(pid, None)
            if handle is not None:
                handle.remove()
            param = ref() if ref is not None else None
            if state == "stale" and param is not None and param.grad is not None:
                stale = True
        self.hits["zero-grad-checks"] = self.hits.get("zero-grad-checks", 0) + 1
        if stale:
            self._hit("missing-zero-grad", where=self._zg_where)

    def _opt_ids(self, opt) -> set[int]:
        key = id(opt)
        ids = self._opt_id_cache.get(key)
        if ids is None or len(ids) != sum(len(g["params"]) for g in opt.param_groups):
            ids = {id(p) for g in opt.param_groups for p in g["params"]}
            self._opt_id_cache[key] = ids
        return ids

    def hunt_op(self, func: Any, args: tuple, out: Any) -> None:
        """The first operation that turns finite inputs into NaN/inf (runs only after a non-finite loss)."""
        try:
            if not torch.is_grad_enabled() or getattr(func, "__name__", "") == "__get__":
                return  # optimizer internals and attribute reads (p.grad) are not where a NaN is born
            if not isinstance(out, torch.Tensor) or not out.is_floating_point() or all_finite(out):
                return
            ins = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
            if ins and all(all_finite(a) for a in ins):
                qual = getattr(func, "__qualname__", "") or ""
                name = getattr(func, "__name__", None) or repr(func)
                mod = getattr(func, "__module__", None) or ""
                if "Tensor" in qual:
                    label = f"Tensor.{name}"
                elif mod == "torch.nn.functional":
                    label = f"torch.nn.functional.{name}"
                else:
                    label = f"torch.{name}"
                self.nonfinite_op = {"op": label, "where": user_where(),
                                     "module": self.module_name(self._stack[-1]) if self._stack else None}
                self.op_hunt = False
        except Exception:
            self.op_hunt = False

    def _check_retained_losses(self) -> None:
        """Loss tensors still alive 3+ rounds of steps after their backward() are being stored somewhere. A
        round is one step of every optimizer: with three optimizers stepping in turn (InfoGAN's generator,
        discriminator and info losses), each loss variable is rebound only 3 steps later."""
        keep = []
        age = 3 * max(1, len(self.optimizers))
        for step, ref in self._bw_refs:
            t = ref()
            if t is None:
                continue
            if step <= self.steps - age:
                if t.grad_fn is not None:
                    self.retained_losses += 1
                    if self.retained_losses >= 3 and not self.hits.get("loss-retains-graph"):
                        self._hit("loss-retains-graph", where=self.backward_where,
                                  info={"how": "kept alive", "alive": self.retained_losses})
                continue
            keep.append((step, ref))
        self._bw_refs = keep

    def on_accumulate(self, args: tuple, out: Any) -> None:
        # a running total made at an earlier step, not errD = errD_real + errD_fake within one step
        if _model_checks.accumulation_retains(self, args, out):
            self._hit("loss-retains-graph", info={"how": "accumulated into a tensor that keeps the graph"})

    # ------------------------------------------------------------------ optimizer steps

    def _add_optimizer(self, opt: torch.optim.Optimizer) -> None:
        if any(o is opt for o in self.optimizers):
            return
        self.optimizers.append(opt)
        for g in opt.param_groups:
            self.opt_param_ids.update(id(p) for p in g["params"])

    def note_manual_update(self, args: tuple) -> None:
        """A hand-written update (`p -= lr * p.grad`, `p.data.add_(...)`, `w1 -= lr * w1.grad` on bare tensors):
        the first in-place write to a model parameter, or to a leaf tensor with a gradient, after a
        backward() is one optimizer step, so the run's training is seen."""
        if not self._manual_since_backward or not args or not isinstance(args[0], torch.Tensor):
            return
        t = args[0]
        try:
            if torch.is_grad_enabled() and t.requires_grad:
                return  # not an update: autograd would refuse an in-place write to a leaf that needs grad
            if self._param_ptrs.get(t.untyped_storage().data_ptr()) is None and not (
                    t.is_leaf and t.requires_grad and t.grad is not None):
                return  # neither a model's parameter nor a bare leaf tensor that backward() gave a gradient
        except Exception:  # a tensor without storage (a subclass, meta): not a parameter of ours
            return
        self._manual_since_backward = False
        self.manual_steps += 1
        if self.step_where is None:
            self.step_where = user_where()
        self._after_step()

    def _on_step_pre_impl(self, opt: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        if self._global and id(opt) in self._local_opts:
            return
        self.manual_watch = self._manual_since_backward = False
        self._add_optimizer(opt)
        for g in opt.param_groups:  # param groups added later with add_param_group
            self.opt_param_ids.update(id(p) for p in g["params"])
        self._note_autocast("step", next((p for g in opt.param_groups for p in g["params"]), None))
        if self.step_where is None:
            self.step_where = user_where()
        self._verdict_grad_clearing(opt)
        if self.accum is not None:
            accumulation.accum_on_step(self, opt)
        if self._pending_evalmode_train is not None:
            self._hit("train-mode-missing", where=self._pending_evalmode_train)
            self._pending_evalmode_train = None
        if not self._deep:
            return
        try:
            from torchwise.diagnose.checks import optim
            optim.inspect_step_pre(self, opt)
        except Exception as exc:
            self.internal_error("optimizer step pre-hook (deep)", exc)

    def _on_step_post(self, opt: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        if self._global and id(opt) in self._local_opts:
            return
        if self._deep and self.snap is not None:
            try:
                with quiet():
                    from torchwise.diagnose.checks import optim
                    optim.inspect_step_post(self, opt)
            except Exception as exc:
                self.internal_error("optimizer step post-hook", exc)
        # driven: the loop clears gradients itself, and the tensor hooks would outlive the deep step
        if self._deep and self.zero_sample and not self.driven:
            try:
                with quiet():
                    self._watch_grad_clearing(self.zero_sample)
            except Exception as exc:
                self.internal_error("zero_grad watch", exc)
        self.zero_sample = []
        self.snap = None
        if not self.driven:  # driven: end_step() does the bookkeeping, also for steps without hooks
            self._after_step()

    def _after_step(self) -> None:
        self.steps += 1
        self.stepped_since_backward = True
        self.backward_since_step = 0
        if self.graph_uses:
            _model_checks.settle_graph_uses(self)
        if self.cur_pass is not None and not self.cur_pass.closed:
            self.cur_pass.steps += 1
        if self._after_epoch:
            if not self._eval_since_epoch:
                self.epoch_without_eval = True
            self._after_epoch = False
        self._eval_group_open = False
        if self.op_hunt and self.steps >= min(self.deep_first, OP_HUNT_STEPS) and \
                self.first_nonfinite_loss_step is None and self.nonfinite_culprit is None:
            self.op_hunt = False
        if self._deep and self._bw_refs:
            with quiet():
                self._check_retained_losses()
        want = self._want_deep()
        if want != self._deep:
            self._set_deep(want)
        else:
            self._stack.clear()
        self._fwd_since_step = 0
        if self.max_steps and self.steps >= self.max_steps:
            enough = (self.eval_seen or self.epoch_without_eval or not self.passes
                      or self.steps >= self._step_cap())
            if enough:
                self.request_stop(f"--max-steps {self.max_steps} reached")

    def _step_cap(self) -> int:
        """Past --max-steps with no evaluation seen yet: how long to wait for one. Twice --max-steps, or up to
        10x when the first epoch is known to end within that (the evaluation usually follows an epoch):
        a verdict on validation needs a validation to look at."""
        cap = 2 * self.max_steps
        first = next((p for p in self.passes if p.steps > 0), None)
        if first is not None and not first.closed:
            try:
                n = len(first.loader)
            except TypeError:  # an iterable loader without a length
                return cap
            if n <= 10 * self.max_steps:
                cap = max(cap, n + 1)
        return cap

    # ------------------------------------------------------------------ data loaders

    def patch_dataloader(self) -> None:
        from torch.utils.data import DataLoader
        orig_init, orig_iter = DataLoader.__init__, DataLoader.__iter__
        watcher = self

        def __init__(loader, *args, **kwargs):
            orig_init(loader, *args, **kwargs)
            try:
                watcher.loader_sites[loader] = user_where()
            except Exception as exc:
                watcher.internal_error("DataLoader.__init__ patch", exc)

        def __iter__(loader):
            it = orig_iter(loader)
            try:
                return watcher.begin_pass(loader, it)
            except Exception as exc:
                watcher.internal_error("DataLoader.__iter__ patch", exc)
                return it

        self.patches.append((DataLoader, "__init__", orig_init))
        self.patches.append((DataLoader, "__iter__", orig_iter))
        DataLoader.__init__ = __init__
        DataLoader.__iter__ = __iter__

    def begin_pass(self, loader: Any, it: Iterator) -> _PassIter:
        from torch.utils.data.distributed import DistributedSampler
        for p in self.passes:
            if p.loader is loader and not p.closed:
                self.end_pass(p)
        info = PassInfo(loader=loader, index=len(self.passes), site=self.loader_sites.get(loader))
        self.passes.append(info)
        sampler = getattr(loader, "sampler", None)
        bs = getattr(loader, "batch_sampler", None)
        for s in (sampler, getattr(bs, "sampler", None)):
            if isinstance(s, DistributedSampler):
                self.sampler_epochs.setdefault(id(s), []).append(
                    {"epoch": s.epoch, "shuffle": s.shuffle, "site": info.site})
                break
        return _PassIter(it, info, self)

    def end_pass(self, info: PassInfo) -> None:
        if info.closed:
            return
        info.closed = True
        if self.cur_pass is info:
            self.cur_pass = None
        if info.steps > 0:
            if info.ended:
                self.train_passes_ended += 1
            self._after_epoch = True
            self._eval_since_epoch = False
        elif info.is_eval:
            self.eval_seen = True
            self._eval_since_epoch = True
            # a pass of one batch abandoned before it ended (`next(iter(loader))` to peek a batch, to build
            # lazy layers) is not an evaluation
            real = info.ended or info.n_batches >= 2
            if real and info.fwd_train_mode and not info.fwd_no_grad and \
                    any(r.has_mode_layers for r in self.roots.values()):
                self._hit("eval-mode-missing", where=info.where_train_mode_fwd)
            from torchwise.diagnose.checks import data
            with quiet():
                data.check_val_augmentation(self, info)

    # ------------------------------------------------------------------ results

    def findings(self) -> list[Finding]:
        """Decide on everything observed so far. Cheap; safe to call more than once."""
        for p in self.passes:
            if not p.closed and p is not self.cur_pass:
                self.end_pass(p)
        from torchwise.diagnose import checks
        return checks.decide_all(self)

    def loss_values(self) -> list[float]:
        if not self.losses:
            return []
        if self.driven:  # end_step() brought floats
            return [float(v) for v in self.losses]
        return [float(v) for v in torch.stack([v.reshape(()).float().cpu() for v in self.losses]).tolist()]

    def report(self, findings: list[Finding] | None = None) -> dict[str, Any]:
        found = self.findings() if findings is None else findings
        return {"findings": [f.to_dict() for f in found], "steps": self.steps, "backward_calls": self.backwards,
                "models": [r.label for r in self.roots.values()], "optimizers": [type(o).__name__ for o in self.optimizers],
                "data_loader_passes": len(self.passes)}

    def render(self, findings: list[Finding] | None = None) -> str:
        found = self.findings() if findings is None else findings
        if not found:
            return f"torchwise: no silent mistakes found ({self.steps} optimizer steps watched)."
        parts = [f.render() for f in found]
        counted = {s: sum(f.severity == s for f in found) for s in ("error", "warning", "info")}
        hints = f", {counted['info']} hint(s) that may be by design" if counted["info"] else ""
        parts.append(f"torchwise: {len(found)} finding(s) ({counted['error']} error(s), {counted['warning']} "
                     f"warning(s){hints}) in {self.steps} optimizer steps.")
        return "\n\n".join(parts)


@contextlib.contextmanager
def watch(model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
          print_findings: bool = True, deep_every: int | None = None):
    """Watch the training code run inside the block and report its silent mistakes at the end.

        with torchwise.watch() as w:           # or torchwise.watch(model, optimizer)
            for epoch in range(3):
                train_one_epoch(...)
        w.findings()                            # list of Finding; printed at exit by default

    With no model, every model, optimizer and DataLoader used in the block is watched (the same
    instrumentation as `torchwise check`).
    """
    w = Watcher(check_mode=model is None, deep_every=deep_every)
    w.attach(model, optimizer, global_hooks=model is None)
    if model is not None:
        # a user's own loop: losses and backward are only visible through the global patches
        w.patch_backward()
        w.patch_dataloader()
        w.enter_function_mode()
    try:
        yield w
    finally:
        w.detach()
        if print_findings:
            print(w.render(), file=sys.stderr)
