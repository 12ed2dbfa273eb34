"""fit() called again on the same Trainer: staged training (a part of the Trainer).

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
from typing import Any

import torch

from torchwise.errors import ConfigError
from torchwise.train.state import checkpoint as ckpt
from torchwise.train.distributed import process_group as distributed
from torchwise.train.distributed.sharding import is_sharded


class TrainerStages:
    def begin_stage(self, optimizer: Any, settings: dict[str, Any]) -> int:
        """The stage this fit() call is (0 for the first); its settings and optimizer are taken."""
        if settings:
            self.config = self.config.replace(**settings)
        if optimizer is not None:
            from torchwise.train import input_checks as checks_

            checks_.check_optimizer_arg(optimizer, self.model)
            self.optimizer_arg = optimizer
        stage, self.stages_started = self.stages_started, self.stages_started + 1
        self.stop_requested = False  # a request_stop() ended the stage before, not this one
        return stage

    def checkpoint_stage(self) -> tuple[Path, dict[str, Any]] | None:
        """(path, position) of the checkpoint resume=True would continue from, or None. Read once per
        fit() call (stage_done_before and place_stage both ask)."""
        cfg = self.config
        if not cfg.resume or cfg.out_dir is None or self.setup_done:
            return None
        if self.peeked_for_stage == self.stages_started:
            return self.peeked
        found = ckpt.find_resume_checkpoint(cfg.resume, cfg.out_dir, warn=None)
        if found is None:
            return None
        state = torch.load(found / "state.pt", map_location="cpu", weights_only=True)
        self.peeked, self.peeked_for_stage = (found, state.get("position") or {}), self.stages_started
        return self.peeked

    def stage_done_before(self, stage: int) -> Path | None:
        """The checkpoint that is past `stage` (which then needs no training), or None."""
        found = self.checkpoint_stage()
        if found is None or int(found[1].get("stage", 0)) <= stage:
            return None
        if self.dist.is_main or not distributed.env_from_torchrun().enabled:
            print(f"torchwise: stage {stage} of this run is done ({found[0].name} is of stage "
                  f"{found[1].get('stage')}): skipped", file=sys.stderr)
        return found[0]

    def place_stage(self, stage: int) -> None:
        """Where the stage begins: here and now, or, resuming inside it, where the checkpoint says."""
        pos = self.pos
        found = self.checkpoint_stage()
        if found is not None and int(found[1].get("stage", 0)) == stage:
            position = found[1]
            pos.stage_start_step = int(position.get("stage_start_step", 0))
            pos.stage_start_epoch = int(position.get("stage_start_epoch", 0))
            pos.stage_start_batch = int(position.get("stage_start_batch", 0))
        else:
            pos.stage_start_step, pos.stage_start_epoch, pos.stage_start_batch = pos.step, pos.epoch, pos.batch_in_epoch
        pos.stage = stage

    def setup_next_stage(self) -> None:
        """A stage after one that ran in this process: its own optimizer, schedule, watch and step."""
        cfg = self.config
        if cfg.strategy == "fsdp" or is_sharded(self.model):
            raise ConfigError("fit() again (a new stage) does not work with strategy='fsdp'.",
                              values={"strategy": cfg.strategy},
                              fix="Use strategy='ddp', or a new Trainer for the next stage (initialised from this "
                                  "run's weights).")
        if self.dist.enabled:  # DDP knows the parameters that were trainable when it was built
            self.train_model = distributed.wrap_model(self.model, self.dist, self.device, cfg.strategy)
            if "compile" in self.fast_plan.on:
                from torchwise.train.speed.fast import compile_model

                self.eager_model, self.train_model = self.train_model, compile_model(self.train_model,
                                                                                     cfg.compile_options)
        self.optimizer = self.build_optimizer() if not isinstance(self.optimizer_arg, torch.optim.Optimizer) \
            else self.optimizer_arg
        if cfg.early_stopping is not None:
            cfg.early_stopping.bad_evaluations = 0  # patience counts within a stage
        self.build_stage_parts()
        self.model.train()
        self.register_state()
