"""Hyperparameter search with Optuna: `torchwise tune` and `torchwise.tune(...)`.

    import torchwise
    result = torchwise.tune("run.yaml", "space.yaml", trials=20, out="runs/search")

Modules: space.py (search spaces, validated against torchwise.config), study.py (storage, trial
accounting, crash recovery), worker.py (one process running trials), search.py (the
coordinator: `tune`), results.py (table, CSV, best.yaml, plots, the TuneResult). Nothing here
imports optuna or torch at import time.
"""
from __future__ import annotations

import sys
import types
from typing import Any


def tune(*args: Any, **kwargs: Any):
    """See torchwise.tune.search.tune."""
    from torchwise.tune.search import tune as _tune

    return _tune(*args, **kwargs)


class _CallableModule(types.ModuleType):
    # `torchwise.tune` is both this package and the function users call. Whichever of the two the
    # attribute `torchwise.tune` ends up holding (it depends on import order), calling it works.
    def __call__(self, *args: Any, **kwargs: Any):
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
