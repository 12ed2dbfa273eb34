"""Ctrl-C during fit(): stop at the next point where the run can be saved whole, save it, say how to
resume, and raise torchwise.errors.Interrupted (a KeyboardInterrupt: Python's answer to Ctrl-C, without
the traceback when nothing catches it; errors.py says why).

A KeyboardInterrupt raised wherever the signal lands may tear the state: half an optimizer step
applied, the schedule not yet stepped, an evaluation's row written but not its best weights. So,
while the loop runs, the first SIGINT only marks the run as interrupted; the loop looks at the mark
between optimizer steps (where a regular checkpoint is taken, too), writes a checkpoint there and
raises. A second SIGINT raises at once, wherever it lands: checkpoints are written into a temporary
directory and renamed into place, so one cut short is never taken for a complete one.

The handler is only installed from the main thread, only over Python's default SIGINT handler (a
program's own handler is left alone) and not under torchrun (the ranks could stop at different
steps, and a checkpoint needs all of them).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Protocol

from torchwise.errors import Interrupted, end_quietly
from torchwise.train.distributed.process_group import DistEnv
from torchwise.train.settings import TrainerConfig
from torchwise.train.state import checkpoint as ckpt
from torchwise.train.state.loop_state import Position
from torchwise.train.state.run_files import RunFiles


class InterruptGuard:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.pending = False      # a first Ctrl-C arrived; stop at the next safe point
        self.deferring = False    # the loop is running: a first Ctrl-C waits for a safe point
        self.handled = False      # the resume hint has been printed
        self._previous: Any = None
        self._installed = False
        self._pid = os.getpid()

    def __enter__(self) -> "InterruptGuard":
        if (self.enabled and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.deferring = False
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    @property
    def active(self) -> bool:
        return self._installed

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            # A DataLoader worker forked from the loop (the terminal sends Ctrl-C to the whole process
            # group): it keeps serving batches until the main process, which decides, shuts it down.
            return
        if not self.deferring:
            raise KeyboardInterrupt
        if self.pending:
            print("torchwise: second interrupt: stopping at once.", file=sys.stderr, flush=True)
            self.deferring = False
            raise KeyboardInterrupt
        self.pending = True
        print("torchwise: interrupt received: stopping after this optimizer step to save a checkpoint "
              "(press Ctrl-C again to stop at once).", file=sys.stderr, flush=True)


class InterruptView(Protocol):
    """What InterruptHandler reads of the Trainer (all public)."""
    config: TrainerConfig
    pos: Position
    files: RunFiles
    dist: DistEnv


class InterruptHandler:
    """The Trainer's side of Ctrl-C (trainer.interrupts): the guard of the current fit() call, the safe points
    of the loop, the checkpoint written there and the resume hint."""

    def __init__(self, run: InterruptView):
        self.run = run
        self.guard = InterruptGuard(enabled=False)  # fit() arms a new one for each call
        self.hint: str | None = None  # printed on Ctrl-C instead of the Python resume hint (the CLI's)
        self.checkpoint: Path | None = None  # the checkpoint written when fit() was interrupted

    def arm(self, enabled: bool) -> InterruptGuard:
        """A new guard for this fit() call (entered by fit(); not under torchrun)."""
        self.guard = InterruptGuard(enabled=enabled)
        return self.guard

    def safe_point(self) -> None:
        """Between optimizer steps, after the step's evaluation and checkpoint: the state a checkpoint
        taken now holds is exactly the state a resumed run continues from."""
        if self.guard.pending:
            self.stop()

    def stop(self) -> None:
        """Save at this safe point (with out_dir, unless a checkpoint of this step exists), say how to
        resume, and raise Interrupted."""
        run = self.run
        path, out_dir = None, run.config.out_dir
        if out_dir is not None:
            path = out_dir / "checkpoints" / ckpt.checkpoint_name(run.pos.step)
            if not ckpt.is_complete(path):  # not saved at this step already (checkpoint_every, epoch end)
                print(f"torchwise: saving a checkpoint at step {run.pos.step} ...", file=sys.stderr, flush=True)
                run.files.save_checkpoint()
        self.checkpoint = path
        self.guard.deferring = False
        raise self.interrupted(self.say_interrupted(path))

    def ended(self, exc: KeyboardInterrupt) -> Interrupted:
        """What fit() raises for a KeyboardInterrupt that ended it: the Interrupted of a safe point as it
        is; one that stopped it at once (a second Ctrl-C, one during the set-up) said and made one."""
        if isinstance(exc, Interrupted):
            return exc
        message = self.say_interrupted(None) if not self.guard.handled else "torchwise: interrupted"
        return self.interrupted(message)

    def interrupted(self, message: str) -> Interrupted:
        end_quietly()  # not caught, it ends the script with the lines above: no traceback
        return Interrupted(message, step=self.run.pos.step, checkpoint=self.checkpoint, said=self.run.dist.is_main)

    def after_finish(self, final_path: Path | None) -> None:
        """After the final weights: a Ctrl-C that came during the final evaluation or while they were
        written ends the call with Interrupted (the run is complete, nothing more is saved)."""
        self.guard.deferring = False
        if not self.guard.pending:
            return
        self.guard.handled = True
        message = (f"torchwise: interrupted after training finished (step {self.run.pos.step}); the final weights "
                   "are " + (f"in {final_path}" if final_path else "in the model (no out_dir)"))
        if self.run.dist.is_main:
            print(message, file=sys.stderr, flush=True)
        raise self.interrupted(message)

    def say_interrupted(self, path: Path | None) -> str:
        """Print (on the main process) and return where the run stopped, what was saved and how to resume."""
        self.guard.handled = True
        run = self.run
        step, out_dir = run.pos.step, run.config.out_dir
        if path is not None:
            hint = self.hint or (f"Trainer(..., out_dir={str(out_dir)!r}, resume=True).fit() with the "
                                 "same arguments continues exactly where it stopped")
            message = (f"torchwise: interrupted at step {step}; checkpoint saved: {path}\n"
                       f"torchwise: to resume: {hint}")
        elif out_dir is None:
            message = (f"torchwise: interrupted at step {step}; nothing was saved (no out_dir). Pass out_dir=... to "
                       "make an interrupted run resumable.")
        else:
            latest = ckpt.list_checkpoints(out_dir / "checkpoints")
            where = f"the latest complete checkpoint is {latest[-1]}" if latest else "no checkpoint was written yet"
            hint = self.hint or f"Trainer(..., out_dir={str(out_dir)!r}, resume=True).fit()"
            message = (f"torchwise: interrupted at step {step} before a checkpoint of it could be written; {where}"
                       + (f"\ntorchwise: to resume from it: {hint}" if latest else ""))
        if run.dist.is_main:
            print(message, file=sys.stderr, flush=True)
        return message
