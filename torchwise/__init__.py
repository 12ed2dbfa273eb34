"""torchwise: the practical PyTorch training chain, done right.

`import torchwise` stays light: the names below are resolved on first use, so the
command line and the checker do not pay for modules they do not touch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from torchwise.version import __version__

# public name -> module that defines it
_LAZY = {
    "Trainer": "torchwise.train.trainer",
    "FitResult": "torchwise.train.trainer",
    "EarlyStopping": "torchwise.train.evaluate.early_stop",
    "TrainerConfig": "torchwise.train.settings",
    "Monitor": "torchwise.train.evaluate.monitor",
    "Event": "torchwise.train.events",
    "save_model": "torchwise.weights",
    "load_model": "torchwise.weights",
    "load_state_dict": "torchwise.weights",
    "seed_everything": "torchwise.train.state.reproducibility",
    "TorchwiseError": "torchwise.errors",
    "Interrupted": "torchwise.errors",
    "watch": "torchwise.diagnose.watch",
    "summary": "torchwise.toolbox.summary",
    "memory_estimate": "torchwise.toolbox.memory",
    "find_batch_size": "torchwise.toolbox.batch_size",
    "enable_checkpointing": "torchwise.train.speed.activation_checkpointing",
    "lr_find": "torchwise.train.recipes.lr_find",
    "tune": "torchwise.tune",
    "tune_loader": "torchwise.data.tune_loader",
    "class_weights": "torchwise.data.class_weights",
    "param_groups": "torchwise.models",
    "head_parameters": "torchwise.models",
    "backbone_parameters": "torchwise.models",
    "EMA": "torchwise.train.recipes.ema",
    "BatchMix": "torchwise.train.recipes.mixing",
    "Logger": "torchwise.train.loggers",
}

__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from torchwise.errors import TorchwiseError
    from torchwise.train.evaluate.monitor import Monitor
    from torchwise.train.settings import TrainerConfig
    from torchwise.train.trainer import FitResult, Trainer
    from torchwise.weights import load_model, save_model


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchwise' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
