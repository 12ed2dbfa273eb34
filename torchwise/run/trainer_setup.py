"""The Trainer a run configuration describes: its optimizer, its settings, the Trainer itself.

`torchwise train` (train_run.py) and `torchwise lr-find` build their Trainer here, so a sweep runs
exactly the training set-up the run would.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# The CLI's train.* keys that are not Trainer settings: they build the optimizer, the loss and the process.
CLI_ONLY = frozenset({"lr", "weight_decay", "optimizer", "class_weights", "threads"})


def optimizer_factory(train_cfg):
    """make(params, fused=False) -> the optimizer train.optimizer names, over the trainable parameters."""
    import torch

    def make(params, fused: bool = False):  # `fused`: the Trainer's fast plan decides (train.fast)
        params = list(params)
        if params and isinstance(params[0], dict):  # head/backbone groups (train.backbone_lr_scale)
            trainable = [dict(g, params=[p for p in g["params"] if p.requires_grad]) for g in params]
        else:
            trainable = [p for p in params if p.requires_grad]  # a frozen backbone is not optimized
        if train_cfg.optimizer == "sgd":
            return torch.optim.SGD(trainable, lr=train_cfg.lr, momentum=0.9, nesterov=True,
                                   weight_decay=train_cfg.weight_decay, fused=fused or None)
        return torch.optim.AdamW(trainable, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, fused=fused or None)

    return make


def trainer_settings(config, run_dir: Path | None = None) -> dict[str, Any]:
    """The Trainer's settings from a RunConfig: every train.* key is the Trainer setting of the same name
    (or in CLI_ONLY); the data loader's workers, the progress bars and the run directory come from the
    data and output sections; the whole RunConfig is recorded with the run."""
    from torchwise.train.settings import FLAT

    t = config.train
    shared = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name in FLAT}
    return {**shared, "num_workers": config.data.num_workers, "progress": config.output.progress,
            "out_dir": run_dir if run_dir is not None else config.output.dir, "run_config": config.to_dict()}


def make_trainer(config, task, model, run_dir: Path | None, meta: dict[str, Any]):
    """The Trainer of `model` on a prepared task (torchwise.data.tasks.prepare_task), set up as `config` says."""
    from torchwise.train.trainer import Trainer

    counts = task.summary.get("train_counts") if task.problem == "classification" else None
    if counts and task.class_names:  # the checker's label-imbalance then quotes the data table's counts
        meta = {**meta, "train_class_counts": [int(counts.get(name, 0)) for name in task.class_names]}
    return Trainer(model, optimizer=optimizer_factory(config.train), loss=task.loss(), train_data=task.train,
                   val_data=task.val, task=task.problem, metadata=meta, batch_augment=task.batch_augment,
                   batch_eval=task.batch_eval, **trainer_settings(config, run_dir))
