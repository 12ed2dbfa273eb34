"""The watcher's hooks on the models: which modules are models, their forwards, what each layer returns.

Its own module because a model's forward is where most evidence starts (train/eval mode, no_grad,
evaluation passes, unregistered layers, BatchNorm batches, dead ReLUs, the first module that makes a NaN)
and these hooks run on every forward: they are kept together, small and fast, apart from the step hooks.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchwise.diagnose.checks import graph_uses
from torchwise.diagnose.checks import model as model_checks
from torchwise.diagnose.checks import step_record, symmetry
from torchwise.diagnose.health import IDLE_FORWARDS, idle_seconds
from torchwise.diagnose.tensors import all_finite, compiling, quiet
from torchwise.diagnose.user_code import is_user_file, user_where, where_defined
from torchwise.models.structure import has_convolutions


def _behaves_by_mode(m: nn.Module) -> bool:
    """Whether model.train()/eval() changes what this layer computes: Dropout with p > 0, BatchNorm (and
    InstanceNorm) that keeps running statistics. nn.Dropout(p=0.0), common in transformer configs, does not."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return float(getattr(m, "p", 0.0)) > 0.0
    if isinstance(m, nn.modules.batchnorm._NormBase):
        return bool(getattr(m, "track_running_stats", True)) or isinstance(m, nn.modules.batchnorm._BatchNorm)
    return False


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


class ModelHooks:
    """The Watcher's part that finds the models and watches their forwards (a root pre-hook on each model;
    in deep steps a pre/post hook on every module)."""

    def _init_models(self) -> None:
        self._stack: list[nn.Module] = []
        self.roots: dict[int, RootInfo] = {}
        self._local_ids: set[int] = set()  # every module of the models (local mode watches only those)
        self._not_roots: set[int] = set()
        self.unregistered: dict[int, dict] = {}
        self.relu: dict[Any, dict] = {}
        self.bn_batches: list[int] = []
        self.bn_counts: dict[int, dict] = {}  # id(BatchNorm) -> its name and (batch, values per channel) per forward
        self.bn_where: str | None = None
        self._pending_evalmode_train: str | None = None
        self.eval_forwards = 0  # forwards under no_grad or in the eval phase (ReduceLROnPlateau's evidence)
        self._direct_frame: Any = None  # the frame of the last model.forward(x) called directly (see _direct_forward)

    def _add_root(self, module: nn.Module) -> RootInfo:
        info = self.roots.get(id(module))
        if info is not None:
            return info
        names = {}
        for name, m in module.named_modules():
            names.setdefault(id(m), name)
        info = RootInfo(
            module=module, label=type(module).__name__, module_ids=set(names), names=names,
            param_names={id(p): n for n, p in module.named_parameters()},
            has_mode_layers=any(_behaves_by_mode(m) for m in module.modules()),
            has_conv=has_convolutions(module),
            lazy=any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters()),
        )
        self.roots[id(module)] = info
        self._local_ids |= info.module_ids
        for p in module.parameters():
            self._param_ptrs[p.untyped_storage().data_ptr()] = id(p)
        return info

    def _direct_forward(self, part: nn.Module) -> None:
        """A layer called with no model forward running: inside `model.forward(x)` called directly (old code, and
        `criterion.forward`'s kin), or inside a method of the model that is not forward (a policy's act() and
        evaluate()), the model's own hooks never run. The model is the module whose method the nearest user frame
        runs and which holds the layer: it becomes the root (its layers are parts, not models, and a layer of it
        that nothing calls is its unused parameter), and in a forward called directly the first of its layers
        called stands for the model's forward."""
        frame = sys._getframe(3)
        for _ in range(6):
            if frame is None:
                return
            owner = frame.f_locals.get("self")
            if isinstance(owner, nn.Module) and owner is not part and is_user_file(frame.f_code.co_filename):
                break
            frame = frame.f_back
        else:
            return
        if not any(m is part for m in owner.modules()) or next(owner.parameters(), None) is None:
            return
        if id(owner) not in self.roots:
            self._add_root(owner)
        if frame.f_code.co_name == "forward" and self._direct_frame is not frame:
            self._direct_frame = frame  # held until the next such forward: one frame, so its id is never reused
            code = frame.f_code
            args = tuple(frame.f_locals[n] for n in code.co_varnames[1:code.co_argcount] if n in frame.f_locals)
            self._root_pre(owner, args)

    def module_name(self, m: nn.Module) -> str:
        for info in self.roots.values():
            name = info.names.get(id(m))
            if name is not None:
                return f"{info.label}.{name} ({type(m).__name__})" if name else info.label
        return type(m).__name__

    def _mod_pre_impl(self, module: nn.Module, args: tuple) -> None:
        stack = self._stack
        if not stack:
            mid = id(module)
            if self._global and mid not in self.roots and next(module.parameters(), None) is not None:
                self._direct_forward(module)  # (a loss module called every step has no parameters: no frame walk)
            if self._global and mid not in self.roots and mid not in self._not_roots:
                if mid in self._local_ids:  # a part of a known model called directly (vae.decode(z)): not a model
                    self._not_roots.add(mid)
                elif next(module.parameters(), None) is not None:
                    self._add_root(module)
                    self._root_pre(module, args)  # the hook just added runs from the next call on
                else:
                    self._not_roots.add(mid)
        else:
            root = self.roots.get(id(stack[0]))
            if root is not None and id(module) not in root.module_ids and id(module) not in self.unregistered \
                    and not any(id(m) in self.unregistered for m in stack):
                if next(module.parameters(recurse=False), None) is not None or next(module.parameters(), None) is not None:
                    self.unregistered[id(module)] = {"module": type(module).__name__, "root": root, "ref": module,
                                                     "n_params": sum(p.numel() for p in module.parameters())}
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and torch.is_grad_enabled():
            x = args[0] if args else None
            if isinstance(x, torch.Tensor) and x.dim() >= 2 and x.shape[1] > 0:
                # the values each channel's mean and variance come from: batch x positions (N*H*W for
                # BatchNorm2d, N*L for BatchNorm1d on (N, C, L), N on (N, C))
                per_channel = x.numel() // int(x.shape[1])
                rec = self.bn_counts.get(id(module))
                if rec is None:
                    rec = self.bn_counts[id(module)] = {"name": self.module_name(module), "counts": []}
                if len(rec["counts"]) < 1000:
                    rec["counts"].append((int(x.shape[0]), per_channel))
                if len(self.bn_batches) < 10_000:
                    self.bn_batches.append(int(x.shape[0]))
                if self.bn_where is None:
                    self.bn_where = where_defined(stack[0]) if stack else None
        stack.append(module)

    def _mod_post_impl(self, module: nn.Module, args: tuple, out: Any) -> None:
        stack = self._stack
        if stack and stack[-1] is module:
            stack.pop()
        if stack and isinstance(module, symmetry.SYM_LAYERS):
            self.last_layer[id(stack[0])] = id(module)
        elif not stack and id(module) in self.roots:
            graph_uses.on_root_output(self, module, out)
        if isinstance(module, nn.ReLU) and isinstance(out, torch.Tensor) and module.training:
            self._record_relu(module, out, self.module_name(module))
        if self.nonfinite_culprit is None and isinstance(out, torch.Tensor) and out.is_floating_point() \
                and (self.check_mode or self.first_nonfinite_loss_step is not None):
            if not all_finite(out):
                ins = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
                if all(all_finite(a) for a in ins):
                    params_ok = all(all_finite(p) for p in module.parameters(recurse=False))
                    self.nonfinite_culprit = {
                        "module": self.module_name(module), "step": self.steps, "params_finite": params_ok,
                        "where": where_defined(type(module).forward) or user_where(),
                        "n_nonfinite": int((~torch.isfinite(out)).sum()), "numel": out.numel()}
                    if self.nonfinite_op is None and self._mode is not None:
                        self.op_hunt = True  # the module made it: name its operation at the next forwards

    # Hooks never break the user's program: a checker bug loses evidence, not the training run.
    def _mod_pre(self, module, args):
        if compiling() or (not self._global and id(module) not in self._local_ids):
            return
        try:
            with quiet():
                self._mod_pre_impl(module, args)
        except Exception as exc:
            self.internal_error("module forward pre-hook", exc)

    def _mod_post(self, module, args, out):
        if compiling() or (not self._global and id(module) not in self._local_ids):
            return
        try:
            with quiet():
                self._mod_post_impl(module, args, out)
        except Exception as exc:
            self.internal_error("module forward hook", exc)

    def _global_root_pre(self, module, args):
        if id(module) in self.roots:  # one dict lookup for the many modules that are not a model
            self._root_pre(module, args)

    def _root_pre(self, module, args):
        if compiling():
            return
        self.maybe_stop()
        try:
            with quiet():
                self._root_pre_impl(module, args)
        except Exception as exc:
            self.internal_error("model forward pre-hook", exc)
        if self.max_steps and self.check_mode and self._fwd_since_step >= IDLE_FORWARDS and \
                time.perf_counter() - self._idle_since >= idle_seconds():
            what = "since the last optimizer step" if self.steps or self.manual_steps else "and no optimizer step"
            self.request_stop(f"{self._fwd_since_step:,} model forwards {what}, over "
                              f"{time.perf_counter() - self._idle_since:.0f} s (an inference or evaluation loop that "
                              "does not end)")

    def _record_relu(self, key: Any, out: torch.Tensor, label: str) -> None:
        model_checks.record_relu(self, key, out, label)  # pooled over batches: batch size 1 is judged too

    def on_relu_func(self, x: Any, out: Any) -> None:
        if self._stack and isinstance(self._stack[-1], nn.ReLU):
            return  # the module hook measures it, with the module's name
        if isinstance(out, torch.Tensor):
            where = user_where()
            self._record_relu(("f", where), out, f"relu at {where}")

    def _root_pre_impl(self, module: nn.Module, args: tuple) -> None:
        info = self.roots.get(id(module))
        if info is None:
            return
        if self._deep and self.accum is not None:
            step_record.note_root_input(self, module, args)
        if self._deep:
            self.objective.note_model_input(args)  # new input values: a new batch (get_batch())
        if info.lazy:
            info.lazy = any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())
            if info.lazy or not self.steps:
                return  # a forward that builds lazy layers (before training) is neither training nor evaluation
        info.n_forward += 1
        self._fwd_since_step += 1
        grad = torch.is_grad_enabled()
        training = module.training
        p = self.cur_pass
        is_train_fwd = grad and training and self._phase != "eval"
        if p is not None and not p.closed:
            if training:
                p.fwd_train_mode += 1
                if p.where_train_mode_fwd is None:
                    p.where_train_mode_fwd = user_where()
            else:
                p.fwd_eval_mode += 1
            p.fwd_no_grad += not grad
        evaluating = (not grad) or self._phase == "eval"
        if evaluating:
            self.eval_seen = True
            self.eval_forwards += 1
            self._eval_since_epoch = True
            if training and info.has_mode_layers:
                self._hit("eval-mode-missing", info={"model": info.label})
        elif not training and info.has_mode_layers:
            self._pending_evalmode_train = self._pending_evalmode_train or (user_where() or "?")
        else:
            self._pending_evalmode_train = None  # the forward that feeds the next step() runs in train mode
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if x is None and args and isinstance(args[0], (tuple, list)):
            x = next((a for a in args[0] if isinstance(a, torch.Tensor)), None)
        if x is None:
            return
        if is_train_fwd and info.has_conv and not self.driven and torch.backends.cudnn.benchmark:
            self._note_sample_shape(info, args, x)
        if self._deep:
            self._inspect_input(x, train=is_train_fwd)
        if self.capture_overfit and self.overfit_capture is None and is_train_fwd and self.steps == 0:
            self._capture_for_overfit(module, args)
        if self.hash_rows and x.dim() >= 1 and x.shape[0] > 0:
            self._hash_input(x, grad and self._phase != "eval", id(module))
