"""What a checked script prints, kept for the detectors while it still reaches the terminal.

Its own module because it is not a hook: the script runner installs it as sys.stdout/sys.stderr, and all
it needs of the Watcher is three public counters (training passes ended, the printed text and its size).
"""
from __future__ import annotations

from typing import Any

from torchwise.diagnose.user_code import user_where


class OutputTap:
    """sys.stdout / sys.stderr while a script runs under check: every write goes to the stream as before, and
    what the script printed is kept (bounded), marked with how many training passes over a loader had ended
    when it was written (loss-average-wrong-count reads the epoch's printed loss from it)."""

    MAX_CHARS = 2_000_000

    def __init__(self, stream: Any, watcher: Any):
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
                w = self._tw_watcher.loaders  # the printed text belongs to the loader passes' time line
                if isinstance(text, str) and w.printed_chars < self.MAX_CHARS and any(c.isdigit() for c in text):
                    if w.train_passes_ended:
                        w.printed_chars += len(text)
                        w.printed.append((w.train_passes_ended, text, user_where(2)))
                    elif self._tw_watcher.steps and not w.passes:  # batches made by hand: the steps' time line
                        w.printed_chars += len(text)
                        w.printed_by_step.append((self._tw_watcher.steps, len(self._tw_watcher.loss_watch.losses),
                                                  text, user_where(2)))
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
