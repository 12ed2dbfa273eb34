"""Keep the next batch on its way to the device while the current step computes.

Without it, the copy of batch k+1 is queued on the compute stream behind step k's kernels, so
the GPU does nothing while it runs. With it, the copy runs on a side stream from pinned memory
(the loader pins it), and the compute stream waits for that copy only when it needs the batch.

Fetching one batch ahead is only allowed where that cannot change the numbers a run draws:
loader workers seed every sample from (seed, epoch, position) and tensors served by batch
indexing draw nothing, but a data set read in the main process draws from the global RNGs, and
reading it one step early would interleave those draws with the model's dropout differently
after a resume. `prefetch_allowed` says which case a loader is.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

_END = object()


class Prefetcher:
    """Iterator of prepared batches, one batch ahead of its consumer. On the CPU there is no stream:
    the same order of fetching, which the CPU tests use to check that training is unchanged."""

    def __init__(self, batches: Iterator[Any], device: torch.device, prepare: Callable[[Any], Any]):
        self._batches, self._prepare = batches, prepare
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._next = self._load()

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self) -> Any:
        batch = self._next
        if batch is _END:
            raise StopIteration
        if self._stream is not None:
            current = torch.cuda.current_stream(self._stream.device)
            current.wait_stream(self._stream)
            # Allocated on the side stream, used on this one: without record_stream the caching
            # allocator could hand the memory out again while this stream still reads it.
            _record_stream(batch, current)
        self._next = self._load()
        return batch

    def _load(self) -> Any:
        if self._stream is None:
            try:
                return self._prepare(next(self._batches))
            except StopIteration:
                return _END
        # The fetch itself also runs on the side stream: a data set already on the GPU is gathered
        # there (after the work it may depend on), so its temporaries belong to the side stream and
        # are not freed under it by the compute stream's allocations.
        self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            try:
                return self._prepare(next(self._batches))
            except StopIteration:
                return _END


def prefetch_allowed(loader: Any, num_workers: int) -> tuple[bool, str]:
    """(allowed, why not): see the module doc."""
    from torchwise.train.state.loaders import BatchIndexedTensors

    if num_workers > 0 or isinstance(getattr(loader, "dataset", None), BatchIndexedTensors):
        return True, ""
    return False, "the data set is read in the main process (num_workers=0): reading ahead would change its random draws"


def _record_stream(obj: Any, stream: "torch.cuda.Stream") -> None:
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _record_stream(o, stream)
    elif isinstance(obj, dict):
        for o in obj.values():
            _record_stream(o, stream)
