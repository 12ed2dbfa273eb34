"""Which failures of a step its callers act on by their type, said in one place.

Out of memory (the OOM guard shrinks the micro-batch; evaluation and the batch-size finder back off)
and torch.compile's own failures (the compile fallback reruns eagerly) pass through the step as they
are; every other error of a user's model or loss is explained by the step's input checks.
"""
from __future__ import annotations

import torch

from torchwise.errors import is_out_of_memory


def is_oom(exc: BaseException) -> bool:
    """The allocator's own error type, Python's MemoryError, and the out-of-memory RuntimeErrors of other
    paths (cuDNN workspaces, the CPU allocator, MPS): torchwise.errors.is_out_of_memory says which."""
    return isinstance(exc, torch.OutOfMemoryError) or is_out_of_memory(exc)


def is_compile_failure(exc: BaseException) -> bool:
    """Errors raised by torch.compile's machinery (dynamo tracing, a backend), not by the model's own code."""
    module = type(exc).__module__ or ""
    return module.startswith(("torch._dynamo", "torch._inductor")) or "BackendCompilerFailed" in type(exc).__name__

