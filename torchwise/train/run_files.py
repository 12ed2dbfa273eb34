"""What a run keeps on disk: checkpoints (written, and read back on resume), the best weights and
the final model.

Split from the Trainer so that trainer.py holds the loop. `RunFiles` reads the Trainer's parts
(model, optimizer, schedule, position, data, ranks) and writes or restores them; the only state it
owns is the in-memory copy of the best weights (early_stopping's restore_best).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from torchwise.errors import ConfigError, TorchwiseError
from torchwise.train import checkpoint as ckpt
from torchwise.train.distributed import barrier, gather_objects, sum_across
from torchwise.train.reproducibility import capture_rng_state, restore_rng_state, seed_everything
from torchwise.train.sharding import full_state_dict, is_sharded, load_sharded, save_sharded
from torchwise.weights import apply_state_dict, model_state_dict, save_state_dict

STATE_FORMAT = 1


class RunFiles:
    def __init__(self, trainer: Any):
        self.t = trainer
        self.best_state: dict[str, torch.Tensor] | None = None

    def state(self, rng_per_rank: list[dict[str, Any]]) -> dict[str, Any]:
        pos = self.t.pos
        return {
            "format": STATE_FORMAT,
            "position": {k: getattr(pos, k) for k in ("step", "epoch", "batch_in_epoch", "skipped",
                                                       "consecutive_skipped", "loss_sum", "loss_count",
                                                       "best_value", "best_step", "last_grad_norm")},
            "history": json.dumps(pos.history),
            "optimizer": None if is_sharded(self.t.model) else self.t.optimizer.state_dict(),  # sharded/ has it
            "scheduler": self.t.schedule.scheduler.state_dict() if self.t.schedule else None,
            "scaler": self.t.step_runner.scaler.state_dict() if self.t.step_runner.scaler else None,
            "early_stopping": self.t.early_stopping.state_dict() if self.t.early_stopping else None,
            "rng": rng_per_rank[0],
            "rng_per_rank": rng_per_rank,
            "schedule_total_steps": self.t._total_steps,
            "data": {"seed": self.t.seed, "train_samples": _len_or_minus1(self.t.train_data),
                     "batches_per_epoch": self.t.train_loader.batches_per_epoch(), "world_size": self.t.dist.world_size,
                     "batch_size": self.t.batch_size},
            "config": json.dumps(self.t.config, default=str),
            "versions": {"torchwise": _version(), "torch": str(torch.__version__)},
        }

    def save_checkpoint(self) -> None:
        if self.t.out_dir is None:
            return
        rng_per_rank = gather_objects(capture_rng_state(), self.t.dist)  # every rank's dropout stream
        root = self.t.out_dir / "checkpoints"
        path = root / ckpt.checkpoint_name(self.t.pos.step)
        tmp = None
        if is_sharded(self.t.model):  # every rank writes its own shards first
            tmp = ckpt.begin_checkpoint(root, self.t.pos.step) if self.t.dist.is_main else ckpt.pending_path(root, self.t.pos.step)
            barrier(self.t.dist)
            save_sharded(tmp / "sharded", self.t.model, self.t.optimizer)
        weights = self.full_weights()
        if self.t.dist.is_main:
            ckpt.save_checkpoint(root, self.t.pos.step, weights, self.state(rng_per_rank), tmp)
            ckpt.prune(root, self.t.keep_last)
        barrier(self.t.dist)  # no rank runs ahead of a checkpoint that is not on disk yet
        self.t.events.emit("checkpoint_saved", trainer=self, step=self.t.pos.step, path=path)

    def load_checkpoint(self, path: Path) -> None:
        weights, state = ckpt.load_checkpoint(path, self.t.device)
        if not ckpt.has_shards(path):
            apply_state_dict(self.t.model, weights, source=str(path))
        data = state["data"]
        same_layout = data.get("world_size", 1) == self.t.dist.world_size and data.get("batch_size") in (None, self.t.batch_size)
        if data["train_samples"] != _len_or_minus1(self.t.train_data) or (
                same_layout and data["batches_per_epoch"] != self.t.train_loader.batches_per_epoch()):
            raise TorchwiseError(
                "The training data differ from the data of the checkpoint being resumed.",
                values={"checkpoint": str(path), "samples then/now": f"{data['train_samples']} / "
                        f"{_len_or_minus1(self.t.train_data)}", "batches per epoch then/now":
                        f"{data['batches_per_epoch']} / {self.t.train_loader.batches_per_epoch()}"},
                fix="Resume with the same data set and batch size, or start a new run (another out_dir).")
        if ckpt.has_shards(path):  # model and optimizer, resharded to this run's number of ranks
            load_sharded(path / "sharded", self.t.model, self.t.optimizer)
        else:
            self.t.optimizer.load_state_dict(state["optimizer"])
        if self.t.schedule is not None and state["scheduler"] is not None:
            saved_total = state.get("schedule_total_steps", self.t._total_steps)
            # one-cycle and cosine are laid out over the whole run: a longer run cannot continue them
            require(not isinstance(self.t.scheduler_spec, str) or self.t.schedule.interval != "step"
                     or saved_total == self.t._total_steps,
                     "The run's length changed, and its learning-rate schedule was laid out for the old length.",
                     {"scheduler": self.t.scheduler_spec, "total steps then": saved_total, "total steps now": self.t._total_steps},
                     "Resume with the original max_epochs/max_steps, or start a new run initialised from this run's "
                     "weights (torchwise.load_model / --weights RUN/final/model.safetensors).")
            self.t.schedule.scheduler.load_state_dict(state["scheduler"])
        if self.t.step_runner.scaler is not None and state["scaler"] is not None:
            self.t.step_runner.scaler.load_state_dict(state["scaler"])
        if self.t.early_stopping is not None and state["early_stopping"] is not None:
            self.t.early_stopping.load_state_dict(state["early_stopping"])
        for key, value in state["position"].items():
            setattr(self.t.pos, key, value)
        self.t.pos.history = json.loads(state["history"])
        self.load_best()
        if not same_layout:
            self.relayout_position(data)
            seed_everything(self.t.seed + self.t.dist.rank + 7919 * self.t.pos.step)
            return
        restore_rng_state(state["rng_per_rank"][self.t.dist.rank])  # last: nothing after this may draw random numbers

    def relayout_position(self, data: dict[str, Any]) -> None:
        """Resume on another number of ranks (or batch size): same samples-seen position, nearest batch."""
        old_per_batch = data.get("batch_size", self.t.batch_size) * data.get("world_size", 1)
        samples_seen = self.t.pos.batch_in_epoch * old_per_batch
        self.t.pos.batch_in_epoch = min(samples_seen // (self.t.batch_size * self.t.dist.world_size),
                                      self.t.train_loader.batches_per_epoch())
        if self.t.dist.is_main:
            print(f"torchwise: resuming a run of {data.get('world_size', 1)} process(es) on {self.t.dist.world_size}: "
                  f"continuing at sample {samples_seen} of epoch {self.t.pos.epoch} (batch {self.t.pos.batch_in_epoch}); "
                  "random streams are re-seeded, so this run is not bit-identical to an uninterrupted one.",
                  file=sys.stderr)

    def latest_checkpoint_name(self) -> str:
        if self.t.out_dir is None:
            return "none (no out_dir)"
        found = ckpt.list_checkpoints(self.t.out_dir / "checkpoints")
        return str(found[-1]) if found else "none yet"


    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (gathered to rank 0 when sharded; call on all ranks)."""
        return full_state_dict(self.t.model) if is_sharded(self.t.model) else model_state_dict(self.t.model)

    def keep_best(self) -> None:
        if self.t.early_stopping is not None and self.t.early_stopping.restore_best:
            # this rank's own copy (its shards, under FSDP), restored with load_state_dict at the end
            sharded = is_sharded(self.t.model)
            self.best_state = {k: v.detach().clone() if sharded else v.detach().to("cpu", copy=True)
                                for k, v in self.t.model.state_dict().items()}
        if self.t.out_dir is not None:
            weights = self.full_weights()
            if self.t.dist.is_main:
                save_state_dict(weights, self.t.out_dir / "best" / "model.safetensors",
                                {"step": self.t.pos.step, "monitor": self.t.monitor, "value": self.t.pos.best_value})

    def load_best(self) -> None:
        """After resume: the in-memory copy of the best weights comes back from best/ if it matches."""
        if self.t.early_stopping is None or not self.t.early_stopping.restore_best or self.t.out_dir is None:
            return
        path = self.t.out_dir / "best" / "model.safetensors"
        if not path.is_file():
            return
        from safetensors import safe_open

        with safe_open(str(path), "pt") as fh:
            step = int((fh.metadata() or {}).get("step", -1))
        if step == self.t.pos.best_step and not is_sharded(self.t.model):
            from safetensors.torch import load_file

            self.best_state = load_file(str(path))

    def finish(self) -> Path | None:
        if self.t.early_stopping is not None and self.t.early_stopping.restore_best and self.best_state is not None:
            self.t.model.load_state_dict(self.best_state)
        if self.t.out_dir is None:
            return None
        # A newest checkpoint that cannot be read (cut short) does not count: the finished run gets a good one
        found = [p for p in ckpt.list_checkpoints(self.t.out_dir / "checkpoints") if ckpt.unreadable_reason(p) is None]
        last = int(found[-1].name[len(ckpt.PREFIX):]) if found else -1
        if sum_across([float(last != self.t.pos.step)], self.t.dist, self.t.device)[0]:
            self.save_checkpoint()  # so that resume=True on a finished run finds it finished
        weights = self.full_weights()
        if not self.t.dist.is_main:
            return self.t.out_dir / "final" / "model.safetensors"
        meta = dict(self.t.metadata)
        meta.setdefault("versions", {"torchwise": _version(), "torch": str(torch.__version__)})
        meta.setdefault("best", {"monitor": self.t.monitor, "value": None if math.isnan(self.t.pos.best_value)
                                 else self.t.pos.best_value, "step": self.t.pos.best_step})
        final = self.t.out_dir / "final"
        path = save_state_dict(weights, final / "model.safetensors", {"torchwise": _version()})
        with ckpt.atomic_write_path(final / "meta.json") as tmp:
            tmp.write_text(json.dumps(meta, indent=2, default=str))
        return path


def require(ok: bool, what: str, values: dict[str, Any], fix: str) -> None:
    if not ok:
        raise ConfigError(what, values=values, fix=fix)


def _len_or_minus1(data: Any) -> int:
    dataset = getattr(data, "dataset", data)
    try:
        return len(dataset)
    except TypeError:
        return -1


def _version() -> str:
    from torchwise import __version__

    return __version__
