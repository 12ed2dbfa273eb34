"""The checker's own health and stopping a checked script: the part of the Watcher every hook calls.

Its own module because every other part of the watcher needs it (each hook reports its failures here and
raises StopScript from here) and it needs none of them: it sits below them all. StopScript is also what
the script runner catches, and the runner should not need the hooks to name it.
"""
from __future__ import annotations

import os
import time
from typing import Callable

# A checked script that makes model forwards and no optimizer step (an inference loop that does not end) is
# stopped only when both hold: this many forwards, and IDLE_SECONDS since the last step (or the start). A count
# alone would stop a DQN filling its replay buffer, or any program that works a long time before training.
IDLE_FORWARDS = 2_000
IDLE_SECONDS = 120.0
IDLE_ENV = "TORCHWISE_CHECK_IDLE_SECONDS"  # another time (tests of the stop itself)


def idle_seconds() -> float:
    try:
        return float(os.environ.get(IDLE_ENV, IDLE_SECONDS))
    except ValueError:
        return IDLE_SECONDS
SWALLOWED_STOPS = 200   # StopScript raises a script may swallow (a bare except:) before check ends it itself
STRICT_ENV = "TORCHWISE_CHECK_STRICT"  # "1": a detector's own failure fails the check (tests, the corpus)


class StopScript(BaseException):
    """Raised from an optimizer step hook to stop a checked script once enough is known.

    A BaseException, so that the script's own `except Exception:` blocks do not swallow it. A bare
    `except:` does; so once the stop is asked for, every hook raises it again (CheckerHealth._raise_stop).
    """


class CheckerHealth:
    """The Watcher's part for its own failures (counted and shown, never the script's) and the stop of a checked
    script (why, how often the script swallowed it, the last resort, the idle-loop stop). It needs nothing of
    the other parts: each of them reports here (w.health) and stops the script from here."""

    def __init__(self, check_mode: bool):
        self.check_mode = check_mode
        # the checker's own failures: counted and shown, never the script's (strict: they fail the check)
        self.strict = os.environ.get(STRICT_ENV) == "1"
        self.internal_errors: list[dict] = []
        # stopping a checked script: why, how often it swallowed the stop, and the last resort
        self.stop_reason: str | None = None
        self._stops_raised = 0
        self._stop_since: float | None = None
        self.on_force_stop: Callable[[], None] | None = None   # runner: finish the report and end the process
        self.fwd_since_step = 0                   # model forwards since the last optimizer step
        self.idle_since = time.perf_counter()     # the last optimizer step (or the start)

    def internal_error(self, where: str, exc: BaseException) -> None:
        """A hook or detector of ours failed: lose that evidence, never the user's run; count and show it."""
        if isinstance(exc, StopScript):
            raise exc
        if len(self.internal_errors) < 20:
            import traceback
            self.internal_errors.append({"where": where, "error": f"{type(exc).__name__}: {exc}",
                                         "traceback": "".join(traceback.format_exception(type(exc), exc,
                                                                                         exc.__traceback__))})
        else:
            self.internal_errors[-1]["more"] = self.internal_errors[-1].get("more", 0) + 1

    def request_stop(self, reason: str) -> None:
        """Stop the checked script at the next hook (check mode only)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self._stop_since = time.perf_counter()
        self._raise_stop()

    def _raise_stop(self) -> None:
        """Raise StopScript; a script that keeps swallowing it (a bare except: around its loop) is ended
        by the runner's on_force_stop, which reports what was seen and exits."""
        self._stops_raised += 1
        if self._stops_raised > SWALLOWED_STOPS or (
                self._stops_raised > 1 and time.perf_counter() - (self._stop_since or 0.0) > 30.0):
            if self.on_force_stop is not None:
                self.on_force_stop()
        raise StopScript()

    def maybe_stop(self) -> None:
        if self.stop_reason is not None and self.check_mode:
            self._raise_stop()

    def note_step(self) -> None:
        """An optimizer step: the idle count starts again."""
        self.fwd_since_step = 0
        self.idle_since = time.perf_counter()

    def stop_if_idle(self, stepped: bool) -> None:
        """A checked script making model forwards and no optimizer step for long (see IDLE_FORWARDS) is stopped;
        stepped: whether any step (an optimizer's or a hand-written one) was seen."""
        if self.fwd_since_step >= IDLE_FORWARDS and time.perf_counter() - self.idle_since >= idle_seconds():
            what = "since the last optimizer step" if stepped else "and no optimizer step"
            self.request_stop(f"{self.fwd_since_step:,} model forwards {what}, over "
                              f"{time.perf_counter() - self.idle_since:.0f} s (an inference or evaluation loop that "
                              "does not end)")
