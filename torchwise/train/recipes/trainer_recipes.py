"""The training recipes the Trainer offers as settings, wired in one place: `TrainingRecipes`, a part
the Trainer owns (trainer.recipes), which sees the Trainer through `RecipesView`:

- ema_decay: an exponential moving average of the weights (train/recipes/ema.py), updated after every optimizer
  step that happened, saved in every checkpoint, and the weights that are evaluated, kept as best and
  written as final (so exported) while it is on;
- mixup / cutmix: training batches mixed on the device (train/recipes/mixing.py), seeded per (seed, rank,
  epoch, batch) so that a resumed run mixes the same way; never in validation;
- gradient_checkpointing: activations recomputed in backward (a Hugging Face model's own switch when
  it has one, else train/speed/activation_checkpointing.py);
- batch_augment: the user's function on each training batch on the device, with a generator seeded per
  (seed, rank, epoch, batch);
- backbone_lr_scale: the head at the optimizer's learning rate, the rest at that rate times the scale
  (0 freezes the backbone), from torchwise.models' one rule for what the head is.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Protocol

import torch
from torch import nn

from torchwise.errors import ConfigError
from torchwise.train.distributed.process_group import DistEnv
from torchwise.train.input_checks import apply_batch_fn
from torchwise.train.recipes.ema import EMA
from torchwise.train.recipes.mixing import BatchMix
from torchwise.train.settings import TrainerConfig
from torchwise.train.speed.activation_checkpointing import CheckpointHandle, enable_checkpointing
from torchwise.train.state.reproducibility import derive_seed


class RecipesView(Protocol):
    """What TrainingRecipes reads of the Trainer (all public)."""
    config: TrainerConfig
    model: nn.Module
    dist: DistEnv


class TrainingRecipes:
    """The recipes a run has on: the EMA of the weights, the batch mixing and its generator, the batch
    augmentation's generator, activation checkpointing. Made by the Trainer; set up by the run's set-up."""

    def __init__(self, run: RecipesView):
        self.run = run
        self.ema: EMA | None = None
        self.mix: BatchMix | None = None
        self.mix_gen: torch.Generator | None = None
        self.augment_gen: torch.Generator | None = None  # batch_augment's, seeded per batch
        self.activation_checkpointing: CheckpointHandle | None = None  # when on (.remove() undoes it)

    def setup(self, device: torch.device) -> None:
        """After the model is on its device, before it is wrapped for DDP and before the optimizer exists."""
        cfg = self.run.config
        self.ema = self.mix = None
        self.augment_gen = torch.Generator(device=device)
        if cfg.gradient_checkpointing:
            self._checkpoint_activations()
        if cfg.ema_decay is not None:
            if cfg.strategy == "fsdp":
                raise ConfigError("ema_decay does not work with strategy='fsdp' (the average would need every "
                                  "shard's weights).", values={"ema_decay": cfg.ema_decay, "strategy": "fsdp"},
                                  fix="Use strategy='ddp' (or 'auto') with ema_decay, or drop ema_decay.")
            self.ema = EMA(self.run.model, cfg.ema_decay)
        if cfg.mixup or cfg.cutmix:
            self.mix = BatchMix(cfg.mixup, cfg.cutmix)
            self.mix_gen = torch.Generator(device=device)

    def _checkpoint_activations(self) -> None:
        model = self.run.model
        if callable(getattr(model, "gradient_checkpointing_enable", None)):  # a Hugging Face model's own switch
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return
        self.activation_checkpointing = enable_checkpointing(model)

    @contextlib.contextmanager
    def ema_weights(self) -> Iterator[None]:
        """The EMA's weights in the model for the block (evaluation, best and final weights), when it is on."""
        if self.ema is None:
            yield
            return
        with self.ema.applied(self.run.model):
            yield

    def after_optimizer_step(self) -> None:
        if self.ema is not None:
            self.ema.update(self.run.model)

    def augment_batch(self, augment: Callable[..., torch.Tensor], inputs: tuple[Any, ...], epoch: int,
                      index: int) -> tuple[Any, ...]:
        """batch_augment on the first input, seeded from (seed, rank, epoch, batch): a resumed run draws the
        same crops and flips."""
        run = self.run
        self.augment_gen.manual_seed(derive_seed(run.config.seed, run.dist.rank, epoch, index, 0xA6))
        return (apply_batch_fn(augment, inputs[0], "batch_augment", self.augment_gen), *inputs[1:])

    def mix_batch(self, inputs: tuple[Any, ...], target: Any, epoch: int, index: int) -> tuple[tuple[Any, ...], Any]:
        """MixUp / CutMix on a training batch (never in validation), seeded per (seed, rank, epoch, batch)."""
        if self.mix is None:
            return inputs, target
        self.mix_gen.manual_seed(derive_seed(self.run.config.seed, self.run.dist.rank, epoch, index, 0x3A1))
        mixed, target = self.mix(inputs[0], target, self.mix_gen)
        return (mixed, *inputs[1:]), target

    def optimizer_params(self, lr: float) -> Iterable[nn.Parameter] | list[dict[str, Any]]:
        """What the optimizer is built over: the model's parameters, or the head/backbone groups."""
        scale = self.run.config.backbone_lr_scale
        if scale == 1:
            return self.run.model.parameters()
        from torchwise.models import param_groups

        return param_groups(self.run.model, lr, scale)
