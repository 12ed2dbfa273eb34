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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped Trainer.fit(); its lines (where it stopped, the checkpoint, how to resume) are on the
    console already and in str(exc), `checkpoint` is the one written (or None) and `step` where it stopped.

    A KeyboardInterrupt, so that Ctrl-C still stops the script (a fit() that returned would let the code
    after it export or evaluate a half-trained model), `except KeyboardInterrupt` and `finally` blocks run
    as for any Ctrl-C, and `except Exception` (a retry loop) does not swallow it. Not caught, it ends the
    script with those lines and no traceback: the traceback would show torchwise's loop, not the user's
    code, and bury the resume line (see end_quietly)."""

    def __init__(self, message: str, *, step: int, checkpoint: Any = None, said: bool = True):
        super().__init__(message)
        self.message, self.step, self.checkpoint = message, step, checkpoint
        self.said = said  # printed on the console already (by the main process)

    def _render_traceback_(self) -> list[str]:
        """IPython and Jupyter show these lines instead of a traceback."""
        return [] if self.said else self.message.splitlines()


def end_quietly() -> None:
    """Let an Interrupted that nothing catches end the program without a traceback: sys.excepthook
    (where Python reports an uncaught exception) skips it, and passes every other exception on to the
    hook that was there before. Installed once, by the first Interrupted raised."""
    import sys

    hook = sys.excepthook
    if getattr(hook, "torchwise_quiet", False):
        return

    def quiet(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if isinstance(value, Interrupted):
            if not value.said:
                print(value.message, file=sys.stderr, flush=True)
            return
        hook(kind, value, tb)

    quiet.torchwise_quiet = True  # type: ignore[attr-defined]
    sys.excepthook = quiet


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
