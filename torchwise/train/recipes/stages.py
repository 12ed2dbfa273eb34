"""fit() called again on the same Trainer: staged training. `Stages` is a part the Trainer owns
(trainer.stages); it sees the Trainer only through `StagesView`.

The classic fine-tuning recipe trains the new head with the backbone frozen, then unfreezes it and
trains everything at a lower learning rate. Each fit() call is a stage:

    trainer.fit(epochs=2)                                   # stage 0: the head (backbone frozen)
    for p in model.parameters(): p.requires_grad = True
    trainer.fit(epochs=3, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-4))   # stage 1: everything

A stage continues the run: the step count, the epoch, the metrics log (metrics.csv gains rows), the
best metric and the checkpoints (their step numbers go on). Its own are its length (epochs/max_steps
counted from where it begins), its optimizer (the one given to fit(), else built again from the
Trainer's factory, so that parameters unfrozen in between are in it), its schedule, and, under DDP, the
wrapper (DDP registers the trainable parameters when it is built). Settings given to fit() apply
from this stage on.

Resume: every checkpoint records its stage. A script run again with resume=True skips the stages its
newest checkpoint is past (their fit() returns at once, saying so) and resumes inside the stage the
checkpoint belongs to, bit-identically.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from torchwise.train import input_checks as checks_
from torchwise.train.state import checkpoint as ckpt
from torchwise.train.distributed import process_group as distributed
from torchwise.train.distributed.process_group import DistEnv
from torchwise.train.settings import TrainerConfig
from torchwise.train.state.loop_state import Position


class SetupDone(Protocol):
    done: bool  # the run's parts were built by an earlier fit() call in this process


class StagesView(Protocol):
    """What Stages reads of the Trainer (all public). A stage's settings, its optimizer and the stop request
    are the Trainer's own: Stages sets them when a fit() call begins."""
    config: TrainerConfig
    optimizer_arg: checks_.OptimizerArg
    stop_requested: bool
    model: nn.Module
    dist: DistEnv
    pos: Position
    setup: SetupDone


class Stages:
    def __init__(self, run: StagesView):
        self.run = run
        self.started = 0  # fit() calls so far
        # the resume checkpoint's (path, position), read once per fit() call (for the call `peeked_for` counts)
        self.peeked: tuple[Path, dict[str, Any]] | None = None
        self.peeked_for = -1

    def begin(self, optimizer: Any, settings: dict[str, Any]) -> int:
        """The stage this fit() call is (0 for the first); its settings and optimizer are taken."""
        run = self.run
        if settings:
            run.config = run.config.replace(**settings)
        if optimizer is not None:
            checks_.check_optimizer_arg(optimizer, run.model)
            run.optimizer_arg = optimizer
        stage, self.started = self.started, self.started + 1
        run.stop_requested = False  # a request_stop() ended the stage before, not this one
        return stage

    def checkpoint_stage(self) -> tuple[Path, dict[str, Any]] | None:
        """(path, position) of the checkpoint resume=True would continue from, or None. Read once per
        fit() call (done_before and place both ask)."""
        cfg = self.run.config
        if not cfg.resume or cfg.out_dir is None or self.run.setup.done:
            return None
        if self.peeked_for == self.started:
            return self.peeked
        found = ckpt.find_resume_checkpoint(cfg.resume, cfg.out_dir, warn=None)
        if found is None:
            return None
        state = ckpt.read_state(found, mmap=True)  # readable: find_resume_checkpoint has read it so already
        self.peeked, self.peeked_for = (found, state.get("position") or {}), self.started
        return self.peeked

    def done_before(self, stage: int) -> Path | None:
        """The checkpoint that is past `stage` (which then needs no training), or None."""
        found = self.checkpoint_stage()
        if found is None or int(found[1].get("stage", 0)) <= stage:
            return None
        if self.run.dist.is_main or not distributed.env_from_torchrun().enabled:
            print(f"torchwise: stage {stage} of this run is done ({found[0].name} is of stage "
                  f"{found[1].get('stage')}): skipped", file=sys.stderr)
        return found[0]

    def place(self, stage: int) -> None:
        """Where the stage begins: here and now, or, resuming inside it, where the checkpoint says."""
        pos = self.run.pos
        found = self.checkpoint_stage()
        if found is not None and int(found[1].get("stage", 0)) == stage:
            position = found[1]
            pos.stage_start_step = int(position.get("stage_start_step", 0))
            pos.stage_start_epoch = int(position.get("stage_start_epoch", 0))
            pos.stage_start_batch = int(position.get("stage_start_batch", 0))
        else:
            pos.stage_start_step, pos.stage_start_epoch, pos.stage_start_batch = pos.step, pos.epoch, pos.batch_in_epoch
        pos.stage = stage
