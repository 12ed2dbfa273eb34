"""The watcher's view of the DataLoaders: each pass over a loader, its batches, and the epochs they make.

Its own module because passes are the run's time line (epochs, evaluations, what a printed loss belongs
to) and need a patch of DataLoader.__init__/__iter__ and an iterator wrapper of their own, apart from the
model and step hooks, which only read the current pass.
"""
from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from torchwise.diagnose.tensors import quiet
from torchwise.diagnose.user_code import user_where


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
    cpu_waits: list = field(default_factory=list)  # the process's CPU time during each wait (0: I/O or sleep)
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
    # loss-retains-graph in an evaluation pass: backward() calls before the pass, and (batch number, the loss
    # tensor, the marker on its graph node) for the first losses with a graph computed during it (deep steps)
    backwards_before: int = 0
    loss_graphs: list = field(default_factory=list)

    @property
    def is_eval(self) -> bool:
        return self.n_batches > 0 and self.steps == 0 and (self.fwd_train_mode + self.fwd_eval_mode) > 0


class _PassIter:
    """Wraps a DataLoader iterator: times each batch and marks the current pass."""

    def __init__(self, it: Iterator, info: PassInfo, watcher: Any):
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
        w = self._w
        t0, c0 = time.perf_counter(), time.process_time()
        # the batch is made with the checker's function mode out of the way: the watcher's checks concern the
        # model's step, and its per-call cost on a transform's tensor ops would make the wait look longer
        # than it is without the checker
        w.in_loader_fetch = threading.get_ident()  # this thread only: a prefetching thread leaves the step seen
        try:
            batch = next(self._it)
        except StopIteration:
            info.ended = True
            w.end_pass(info)
            raise
        finally:
            w.in_loader_fetch = 0
        t1 = time.perf_counter()
        if info.last_return is not None:
            info.gaps.append(t1 - info.last_return)
            info.waits.append(t1 - t0)
            info.cpu_waits.append(time.process_time() - c0)
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


class LoaderPasses:
    """The Watcher's part that tracks the passes over DataLoaders (patched, or told by attach_loaders)."""

    def _init_loaders(self) -> None:
        self.passes: list[PassInfo] = []
        self.cur_pass: PassInfo | None = None
        self.in_loader_fetch = 0  # the thread inside a watched DataLoader's next(): the function mode stands aside
        self.loader_sites: "weakref.WeakKeyDictionary[Any, str | None]" = weakref.WeakKeyDictionary()
        self.sampler_epochs: dict[int, list] = {}
        self.eval_seen = False
        self._after_epoch = False
        self._eval_since_epoch = False
        self.epoch_without_eval = False
        self.val_aug_checked: set[int] = set()
        self.val_aug_candidates: list[dict] = []
        # loss-average-wrong-count: what the script printed (OutputTap) and the training passes that ended
        self.printed: list[tuple[int, str, str | None]] = []
        self.printed_chars = 0
        self.train_passes_ended = 0

    def attach_loaders(self, train: Any = None, val: Any = None) -> None:
        """Tell the Watcher which loaders are which (Trainer); their passes are then tracked."""
        for loader in (train, val):
            if loader is not None and loader not in self.loader_sites:
                self.loader_sites[loader] = None
        if not any(o is torch.utils.data.DataLoader for o, _, _ in self.patches):
            self.patch_dataloader()

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
        info = PassInfo(loader=loader, index=len(self.passes), site=self.loader_sites.get(loader),
                        backwards_before=self.backwards)
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
            if info.loss_graphs and self.backwards == info.backwards_before:
                self._check_eval_loss_graphs(info)
            from torchwise.diagnose.checks import data
            with quiet():
                data.check_val_augmentation(self, info)
