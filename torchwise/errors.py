"""User-facing errors.

Every error torchwise raises for bad input says three things: what happened, the values
involved, and how to fix it. The CLI prints these without a traceback.
"""
from __future__ import annotations

from typing import Any, Mapping

from torchwise.file_names import readable


class TorchwiseError(Exception):
    """An error caused by the user's input or environment, with the fix attached."""

    def __init__(self, what: str, *, values: Mapping[str, Any] | None = None, fix: str | None = None):
        self.what = what
        self.values = dict(values or {})
        self.fix = fix
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [self.what]
        for key, value in self.values.items():
            value = readable(value)  # a file name that is not UTF-8 is shown as text, not as "\udce9"
            text = repr(value) if not isinstance(value, str) else value
            if len(text) > 500:
                text = text[:500] + " ..."
            lines.append(f"  {key}: {text}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class ConfigError(TorchwiseError):
    """A configuration key or value that cannot be used."""


class CheckpointError(TorchwiseError):
    """A checkpoint that is missing, incomplete, or belongs to another model."""


class TrainingStopped(TorchwiseError):
    """Training stopped on purpose because continuing would train on garbage."""


class OutOfMemory(TorchwiseError):
    """Out of memory (a GPU's or this machine's) while torchwise was doing something named: what ran
    out, the allocator's words and the remedies, instead of the allocator's traceback."""


# The allocators' own words: CUDA's and MPS's "out of memory", the CPU allocator's "can't allocate memory",
# cuDNN / cuBLAS workspaces, C++'s bad_alloc and onnxruntime's "Failed to allocate memory".
_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory", "CUDNN_STATUS_ALLOC_FAILED",
              "CUBLAS_STATUS_ALLOC_FAILED", "std::bad_alloc", "Failed to allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """Python's MemoryError, torch's OutOfMemoryError (seen by name: no torch import here), and the
    allocation failures other libraries raise as RuntimeError or their own error types."""
    if isinstance(exc, (MemoryError, OutOfMemory)):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    if isinstance(exc, (RuntimeError, OSError)) or type(exc).__module__.startswith("onnxruntime"):
        text = str(exc)
        return any(word.lower() in text.lower() for word in _OOM_WORDS)
    return False


def out_of_memory(exc: BaseException, doing: str, fix: str, cls: type = OutOfMemory, **values: Any) -> OutOfMemory:
    """`exc` (an allocation failure) as an error that says what ran out while `doing` what, and `fix`."""
    text = str(exc).strip()
    cpu = isinstance(exc, MemoryError) or "cpu" in text.lower() or "can't allocate" in text.lower() \
        or "bad_alloc" in text
    where = "this machine's memory (RAM)" if cpu else "the GPU's memory" if "cuda" in text.lower() \
        or "gpu" in text.lower() else "memory"
    found = {"memory": where, "error": (text.splitlines() or [type(exc).__name__])[0][:300] or type(exc).__name__,
             **values}
    limit = _address_space_limit()
    if cpu and limit:
        found["memory limit"] = limit
    return cls(f"Out of memory while {doing}.", values=found, fix=fix)


def _address_space_limit() -> str | None:
    """This process' memory limit (ulimit -v) when it has one: often the reason on a shared machine."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else f"{soft / 2**20:.0f} MiB (ulimit -v)"
