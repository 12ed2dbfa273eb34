"""The watcher's hooks on optimizer steps: the step pre/post hooks, hand-written updates, zero_grad watch.

Its own module because a step is where the watcher's bookkeeping turns over (the step count, the
deep-step decision, the stop at --max-steps) and where the optimizer-level evidence is taken (the
gradients' clearing, the update sizes in deep steps); the model and backward hooks only feed it.
"""
from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from torchwise.diagnose.checks import accumulation
from torchwise.diagnose.checks import graph_uses
from torchwise.diagnose.deep_steps import OP_HUNT_STEPS
from torchwise.diagnose.health import CheckerHealth
from torchwise.diagnose.objective import Objectives
from torchwise.diagnose.tensors import compiling, quiet
from torchwise.diagnose.user_code import user_where
from torchwise.diagnose.watch_parts import DeepView, InputsView, LossesView, ModelsView, PassesView



def _unserializable(fn):
    """A tensor hook of ours: torch.save(model) skips it without a warning (it never belongs to the model)."""
    return torch.utils.hooks.unserializable_hook(fn)


class StepsWatcher(Protocol):
    """What StepHooks reads (and, for the run's step count and the NaN hunt, writes) of the Watcher."""
    health: CheckerHealth
    deep: DeepView                 # decides at each step whether the next is deep
    loaders: PassesView
    inputs: InputsView
    loss_watch: LossesView
    models: ModelsView
    objective: Objectives
    steps: int                      # the optimizer steps so far: the run's clock, counted here
    max_steps: int | None
    driven: bool
    accum: dict[int, dict] | None
    graph_uses: list[dict]
    global_mode: bool

    def hit(self, id: str, *, info: dict | None = None, where: str | None = None) -> None: ...


class StepHooks:
    """The Watcher's part (w.optim_steps) that sees each optimizer step (global hooks, the optimizer's own hooks,
    or a hand-written update found by the function mode) and closes the step."""

    def __init__(self, w: StepsWatcher):
        self.w = w
        self.deep = w.deep  # read by every hook: one lookup
        self.optimizers: list[torch.optim.Optimizer] = []
        self.opt_param_ids: set[int] = set()
        self.local_opts: set[int] = set()
        self.step_where: str | None = None
        # optimizer-level evidence (deep steps)
        self.grad_records: list[dict] = []
        self.update_ratios: list[tuple[int, float]] = []
        self.snap: list | None = None
        self.zero_sample: list = []
        self.grad_hooks: dict[int, Any] = {}
        self._zg_state: dict[int, str] = {}
        self._zg_params: dict[int, Any] = {}
        self._zg_where: str | None = None
        # missing-zero-grad per optimizer and step() call site: (id, "file:line") -> [steps checked, steps with
        # stale gradients, where first stale].
        # Per optimizer because a run can have two loops: a buggy first phase with its own optimizer must
        # not be averaged away by a correct second one
        self.zero_grad_by_opt: dict[int, list] = {}
        self._opt_id_cache: dict[int, set[int]] = {}
        self.stepped_since_backward = False
        self.backward_since_step = 0
        self.not_in_opt: dict[int, tuple[str, str]] = {}
        self.no_grad_events: list[dict] = []
        # hand-written updates (no optimizer object): parameters written in place after a backward()
        self.manual_watch = False       # on once a backward() has run and no optimizer has stepped
        self.manual_steps = 0
        self.param_ptrs: dict[int, int] = {}  # storage address -> id(param), for p.data.add_(...)
        self.manual_since_backward = False
        # inside optimizer.step(), between its pre- and post-hook: the optimizer's own arithmetic (tens of calls a
        # step) is nothing a detector reads, so the function mode passes it through (see FunctionMode). A step that
        # raises never reaches its post-hook: the next model forward clears it (ModelHooks.root_pre).
        self.in_step = False

    def on_step_pre(self, opt, args=(), kwargs=None):
        if compiling():
            return
        self.in_step = True
        self.w.health.maybe_stop()
        try:
            with quiet():
                self._on_step_pre_impl(opt, args, kwargs)
        except Exception as exc:
            self.w.health.internal_error("optimizer step pre-hook", exc)

    def _watch_grad_clearing(self, params: list) -> None:
        """Check that the gradient this step consumed is cleared before the optimizer uses these params again.

        A tensor hook runs whenever a new gradient arrives for a parameter, *before* it is added to
        .grad: if .grad still holds the consumed gradient, the parameter is "stale"; if .grad was
        cleared (None or zeros), it is "fresh". The verdict is taken at the next step() of an
        optimizer that holds the parameter, so gradient accumulation (several backward() per step)
        and GANs (a generator backward flowing through the discriminator) stay correct.
        """
        for p in params:
            pid = id(p)
            self._zg_state[pid] = "consumed"
            if pid in self.grad_hooks:
                continue
            ref = weakref.ref(p)

            @_unserializable
            def hook(grad, ref=ref, pid=pid):
                param = ref()
                state = self._zg_state.get(pid)
                if param is None or state not in ("consumed", "stale"):
                    return None
                cleared = param.grad is None or not bool(param.grad.ne(0).any())
                if cleared:
                    self._zg_state[pid] = "fresh"
                elif state == "consumed":
                    self._zg_state[pid] = "stale"
                    self._zg_where = user_where() or self.w.loss_watch.backward_where
                return None

            self.grad_hooks[pid] = p.register_hook(hook)
            self._zg_params[pid] = ref

    def _verdict_grad_clearing(self, opt) -> None:
        if not self._zg_state:
            return
        ids = self._opt_ids(opt)
        mine = [pid for pid in self._zg_state if pid in ids]
        if not mine:
            return
        stale = False
        for pid in mine:
            state = self._zg_state.pop(pid)
            ref = self._zg_params.pop(pid, None)
            handle = self.grad_hooks.pop(pid, None)
            if handle is not None:
                handle.remove()
            param = ref() if ref is not None else None
            if state == "stale" and param is not None and param.grad is not None:
                stale = True
        # per optimizer and per place it is stepped from: one optimizer stepped twice a batch (a VAE-GAN's
        # generator: its VAE step, then its GAN step) can forget zero_grad() before one of them only
        rec = self.zero_grad_by_opt.setdefault((id(opt), user_where()), [0, 0, None])
        rec[0] += 1
        if stale:
            rec[1] += 1
            rec[2] = rec[2] or self._zg_where
            self.w.hit("missing-zero-grad", where=self._zg_where)

    def _opt_ids(self, opt) -> set[int]:
        key = id(opt)
        ids = self._opt_id_cache.get(key)
        if ids is None or len(ids) != sum(len(g["params"]) for g in opt.param_groups):
            ids = {id(p) for g in opt.param_groups for p in g["params"]}
            self._opt_id_cache[key] = ids
        return ids

    def add_optimizer(self, opt: torch.optim.Optimizer) -> None:
        if any(o is opt for o in self.optimizers):
            return
        self.optimizers.append(opt)
        for g in opt.param_groups:
            self.opt_param_ids.update(id(p) for p in g["params"])

    def note_manual_update(self, args: tuple) -> None:
        """A hand-written update (`p -= lr * p.grad`, `p.data.add_(...)`, `w1 -= lr * w1.grad` on bare tensors):
        the first in-place write to a model parameter, or to a leaf tensor with a gradient, after a
        backward() is one optimizer step, so the run's training is seen."""
        if not self.manual_since_backward or not args or not isinstance(args[0], torch.Tensor):
            return
        t = args[0]
        try:
            if torch.is_grad_enabled() and t.requires_grad:
                return  # not an update: autograd would refuse an in-place write to a leaf that needs grad
            if self.param_ptrs.get(t.untyped_storage().data_ptr()) is None and not (
                    t.is_leaf and t.requires_grad and t.grad is not None):
                return  # neither a model's parameter nor a bare leaf tensor that backward() gave a gradient
        except Exception:  # a tensor without storage (a subclass, meta): not a parameter of ours
            return
        self.manual_since_backward = False
        self.manual_steps += 1
        if self.step_where is None:
            self.step_where = user_where()
        self.after_step()

    def _on_step_pre_impl(self, opt: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        if self.w.global_mode and id(opt) in self.local_opts:
            return
        self.manual_watch = self.manual_since_backward = False
        self.add_optimizer(opt)
        self.w.objective.on_step(opt)
        for g in opt.param_groups:  # param groups added later with add_param_group
            self.opt_param_ids.update(id(p) for p in g["params"])
        self.w.loss_watch.note_autocast("step", next((p for g in opt.param_groups for p in g["params"]), None))
        if self.step_where is None:
            self.step_where = user_where()
        self._verdict_grad_clearing(opt)
        if self.w.accum is not None:
            accumulation.accum_on_step(self.w, opt)
        if self.w.models.pending_evalmode_train is not None:
            self.w.hit("train-mode-missing", where=self.w.models.pending_evalmode_train)
            self.w.models.pending_evalmode_train = None
        if not self.deep.active:
            return
        try:
            from torchwise.diagnose.checks import optim
            optim.inspect_step_pre(self.w, opt)
        except Exception as exc:
            self.w.health.internal_error("optimizer step pre-hook (deep)", exc)

    def on_step_post(self, opt: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        self.in_step = False
        if self.w.global_mode and id(opt) in self.local_opts:
            return
        if self.deep.active and self.snap is not None:
            try:
                with quiet():
                    from torchwise.diagnose.checks import optim
                    optim.inspect_step_post(self.w, opt)
            except Exception as exc:
                self.w.health.internal_error("optimizer step post-hook", exc)
        # driven: the loop clears gradients itself, and the tensor hooks would outlive the deep step
        if self.deep.active and self.zero_sample and not self.w.driven:
            try:
                with quiet():
                    self._watch_grad_clearing(self.zero_sample)
            except Exception as exc:
                self.w.health.internal_error("zero_grad watch", exc)
        self.zero_sample = []
        self.snap = None
        if not self.w.driven:  # driven: end_step() does the bookkeeping, also for steps without hooks
            self.after_step()

    def after_step(self) -> None:
        self.w.steps += 1
        self.stepped_since_backward = True
        self.backward_since_step = 0
        if self.w.graph_uses:
            graph_uses.settle_graph_uses(self.w)
        self.w.loaders.note_step()
        self.w.inputs.eval_group_open = False
        if self.deep.op_hunt and self.w.steps >= min(self.deep.deep_first, OP_HUNT_STEPS) and \
                self.deep.first_nonfinite_loss_step is None and self.deep.nonfinite_culprit is None:
            self.deep.op_hunt = False
        if self.deep.active and self.w.loss_watch.bw_refs:
            with quiet():
                self.w.loss_watch.check_retained_losses()
        want = self.deep.want_deep()
        if want != self.deep.active:
            self.deep.set_deep(want)
        else:
            self.w.models.reset_stack()
        self.w.health.note_step()
        if self.w.max_steps and self.w.steps >= self.w.max_steps:
            enough = (self.w.loaders.eval_seen or self.w.loaders.epoch_without_eval or not self.w.loaders.passes
                      or self.w.steps >= self._step_cap())
            if enough:
                self.w.health.request_stop(f"--max-steps {self.w.max_steps} reached")

    def _step_cap(self) -> int:
        """Past --max-steps with no evaluation seen yet: how long to wait for one. Twice --max-steps, or up to
        10x when the first epoch is known to end within that (the evaluation usually follows an epoch):
        a verdict on validation needs a validation to look at."""
        cap = 2 * self.w.max_steps
        first = next((p for p in self.w.loaders.passes if p.steps > 0), None)
        if first is not None and not first.closed:
            try:
                n = len(first.loader)
            except TypeError:  # an iterable loader without a length
                return cap
            if n <= 10 * self.w.max_steps:
                cap = max(cap, n + 1)
        return cap
