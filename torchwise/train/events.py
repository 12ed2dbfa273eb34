"""Events with removable handles: `handle = trainer.on("step_end", fn)`, later `handle.remove()`.

Callbacks are plain callables registered for a named event and called with keyword arguments; the
set of events is closed, so a typo is an error at registration instead of a callback never called.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

from torchwise.errors import ConfigError

EVENTS = {
    "fit_start": "before the first step (trainer=)",
    "epoch_start": "at the start of each epoch (trainer=, epoch=)",
    "step_end": "after each optimizer step (trainer=, step=, loss=, lr=, grad_norm=, skipped=)",
    "evaluation_start": "before each validation (trainer=, step=)",
    "evaluation_end": "after each validation (trainer=, step=, metrics=)",
    "checkpoint_saved": "after a checkpoint is complete on disk (trainer=, step=, path=)",
    "epoch_end": "at the end of each epoch (trainer=, epoch=)",
    "fit_end": "when fit() returns (trainer=, result=)",
}
Event = str


@dataclass
class Handle:
    _registry: "Events"
    _event: str
    _fn: Callable[..., Any]

    def remove(self) -> None:
        self._registry.remove(self._event, self._fn)


@dataclass
class Events:
    _callbacks: dict[str, list[Callable[..., Any]]] = field(default_factory=lambda: {name: [] for name in EVENTS})

    def on(self, event: str, fn: Callable[..., Any]) -> Handle:
        if event not in EVENTS:
            close = difflib.get_close_matches(event, EVENTS, n=1)
            raise ConfigError("Unknown event name.", values={"event": event, "allowed": ", ".join(EVENTS),
                                                            "did you mean": close[0] if close else "-"},
                              fix="Register the callback for one of the allowed events.")
        if not callable(fn):
            raise ConfigError("Callback is not callable.", values={"callback": repr(fn)}, fix="Pass a function.")
        self._callbacks[event].append(fn)
        return Handle(self, event, fn)

    def remove(self, event: str, fn: Callable[..., Any]) -> None:
        """Unregister `fn` from `event` (nothing happens when it is not registered)."""
        if fn in self._callbacks[event]:
            self._callbacks[event].remove(fn)

    def emit(self, event: str, **payload: Any) -> None:
        for fn in list(self._callbacks[event]):
            fn(**payload)
