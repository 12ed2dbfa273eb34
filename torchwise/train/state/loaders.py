"""Data loaders the Trainer can resume exactly, mid-epoch, without replaying batches.

The order of an epoch is a pure function of (seed, epoch): a resumed run starts its batch sampler
at the next unseen batch instead of spinning through the loader. A user's own
`DataLoader(..., shuffle=True)` is rebuilt around the same dataset, batch size, collate function,
workers and pinning, with this sampler in place of its RandomSampler.

Random augmentation: with worker processes, each sample is fetched under a seed derived from
(seed, epoch, position), so augmentations do not depend on which worker fetched what or on where
the run was resumed. Without workers, augmentations draw from the main process' RNG, which the
checkpoint saves and restores.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import (BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler,
                              SequentialSampler)
from torch.utils.data import TensorDataset, default_collate
from torch.utils.data.distributed import DistributedSampler

from torchwise.errors import TorchwiseError
from torchwise.train.state.reproducibility import derive_seed


class ResumableBatchSampler(Sampler[list]):
    """Batches of indices for one epoch; `set_epoch` picks the order, `set_start` skips batches already seen.

    Under DDP each rank takes every world_size-th sample of the same epoch order (like
    DistributedSampler). Training shards are padded by repeating the first samples so that every rank
    runs the same number of steps (an uneven last batch would leave one rank waiting in all_reduce
    forever); validation shards are not padded, so every sample is counted exactly once.
    """

    def __init__(self, n: int, batch_size: int, *, shuffle: bool, drop_last: bool, seed: int, keyed: bool,
                 rank: int = 0, world_size: int = 1, pad: bool = True):
        self.n, self.batch_size, self.shuffle, self.drop_last = n, batch_size, shuffle, drop_last
        self.seed, self.keyed = seed, keyed
        self.rank, self.world_size, self.pad = rank, world_size, pad
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def set_start(self, batch_index: int) -> None:
        self.start = batch_index

    def shard_size(self) -> int:
        if self.pad:
            return -(-self.n // self.world_size)
        return len(range(self.rank, self.n, self.world_size))

    def batches_per_epoch(self) -> int:
        m = self.shard_size()
        return m // self.batch_size if self.drop_last else -(-m // self.batch_size)

    def __len__(self) -> int:
        return max(0, self.batches_per_epoch() - self.start)

    def __iter__(self) -> Iterator[list]:
        if self.shuffle:
            g = torch.Generator().manual_seed(derive_seed(self.seed, self.epoch))
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        if self.world_size > 1:
            if self.pad:
                total = self.shard_size() * self.world_size
                order = (order * (1 + total // self.n))[:total]
            positions_global = list(range(self.rank, len(order), self.world_size))
        else:
            positions_global = list(range(self.n))
        m = len(positions_global)
        for b in range(self.start, self.batches_per_epoch()):
            positions = positions_global[b * self.batch_size:min((b + 1) * self.batch_size, m)]
            if self.keyed:
                yield [(derive_seed(self.seed, self.epoch, p), order[p]) for p in positions]
            elif self.world_size == 1:  # positions are consecutive: one slice, no per-index Python work
                yield order[positions[0]:positions[-1] + 1] if positions else []
            else:
                yield [order[p] for p in positions]


class BatchIndexedTensors(Dataset):
    """A TensorDataset served a whole batch at a time: `t[indices]` for each tensor.

    The default path fetches samples one by one and stacks them again (collation); for data that
    already sits in memory as tensors, one indexing operation per tensor gives the same batch
    without the per-sample Python work.
    """

    def __init__(self, dataset: TensorDataset):
        self.tensors = dataset.tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(t[index] for t in self.tensors)


class SeededDataset(Dataset):
    """Fetches item `idx` with every RNG seeded from the key the sampler computed for it."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        sample_seed, idx = key
        torch.default_generator.manual_seed(sample_seed)
        random.seed(sample_seed)
        np.random.seed(sample_seed % (2**32))
        return self.dataset[idx]


@dataclass
class LoaderPlan:
    """How a loader was built, for the run log."""
    batch_size: int
    num_workers: int
    pin_memory: bool
    shuffle: bool
    resumable: bool
    note: str = ""


class TrainLoader:
    """A DataLoader plus the sampler that makes it resumable (or the user's loader as-is, when it cannot be)."""

    def __init__(self, loader: DataLoader, sampler: ResumableBatchSampler | None, plan: LoaderPlan):
        self.loader, self.sampler, self.plan = loader, sampler, plan
        self.position_restored = False  # a loader with its own state was put back at the checkpoint's batch

    def batches_per_epoch(self) -> int | None:
        """None for a stream with no length (an IterableDataset): its epoch ends when it runs out."""
        if self.sampler is not None:
            return self.sampler.batches_per_epoch()
        try:
            return len(self.loader)
        except TypeError:
            return None

    @property
    def keeps_own_state(self) -> bool:
        """A loader of the user's that saves and restores its own position (torchdata's StatefulDataLoader)."""
        return self.sampler is None and has_own_state(self.loader)

    def epoch_iter(self, epoch: int, start_batch: int = 0) -> Iterator[Any]:
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)
            self.sampler.set_start(start_batch)
            if self.loader.generator is not None:
                self.loader.generator.manual_seed(derive_seed(self.sampler.seed, epoch, 1))
            return iter(self.loader)
        if self.position_restored:  # the loader's own state_dict put it where the checkpoint was
            self.position_restored = False
            return iter(self.loader)
        # Not rebuildable (custom sampler / iterable dataset): replay to the position, the only correct option.
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch") and not self.keeps_own_state:
            sampler.set_epoch(epoch)
        it = iter(self.loader)
        for _ in range(start_batch):
            next(it)
        return it


class LoaderState:
    """A checkpoint component for a loader that keeps its own position (state_dict / load_state_dict)."""

    def __init__(self, train_loader: TrainLoader):
        self.train_loader = train_loader

    def state_dict(self) -> dict[str, Any]:
        return self.train_loader.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Exact, the epoch in progress and the next ones, when the loader draws its shuffling seed from the
        # global torch RNG (generator=None), which the checkpoint restores. A generator of the user's own
        # is not in torchdata's state: later epochs would then be shuffled differently.
        self.train_loader.loader.load_state_dict(state)
        self.train_loader.position_restored = True


def has_own_state(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def auto_workers(device: torch.device) -> int:
    # On CPU the model and the workers compete for the same cores, and in-memory data sets do not
    # need them; on a GPU the host must keep up with the device.
    if device.type != "cuda":
        return 0
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def _check_dataset(dataset: Any, role: str) -> int:
    if isinstance(dataset, IterableDataset):
        return -1
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TorchwiseError(f"{role} is neither a DataLoader nor a map-style Dataset.",
                             values={role: type(dataset).__name__},
                             fix="Pass a torch.utils.data.Dataset (with __len__ and __getitem__) or a DataLoader.")
    n = len(dataset)
    if n == 0:
        raise TorchwiseError(f"{role} is empty: it has 0 samples.", values={role: type(dataset).__name__},
                             fix="Check the path or the filter that built the data set.")
    return n


def build_loader(data: Any, *, role: str, train: bool, device: torch.device, batch_size: int, seed: int,
                 num_workers: int | str = "auto", rank: int = 0, world_size: int = 1) -> TrainLoader:
    """A resumable loader for a Dataset or a user's DataLoader (sharded by rank under DDP)."""
    in_memory = type(data) is TensorDataset
    on_device = in_memory and any(t.device.type != "cpu" for t in data.tensors)
    pin = device.type == "cuda" and not on_device  # only CPU tensors can be pinned
    shard = dict(rank=rank, world_size=world_size, pad=train)
    if isinstance(data, DataLoader):
        return _rebuild_user_loader(data, role=role, seed=seed, shard=shard)
    n = _check_dataset(data, role)
    note = ""
    if on_device and num_workers not in ("auto", "tune", 0):
        raise TorchwiseError(f"{role} holds tensors on {data.tensors[0].device}, which worker processes cannot load.",
                             values={"num_workers": num_workers, "device": str(data.tensors[0].device)},
                             fix="Use num_workers=0 (the tensors are served by batch indexing, on the device, "
                                 "with no copy), or keep the data set on the CPU.")
    if in_memory and num_workers in ("auto", "tune"):
        # Batch indexing of tensors already in memory beats any number of workers (each would collate
        # sample by sample and copy through shared memory), so there is nothing to measure.
        workers = 0
    # On a GPU "auto" measures (the loader must keep the device busy); on the CPU the workers would
    # take cores from the model, which a loader-only measurement cannot see, so "auto" stays at 0.
    elif train and n > 0 and (num_workers == "tune" or (num_workers == "auto" and device.type == "cuda")):
        from torchwise.data.tune_loader import tune_loader

        tuning = tune_loader(data, batch_size, pin_memory=pin)
        workers = tuning.best_workers
        note = "workers measured: " + ", ".join(f"{w}: {r:.0f} batches/s" for w, r in tuning.batches_per_s.items())
    elif num_workers in ("auto", "tune"):
        workers = auto_workers(device)
    else:
        workers = int(num_workers)
    if n < 0:
        loader = DataLoader(data, batch_size=batch_size, num_workers=workers, pin_memory=pin)
        return TrainLoader(loader, None, LoaderPlan(batch_size, workers, pin, False, False, "iterable data set"))
    sampler = ResumableBatchSampler(n, batch_size, shuffle=train, drop_last=False, seed=seed, keyed=workers > 0,
                                    **shard)
    if type(data) is TensorDataset and workers == 0:
        loader = DataLoader(BatchIndexedTensors(data), sampler=sampler, batch_size=None, pin_memory=pin,
                            generator=torch.Generator())
        return TrainLoader(loader, sampler, LoaderPlan(batch_size, 0, pin, train, True,
                                                       "; ".join(filter(None, [note, "in-memory tensors: batch indexing"]))))
    loader = DataLoader(SeededDataset(data) if workers > 0 else data, batch_sampler=sampler, num_workers=workers,
                        pin_memory=pin, persistent_workers=workers > 0, generator=torch.Generator())
    return TrainLoader(loader, sampler, LoaderPlan(batch_size, workers, pin, train, True, note))


def _rebuild_user_loader(loader: DataLoader, *, role: str, seed: int, shard: dict[str, Any]) -> TrainLoader:
    n = _check_dataset(loader.dataset, role)
    plan = LoaderPlan(loader.batch_size or 0, loader.num_workers, loader.pin_memory, False, False)
    if has_own_state(loader) and shard["world_size"] == 1:  # it resumes itself: keep it as it is
        plan.resumable, plan.note = True, f"{type(loader).__name__}: resumed through its own state_dict"
        return TrainLoader(loader, None, plan)
    simple_sampler = type(loader.sampler) in (RandomSampler, SequentialSampler, DistributedSampler)
    simple_batches = type(loader.batch_sampler) is BatchSampler and loader.batch_size is not None
    if n < 0 or not simple_sampler or not simple_batches:
        plan.note = "custom sampler: resumed by replaying the epoch up to the saved position"
        return TrainLoader(loader, None, plan)
    if isinstance(loader.sampler, DistributedSampler):  # its sharding is redone below, the same way
        shuffle = loader.sampler.shuffle
    else:
        shuffle = isinstance(loader.sampler, RandomSampler)
    if isinstance(loader.sampler, RandomSampler) and (loader.sampler.replacement or loader.sampler._num_samples is not None):
        plan.note = "RandomSampler with replacement/num_samples: resumed by replaying"
        return TrainLoader(loader, None, plan)
    workers = loader.num_workers
    sampler = ResumableBatchSampler(n, loader.batch_size, shuffle=shuffle, drop_last=loader.drop_last,
                                    seed=seed, keyed=workers > 0, **shard)
    kwargs: dict[str, Any] = dict(
        batch_sampler=sampler, num_workers=workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
        timeout=loader.timeout, worker_init_fn=loader.worker_init_fn, generator=torch.Generator(),
        multiprocessing_context=loader.multiprocessing_context,
    )
    if workers > 0:
        kwargs.update(persistent_workers=loader.persistent_workers, prefetch_factor=loader.prefetch_factor)
    if getattr(loader, "pin_memory_device", ""):
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if type(loader.dataset) is TensorDataset and workers == 0 and loader.collate_fn is default_collate:
        rebuilt = DataLoader(BatchIndexedTensors(loader.dataset), sampler=sampler, batch_size=None,
                             pin_memory=loader.pin_memory, generator=torch.Generator())
        plan.note = "in-memory tensors: batch indexing"
    else:
        rebuilt = DataLoader(SeededDataset(loader.dataset) if workers > 0 else loader.dataset, **kwargs)
    plan.shuffle, plan.resumable = shuffle, True
    return TrainLoader(rebuilt, sampler, plan)
