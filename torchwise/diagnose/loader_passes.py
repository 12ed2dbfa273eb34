"""The watcher's view of the DataLoaders: each pass over a loader, its batches, and the epochs they make.

Its own module because passes are the run's time line (epochs, evaluations, what a printed loss belongs
to) and need a patch of DataLoader.__init__/__iter__ and an iterator wrapper of their own, apart from the
model and step hooks, which only read the current pass.
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import torch

from torchwise.diagnose.health import CheckerHealth
from torchwise.diagnose.tensors import quiet
from torchwise.diagnose.user_code import user_where
from torchwise.diagnose.watch_parts import LossesView, ModelsView, PassInfo

if TYPE_CHECKING:
    from torchwise.diagnose.deep_steps import DeepSteps

# check mode: the first evaluation passes are watched as closely as the first steps (a deep step's machinery on),
# wherever they fall: after the deep window only every deep_every-th step is deep, and an evaluation's mistakes
# (max values compared with labels, a forward in train mode) are seen in the calls made on its outputs
DEEP_EVAL_PASSES = 3

_SCHEDSTAT = "/proc/thread-self/schedstat"
_schedstat_ok = True


def run_queue_seconds() -> float:
    """The time this thread has spent ready to run but waiting for a core (Linux's schedstat; 0 elsewhere).
    On a busy machine a wait for the next batch stretches by that much without the loader being slow."""
    global _schedstat_ok
    if not _schedstat_ok:
        return 0.0
    try:
        with open(_SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        _schedstat_ok = False
        return 0.0


def _no_queue() -> float:
    return 0.0


def blocked_count() -> int:
    """The times this thread gave up its core to wait (a file read, a worker's queue, a lock) plus the page faults
    that read from disk: a wait with none of them was spent on the CPU or off it for reasons not its own (another
    process had the core, the machine's CPU quota ran out)."""
    import resource

    try:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
    except (AttributeError, OSError, ValueError):  # (no RUSAGE_THREAD outside Linux: every wait counts as blocked)
        return 0
    return usage.ru_nvcsw + usage.ru_majflt


class _PassIter:
    """Wraps a DataLoader iterator: times each batch and marks the current pass."""

    def __init__(self, it: Iterator, info: PassInfo, passes: "LoaderPasses"):
        self._it = it
        self._info = info
        self._passes = passes
        self._health = passes.w.health

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        return getattr(self._it, name)

    def __next__(self):
        self._health.maybe_stop()
        info = self._info
        passes = self._passes
        queue = run_queue_seconds if passes.w.check_mode else _no_queue  # a file read: not in the Trainer's loop
        t0, c0, q0 = time.perf_counter(), time.process_time(), queue()
        b0 = blocked_count() if passes.w.check_mode else -1
        # the batch is made with the checker's function mode out of the way: the watcher's checks concern the
        # model's step, and its per-call cost on a transform's tensor ops would make the wait look longer
        # than it is without the checker
        passes.in_loader_fetch = threading.get_ident()  # this thread only: a prefetching thread leaves the step seen
        try:
            batch = next(self._it)
        except StopIteration:
            info.ended = True
            passes.end_pass(info)
            raise
        finally:
            passes.in_loader_fetch = 0
        t1 = time.perf_counter()
        if info.last_return is not None:
            info.gaps.append(t1 - info.last_return)
            info.waits.append(t1 - t0)
            info.cpu_waits.append(time.process_time() - c0)
            info.queued_waits.append(queue() - q0)
            info.blocked_waits.append(1 if b0 < 0 or blocked_count() > b0 else 0)
        info.last_return = t1
        info.n_batches += 1
        if len(info.batch_sizes) < 100_000:
            info.batch_sizes.append(_batch_size(batch))
        passes.cur_pass = info
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


class PassesWatcher(Protocol):
    """What LoaderPasses reads of the Watcher."""
    health: CheckerHealth
    patches: list[tuple[Any, str, Any]]   # (owner, name, original): undone by detach()
    loss_watch: LossesView           # backward() calls so far, the losses' graphs
    models: ModelsView                    # the models
    deep: "DeepSteps"                     # an evaluation pass after the deep window is made deep
    check_mode: bool

    def hit(self, id: str, *, info: dict | None = None, where: str | None = None) -> None: ...


class LoaderPasses:
    """The Watcher's part (w.loaders) that tracks the passes over DataLoaders (patched, or told by attach())."""

    def __init__(self, w: PassesWatcher):
        self.w = w
        self.passes: list[PassInfo] = []
        self.cur_pass: PassInfo | None = None
        self.in_loader_fetch = 0  # the thread inside a watched DataLoader's next(): the function mode stands aside
        self.loader_sites: "weakref.WeakKeyDictionary[Any, str | None]" = weakref.WeakKeyDictionary()
        self.sampler_epochs: dict[int, list] = {}
        self.eval_seen = False
        self.after_epoch = False
        self.eval_since_epoch = False
        self.epoch_without_eval = False
        self.val_aug_checked: set[int] = set()
        self.val_aug_candidates: list[dict] = []
        # loss-average-wrong-count: what the script printed (OutputTap) and the training passes that ended
        self.printed: list[tuple[int, str, str | None]] = []
        # ... and in a loop that batches by hand (no loader pass): (optimizer steps, losses seen, text, where)
        self.printed_by_step: list[tuple[int, int, str, str | None]] = []
        self.printed_chars = 0
        self.train_passes_ended = 0
        self.deep_eval_passes = 0    # evaluation passes made deep (DEEP_EVAL_PASSES)
        self._deepened: PassInfo | None = None

    def attach(self, train: Any = None, val: Any = None) -> None:
        """Which loaders are which (the Trainer's); their passes are then tracked."""
        for loader in (train, val):
            if loader is not None and loader not in self.loader_sites:
                self.loader_sites[loader] = None
        if not any(o is torch.utils.data.DataLoader for o, _, _ in self.w.patches):
            self.patch_dataloader()

    def patch_dataloader(self) -> None:
        from torch.utils.data import DataLoader
        orig_init, orig_iter = DataLoader.__init__, DataLoader.__iter__
        passes, health = self, self.w.health

        def __init__(loader, *args, **kwargs):
            orig_init(loader, *args, **kwargs)
            try:
                passes.loader_sites[loader] = user_where()
            except Exception as exc:
                health.internal_error("DataLoader.__init__ patch", exc)

        def __iter__(loader):
            it = orig_iter(loader)
            try:
                return passes.begin_pass(loader, it)
            except Exception as exc:
                health.internal_error("DataLoader.__iter__ patch", exc)
                return it

        self.w.patches.append((DataLoader, "__init__", orig_init))
        self.w.patches.append((DataLoader, "__iter__", orig_iter))
        DataLoader.__init__ = __init__
        DataLoader.__iter__ = __iter__

    def begin_pass(self, loader: Any, it: Iterator) -> _PassIter:
        from torch.utils.data.distributed import DistributedSampler
        for p in self.passes:
            if p.loader is loader and not p.closed:
                self.end_pass(p)
        info = PassInfo(loader=loader, index=len(self.passes), site=self.loader_sites.get(loader),
                        backwards_before=self.w.loss_watch.backwards)
        self.passes.append(info)
        self._deepen_eval_pass(loader, info)
        sampler = getattr(loader, "sampler", None)
        bs = getattr(loader, "batch_sampler", None)
        for s in (sampler, getattr(bs, "sampler", None)):
            if isinstance(s, DistributedSampler):
                self.sampler_epochs.setdefault(id(s), []).append(
                    {"epoch": s.epoch, "shuffle": s.shuffle, "site": info.site})
                break
        return _PassIter(it, info, self)

    def _deepen_eval_pass(self, loader: Any, info: PassInfo) -> None:
        """Check mode: a pass over a loader no step was ever taken on (an evaluation, as far as can be known at
        its start) is deep, for the first DEEP_EVAL_PASSES such passes after the deep window; end_pass puts
        the schedule back (a step taken during the pass does it itself)."""
        deep = self.w.deep
        if not self.w.check_mode or deep.active or self.deep_eval_passes >= DEEP_EVAL_PASSES or \
                any(p.loader is loader and p.steps for p in self.passes):
            return
        self.deep_eval_passes += 1
        self._deepened = info
        deep.set_deep(True)

    def note_step(self) -> None:
        """An optimizer step: it belongs to the current pass, and the epoch before it ended without an
        evaluation if none was seen since."""
        cur = self.cur_pass
        if cur is not None and not cur.closed:
            cur.steps += 1
        if self.after_epoch:
            if not self.eval_since_epoch:
                self.epoch_without_eval = True
            self.after_epoch = False

    def end_pass(self, info: PassInfo) -> None:
        if info.closed:
            return
        info.closed = True
        if self.cur_pass is info:
            self.cur_pass = None
        if self._deepened is info:
            self._deepened = None
            if info.steps == 0:  # (a step re-scheduled it already)
                self.w.deep.set_deep(self.w.deep.want_deep())
        if info.steps > 0:
            if info.ended:
                self.train_passes_ended += 1
            self.after_epoch = True
            self.eval_since_epoch = False
        elif info.is_eval:
            self.eval_seen = True
            self.eval_since_epoch = True
            # a pass of one batch abandoned before it ended (`next(iter(loader))` to peek a batch, to build
            # lazy layers) is not an evaluation
            real = info.ended or info.n_batches >= 2
            if real and info.fwd_train_mode and not info.fwd_no_grad and \
                    any(r.has_mode_layers for r in self.w.models.roots.values()):
                self.w.hit("eval-mode-missing", where=info.where_train_mode_fwd)
            if info.loss_graphs and self.w.loss_watch.backwards == info.backwards_before:
                self.w.loss_watch.check_eval_loss_graphs(info)
            from torchwise.diagnose.checks import data
            with quiet():
                data.check_val_augmentation(self.w, info)
