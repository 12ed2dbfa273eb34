"""What a run keeps on disk: checkpoints (written, and read back on resume), the best weights, the
final model and the resolved settings (trainer_config.json).

A checkpoint is the model's weights plus the state of every registered component: anything with
state_dict()/load_state_dict() (the optimizer, the schedule, the loss scaler, the loop's position,
early stopping, and each callback of the user's that has the two methods: an EMA of the weights, a
counter). `RunFiles` decides when a save is due (every `checkpoint_every` steps, else at each epoch's
end), writes it atomically (checkpoint.py) and restores it in the order registered, the random
streams last (nothing after them may draw a random number).

It sees the Trainer only through the public attributes of `RunView` below.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, ContextManager, Protocol

import torch

from torchwise.errors import TorchwiseError
from torchwise import files
from torchwise.train.state import checkpoint as ckpt
from torchwise.train.recipes.ema import EMA
from torchwise.train.distributed.process_group import barrier, decide_on_main, gather_objects, sum_across
from torchwise.train.state import run_lock
from torchwise.train.state.reproducibility import capture_rng_state, restore_rng_state, seed_everything
from torchwise.train.distributed.sharding import full_state_dict, is_sharded, load_sharded, save_sharded
from torchwise.weights import apply_state_dict, model_state_dict, save_state_dict

STATE_FORMAT = 2  # 2: components by name, callbacks under "callbacks"; format 1 checkpoints still load
CONFIG_FILE = "trainer_config.json"


class Stateful(Protocol):
    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> None: ...


class WeightAveraging(Protocol):
    """The EMA of the weights as the run's files see it (train/recipes/trainer_recipes.py's TrainingRecipes)."""
    ema: EMA | None        # None when ema_decay is off

    def ema_weights(self) -> ContextManager[None]: ...  # the EMA's weights in the model (nothing when it is off)


class RunView(Protocol):
    """What RunFiles reads of the Trainer (all public)."""
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    config: Any            # the resolved TrainerConfig
    dist: Any
    device: torch.device
    pos: Any               # the loop's position (a Stateful)
    best: Any              # the BestMetric
    events: Any
    train_data: Any
    train_loader: Any
    total_steps: int
    schedule: Any
    recipes: WeightAveraging


def has_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class RunFiles:
    def __init__(self, run: RunView):
        self.run = run
        self.best_state: dict[str, torch.Tensor] | None = None  # early stopping's restore_best, in memory
        self.components: dict[str, Stateful] = {}
        self.callbacks: dict[str, Stateful] = {}
        self.claim: run_lock.Claim | None = None  # out_dir's lock while fit() runs (rank 0)

    # ------------------------------------------------------------------ settings
    @property
    def out_dir(self) -> Path | None:
        return self.run.config.out_dir

    @property
    def _restore_best(self) -> bool:
        es = self.run.config.early_stopping
        return es is not None and es.restore_best

    def register(self, name: str, component: Stateful | None) -> None:
        """Save `component` in every checkpoint under `name`, restore it on resume (None: not in this run)."""
        if component is not None:
            self.components[name] = component

    def register_callback(self, callback: Any) -> str:
        """A callback of the user's with state: saved under "callbacks/<its name>" (state_key, else its
        class name, numbered when there are several)."""
        base = getattr(callback, "state_key", None) or type(callback).__name__
        name, n = base, 1
        while name in self.callbacks:
            n += 1
            name = f"{base}-{n}"
        self.callbacks[name] = callback
        return name

    def claim_out_dir(self) -> None:
        """One writer per run folder (run_lock.py): rank 0 takes out_dir's lock for this fit() before anything is
        written there (kept when its caller, `torchwise train`, holds it already); a refusal ends every rank."""
        if self.out_dir is not None and self.claim is None:
            self.claim = decide_on_main(lambda: run_lock.claim(self.out_dir), self.run.dist)

    def release_out_dir(self) -> None:
        """At the end of fit(), however it ends."""
        if self.claim is not None:
            self.claim.release()
            self.claim = None

    def due(self, step: int, *, epoch_end: bool) -> bool:
        """A checkpoint is due every checkpoint_every steps, or at each epoch's end without it."""
        every = self.run.config.checkpoint_every
        if self.out_dir is None:
            return False
        return (not epoch_end and every is not None and step % every == 0) or (epoch_end and every is None)

    def save_if_due(self, *, epoch_end: bool = False) -> bool:
        if not self.due(self.run.pos.step, epoch_end=epoch_end):
            return False
        self.save_checkpoint()
        return True

    def write_config(self) -> None:
        """The resolved settings (and the launcher's config) in the run directory, as in every checkpoint."""
        if self.out_dir is not None and self.run.dist.is_main:
            files.write_text(self.out_dir / CONFIG_FILE, json.dumps(self.config_record(), indent=2, default=str),
                             root=self.out_dir)

    def config_record(self) -> dict[str, Any]:
        return {"trainer": self.run.config.to_dict(), "run": self.run.config.run_config or None}

    # ------------------------------------------------------------------ checkpoints
    def state(self, rng_per_rank: list[dict[str, Any]]) -> dict[str, Any]:
        run = self.run
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "rng": rng_per_rank[0],
            "rng_per_rank": rng_per_rank,
            **self.schedule_layout(),
            "data": {"seed": run.config.seed, "train_samples": _len_or_minus1(run.train_data),
                     "batches_per_epoch": run.train_loader.batches_per_epoch(), "world_size": run.dist.world_size,
                     "batch_size": run.config.batch_size},
            "config": self.config_record(),
            "versions": {"torchwise": _version(), "torch": str(torch.__version__)},
            "optimizer": None,  # sharded: in sharded/
            "scheduler": None, "scaler": None, "early_stopping": None,
        }
        for name, component in self.components.items():
            state[name] = component.state_dict()
        state["callbacks"] = {name: cb.state_dict() for name, cb in self.callbacks.items()}
        return state

    def save_checkpoint(self) -> None:
        run = self.run
        if self.out_dir is None:
            return
        rng_per_rank = gather_objects(capture_rng_state(), run.dist)  # every rank's dropout stream
        root = self.out_dir / "checkpoints"
        path = root / ckpt.checkpoint_name(run.pos.step)
        tmp = None
        if run.dist.is_main:  # checkpoints/ is a folder of the run, never a link out of it
            files.make_folder(root, self.out_dir)
        if is_sharded(run.model):  # every rank writes its own shards first
            tmp = ckpt.begin_checkpoint(root, run.pos.step) if run.dist.is_main else ckpt.pending_path(root, run.pos.step)
            barrier(run.dist)
            save_sharded(tmp / "sharded", run.model, run.optimizer)
        weights = self.full_weights()
        if run.dist.is_main:
            ckpt.save_checkpoint(root, run.pos.step, weights, self.state(rng_per_rank), tmp)
            ckpt.prune(root, run.config.keep_last)
        barrier(run.dist)  # no rank runs ahead of a checkpoint that is not on disk yet
        run.events.emit("checkpoint_saved", trainer=run, step=run.pos.step, path=path)

    def load_checkpoint(self, path: Path) -> None:
        run = self.run
        weights, state = ckpt.load_checkpoint(path, run.device)
        if not ckpt.has_shards(path):
            apply_state_dict(run.model, weights, source=str(path))
        data = state["data"]
        same_layout = data.get("world_size", 1) == run.dist.world_size and data.get("batch_size") in (
            None, run.config.batch_size)
        self._check_same_data(path, data, same_layout)
        if ckpt.has_shards(path):  # model and optimizer, resharded to this run's number of ranks
            load_sharded(path / "sharded", run.model, run.optimizer)
        layout = self._resumed_schedule(state) if state.get("scheduler") is not None else "as_built"
        for name, component in self.components.items():
            if state.get(name) is not None and not (name == "scheduler" and layout == "restart"):
                component.load_state_dict(state[name])
        if layout == "restart":  # from the restored position, over the optimizer as restored
            run.schedule.restart(run.optimizer, run.pos.step, run.pos.stage_start_step + run.total_steps - run.pos.step)
        if layout == "keep_end":  # a schedule already at its end holds its end value from the first step on
            run.schedule.hold_end()
        self._load_callbacks(path, state.get("callbacks") or {})
        self.load_best()
        if not same_layout:
            self.relayout_position(data)
            seed_everything(run.config.seed + run.dist.rank + 7919 * run.pos.step)
            return
        restore_rng_state(state["rng_per_rank"][run.dist.rank])  # last: nothing after this may draw random numbers

    def _check_same_data(self, path: Path, data: dict[str, Any], same_layout: bool) -> None:
        run = self.run
        if data["train_samples"] != _len_or_minus1(run.train_data) or (
                same_layout and data["batches_per_epoch"] != run.train_loader.batches_per_epoch()):
            raise TorchwiseError(
                "The training data differ from the data of the checkpoint being resumed.",
                values={"checkpoint": str(path), "samples then/now": f"{data['train_samples']} / "
                        f"{_len_or_minus1(run.train_data)}", "batches per epoch then/now":
                        f"{data['batches_per_epoch']} / {run.train_loader.batches_per_epoch()}"},
                fix="Resume with the same data set and batch size, or start a new run (another out_dir).")

    def schedule_layout(self) -> dict[str, Any]:
        """Where the run's schedule is laid out (its first optimizer step and length), for every checkpoint."""
        run, schedule = self.run, self.run.schedule
        if schedule is None or not schedule.laid_out:
            return {"schedule_total_steps": run.total_steps}
        start = run.pos.stage_start_step if schedule.start_step is None else schedule.start_step
        return {"schedule_total_steps": schedule.total_steps, "schedule_start_step": start,
                "schedule_keeps_end": schedule.keeps_end}

    def _resumed_schedule(self, state: dict[str, Any]) -> str:
        """A onecycle/cosine schedule laid out for another length than this run's: laid out as the checkpoint's
        was, restarted, held at its end, or refused with the choices (recipes/schedule.py)."""
        from torchwise.train.recipes.schedule import extend_error, resumed_layout

        run, schedule = self.run, self.run.schedule
        if schedule is None or not schedule.laid_out:
            return "as_built"  # a step, plateau or user's schedule goes on as it is
        position = state.get("position") or {}
        stage_start, at_step = int(position.get("stage_start_step", 0)), int(position.get("step", 0))
        saved = (int(state.get("schedule_start_step", stage_start)),
                 int(state.get("schedule_total_steps", run.total_steps)), bool(state.get("schedule_keeps_end")))
        how, start, total = resumed_layout(saved, (stage_start, run.total_steps), at_step, run.config.extend_schedule)
        if how == "refuse":
            raise extend_error(run.config.scheduler, start + total, stage_start + run.total_steps, at_step,
                               schedule.base_lrs[0], choice=lambda name: f"extend_schedule={name!r}")
        if how in ("as_saved", "keep_end"):
            schedule.relayout(start, total, keeps_end=how == "keep_end")
        elif how == "as_built" and schedule.start_step is not None:  # a newer checkpoint, laid out otherwise,
            schedule.relayout(stage_start, run.total_steps, keeps_end=False)  # failed to load after its layout
        if how in ("restart", "keep_end") and run.dist.is_main:
            print(f"torchwise: the run now ends at step {stage_start + run.total_steps}, its {run.config.scheduler} "
                  f"schedule was laid out over steps {saved[0]}-{saved[0] + saved[1]}: " + (
                      f"it restarts at step {at_step} over the steps left (extend_schedule='restart')"
                      if how == "restart" else "it ends as planned and its last learning rate holds after "
                                               "(extend_schedule='keep_end')"), file=sys.stderr)
        return how

    def _load_callbacks(self, path: Path, saved: dict[str, Any]) -> None:
        for name, callback in self.callbacks.items():
            if name in saved:
                callback.load_state_dict(saved[name])
            elif self.run.dist.is_main:
                print(f"torchwise: the checkpoint {path.name} holds no state of callback {name!r}: it starts "
                      "afresh", file=sys.stderr)

    def relayout_position(self, data: dict[str, Any]) -> None:
        """Resume on another number of ranks (or batch size): same samples-seen position, nearest batch."""
        run, pos = self.run, self.run.pos
        old_per_batch = data.get("batch_size", run.config.batch_size) * data.get("world_size", 1)
        samples_seen = pos.batch_in_epoch * old_per_batch
        batches = run.train_loader.batches_per_epoch()  # None: a stream, whose length is not known
        pos.batch_in_epoch = samples_seen // (run.config.batch_size * run.dist.world_size)
        if batches is not None:
            pos.batch_in_epoch = min(pos.batch_in_epoch, batches)
        if run.dist.is_main:
            print(f"torchwise: resuming a run of {data.get('world_size', 1)} process(es) on {run.dist.world_size}: "
                  f"continuing at sample {samples_seen} of epoch {pos.epoch} (batch {pos.batch_in_epoch}); "
                  "random streams are re-seeded, so this run is not bit-identical to an uninterrupted one.",
                  file=sys.stderr)

    def latest_checkpoint_name(self) -> str:
        if self.out_dir is None:
            return "none (no out_dir)"
        found = ckpt.list_checkpoints(self.out_dir / "checkpoints")
        return str(found[-1]) if found else "none yet"

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (gathered to rank 0 when sharded; call on all ranks)."""
        model = self.run.model
        return full_state_dict(model) if is_sharded(model) else model_state_dict(model)

    # ------------------------------------------------------------------ best and final weights
    def keep_best(self) -> None:
        run = self.run
        if self._restore_best:
            # this rank's own copy (its shards, under FSDP), restored with load_state_dict at the end
            sharded = is_sharded(run.model)
            self.best_state = {k: v.detach().clone() if sharded else v.detach().to("cpu", copy=True)
                               for k, v in run.model.state_dict().items()}
        if self.out_dir is not None:
            weights = self.full_weights()
            if run.dist.is_main:
                save_state_dict(weights, self.out_dir / "best" / "model.safetensors",
                                {"step": run.best.step, "monitor": run.best.monitor.name, "value": run.best.value},
                                root=self.out_dir)

    def load_best(self) -> None:
        """After resume: the in-memory copy of the best weights comes back from best/ if it matches."""
        if not self._restore_best or self.out_dir is None:
            return
        path = self.out_dir / "best" / "model.safetensors"
        if not path.is_file():
            return
        from safetensors import safe_open

        from torchwise.file_names import utf8_reachable

        with utf8_reachable(path) as name, safe_open(name, "pt") as fh:  # (Rust takes UTF-8 names only)
            step = int((fh.metadata() or {}).get("step", -1))
        if step == self.run.best.step and not is_sharded(self.run.model):
            from safetensors.torch import load_file

            with utf8_reachable(path) as name:
                self.best_state = load_file(name)

    def finish(self) -> Path | None:
        run = self.run
        if self._restore_best and self.best_state is not None:
            run.model.load_state_dict(self.best_state)
        if self.out_dir is None:
            return None
        # A newest checkpoint that cannot be read (cut short) does not count: the finished run gets a good one
        found = [p for p in ckpt.list_checkpoints(self.out_dir / "checkpoints") if ckpt.unreadable_reason(p) is None]
        last = int(found[-1].name[len(ckpt.PREFIX):]) if found else -1
        if sum_across([float(last != run.pos.step)], run.dist, run.device)[0]:
            self.save_checkpoint()  # so that resume=True on a finished run finds it finished
        with run.recipes.ema_weights():  # with an EMA of the weights on, the final (and exported) weights are the average
            weights = self.full_weights()
        if run.recipes.ema is not None and not self._restore_best:  # the model in memory is what final/ holds
            run.recipes.ema.copy_to(run.model)
        if not run.dist.is_main:
            return self.out_dir / "final" / "model.safetensors"
        meta = dict(run.config.metadata)
        meta.setdefault("versions", {"torchwise": _version(), "torch": str(torch.__version__)})
        meta.setdefault("best", {"monitor": run.best.monitor.name, "value": None if math.isnan(run.best.value)
                                 else run.best.value, "step": run.best.step})
        final = self.out_dir / "final"
        path = save_state_dict(weights, final / "model.safetensors", {"torchwise": _version()}, root=self.out_dir)
        files.write_text(final / "meta.json", json.dumps(meta, indent=2, default=str), root=self.out_dir)
        return path


def _len_or_minus1(data: Any) -> int:
    dataset = getattr(data, "dataset", data)
    try:
        return len(dataset)
    except TypeError:
        return -1


def _version() -> str:
    from torchwise.version import __version__

    return __version__
