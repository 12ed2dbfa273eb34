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
