"""The Watcher's parts as the other parts see them, and the records they share: the layer below the parts.

Each part (health.py, deep_steps.py, loader_passes.py, model_inputs.py, backward_hooks.py, model_hooks.py,
step_hooks.py) sees the Watcher through a Protocol in its own module; where that Protocol names another
part, it names the surface below (what the other parts use of it), so that no part module imports another
and the Watcher (watch.py), which creates them all, sits on top.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn


@dataclass
class RootInfo:
    """A top-level model (a module with parameters called from outside any other module)."""

    module: nn.Module
    label: str
    module_ids: set[int]
    names: dict[int, str]             # id(submodule) -> qualified name
    param_names: dict[int, str]       # id(param) -> qualified name
    has_mode_layers: bool
    handles: list = field(default_factory=list)
    n_forward: int = 0
    where_forward: str | None = None
    has_conv: bool = False            # convolution layers: cudnn.benchmark searches their algorithms per shape
    lazy: bool = False                # had uninitialized (Lazy*) parameters when first seen


@dataclass
class PassInfo:
    """One iteration over a DataLoader (normally one epoch or one validation run)."""

    loader: Any
    index: int
    site: str | None
    n_batches: int = 0
    steps: int = 0
    fwd_train_mode: int = 0
    fwd_eval_mode: int = 0
    fwd_no_grad: int = 0
    where_train_mode_fwd: str | None = None
    waits: list = field(default_factory=list)
    cpu_waits: list = field(default_factory=list)  # the process's CPU time during each wait (0: I/O or sleep)
    queued_waits: list = field(default_factory=list)  # time the loading thread waited for a core in each wait
    blocked_waits: list = field(default_factory=list)  # 1 where the loading thread blocked (I/O, a worker's queue)
    gaps: list = field(default_factory=list)
    last_return: float | None = None
    ended: bool = False
    closed: bool = False
    # loss-average-wrong-count: each batch's size (None: not readable), the index in w.loss_watch.losses of each
    # backward() during the pass, and how many of the deep steps' losses came straight from a torch loss
    # function with reduction="mean" (or not)
    batch_sizes: list = field(default_factory=list)
    loss_idx: list = field(default_factory=list)
    mean_losses: int = 0
    other_losses: int = 0
    # loss-retains-graph in an evaluation pass: backward() calls before the pass, and (batch number, the loss
    # tensor, the marker on its graph node) for the first losses with a graph computed during it (deep steps)
    backwards_before: int = 0
    loss_graphs: list = field(default_factory=list)

    @property
    def is_eval(self) -> bool:
        return self.n_batches > 0 and self.steps == 0 and (self.fwd_train_mode + self.fwd_eval_mode) > 0


class DeepView(Protocol):
    """DeepSteps (deep_steps.py) as the hooks see it."""
    active: bool                          # the step now running is a deep one
    deep_first: int
    op_hunt: bool
    first_nonfinite_loss_step: int | None
    nonfinite_culprit: dict | None
    nonfinite_op: dict | None

    def want_deep(self) -> bool: ...
    def light(self) -> bool: ...
    def set_deep(self, on: bool) -> None: ...


class PassesView(Protocol):
    """LoaderPasses (loader_passes.py) as the other parts see it."""
    passes: list[PassInfo]
    cur_pass: PassInfo | None
    eval_seen: bool
    eval_since_epoch: bool
    epoch_without_eval: bool

    def note_step(self) -> None: ...


class InputsView(Protocol):
    """ModelInputs (model_inputs.py) as the other parts see it."""
    hash_rows: bool
    capture_overfit: bool
    overfit_capture: dict | None
    eval_group_open: bool

    def capture_for_overfit(self, module: nn.Module, args: tuple) -> None: ...
    def hash_input(self, x: torch.Tensor, train: bool, root: int, others: tuple = ()) -> None: ...
    def note_sample_shape(self, info: RootInfo, args: tuple, x: torch.Tensor) -> None: ...
    def inspect_input(self, x: torch.Tensor, train: bool) -> None: ...


class LossesView(Protocol):
    """LossAndBackward (backward_hooks.py) as the other parts see it."""
    backwards: int
    backward_where: str | None
    losses: list                          # loss tensors (floats in driven mode)
    loss_steps: list[int]
    loss_rows: list                       # beside each loss: the rows of the training forward before it
    loss_is_mean: list                    # ... and whether it is a batch mean (None: not looked at)
    bw_refs: list

    def note_autocast(self, what: str, tensor: Any) -> None: ...
    def check_retained_losses(self) -> None: ...
    def check_eval_loss_graphs(self, info: PassInfo) -> None: ...


class ModelsView(Protocol):
    """ModelHooks (model_hooks.py) as the other parts see it."""
    roots: dict[int, RootInfo]
    stack: list[nn.Module]
    called: set[int]                      # modules seen running in a forward with gradients (deep steps)
    pending_evalmode_train: str | None
    last_train_rows: int | None
    light_forward: bool                   # a model's forward in a light deep step is running

    def module_name(self, m: nn.Module) -> str: ...
    def reset_stack(self) -> None: ...
    def mod_pre(self, module: nn.Module, args: tuple) -> None: ...
    def mod_post(self, module: nn.Module, args: tuple, out: Any) -> None: ...
    def root_pre(self, module: nn.Module, args: tuple) -> None: ...


class StepsView(Protocol):
    """StepHooks (step_hooks.py) as the other parts see it."""
    optimizers: list[torch.optim.Optimizer]
    local_opts: set[int]
    param_ptrs: dict[int, int]
    manual_watch: bool
    manual_since_backward: bool
    manual_steps: int
    stepped_since_backward: bool
    backward_since_step: int
    in_step: bool                 # between an optimizer step's pre- and post-hook

    def after_step(self) -> None: ...
    def on_step_pre(self, opt: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None: ...
    def on_step_post(self, opt: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None: ...
