"""The training recipes the Trainer offers as settings, wired in one place (a part of the Trainer):

- ema_decay: an exponential moving average of the weights (train/recipes/ema.py), updated after every optimizer
  step that happened, saved in every checkpoint, and the weights that are evaluated, kept as best and
  written as final (so exported) while it is on;
- mixup / cutmix: training batches mixed on the device (train/recipes/mixing.py), seeded per (seed, rank,
  epoch, batch) so that a resumed run mixes the same way; never in validation;
- gradient_checkpointing: activations recomputed in backward (a Hugging Face model's own switch when
  it has one, else train/speed/activation_checkpointing.py);
- backbone_lr_scale: the head at the optimizer's learning rate, the rest at that rate times the scale
  (0 freezes the backbone), from torchwise.models' one rule for what the head is.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from torchwise.errors import ConfigError
from torchwise.train.state.reproducibility import derive_seed


class TrainerRecipes:
    def setup_recipes(self) -> None:
        """After the model is on its device, before it is wrapped for DDP and before the optimizer exists."""
        cfg = self.config
        self.ema = self.mix = None
        if cfg.gradient_checkpointing:
            self._checkpoint_activations()
        if cfg.ema_decay is not None:
            if cfg.strategy == "fsdp":
                raise ConfigError("ema_decay does not work with strategy='fsdp' (the average would need every "
                                  "shard's weights).", values={"ema_decay": cfg.ema_decay, "strategy": "fsdp"},
                                  fix="Use strategy='ddp' (or 'auto') with ema_decay, or drop ema_decay.")
            from torchwise.train.recipes.ema import EMA

            self.ema = EMA(self.model, cfg.ema_decay)
        if cfg.mixup or cfg.cutmix:
            from torchwise.train.recipes.mixing import BatchMix

            self.mix = BatchMix(cfg.mixup, cfg.cutmix)
            self.mix_gen = torch.Generator(device=self.device)

    def _checkpoint_activations(self) -> None:
        model = self.model
        if callable(getattr(model, "gradient_checkpointing_enable", None)):  # a Hugging Face model's own switch
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return
        from torchwise.train.speed.activation_checkpointing import enable_checkpointing

        self.activation_checkpointing = enable_checkpointing(model)

    @contextlib.contextmanager
    def ema_weights(self) -> Iterator[None]:
        """The EMA's weights in the model for the block (evaluation, best and final weights), when it is on."""
        if getattr(self, "ema", None) is None:
            yield
            return
        with self.ema.applied(self.model):
            yield

    def after_optimizer_step(self) -> None:
        if self.ema is not None:
            self.ema.update(self.model)

    def mix_batch(self, inputs: tuple[Any, ...], target: Any, epoch: int, index: int) -> tuple[tuple[Any, ...], Any]:
        if self.mix is None:
            return inputs, target
        self.mix_gen.manual_seed(derive_seed(self.config.seed, self.dist.rank, epoch, index, 0x3A1))
        mixed, target = self.mix(inputs[0], target, self.mix_gen)
        return (mixed, *inputs[1:]), target

    def optimizer_params(self, lr: float) -> Any:
        """What the optimizer is built over: the model's parameters, or the head/backbone groups."""
        scale = self.config.backbone_lr_scale
        if scale == 1:
            return self.model.parameters()
        from torchwise.models import param_groups

        return param_groups(self.model, lr, scale)
