"""The watcher's hooks on the models: which modules are models, their forwards, what each layer returns.

Its own module because a model's forward is where most evidence starts (train/eval mode, no_grad,
evaluation passes, unregistered layers, BatchNorm batches, dead ReLUs, the first module that makes a NaN)
and these hooks run on every forward: they are kept together, small and fast, apart from the step hooks.
"""
from __future__ import annotations

import sys
from threading import get_ident
from typing import Any, Protocol

import torch
from torch import nn

from torchwise.diagnose.checks import graph_uses
from torchwise.diagnose.checks import model as model_checks
from torchwise.diagnose.checks import step_record, symmetry
from torchwise.diagnose.function_mode import FunctionMode
from torchwise.diagnose.tensors import all_finite, compiling, first_dense_input, quiet
from torchwise.diagnose.user_code import is_user_file, user_where, where_defined
from torchwise.diagnose.health import CheckerHealth
from torchwise.diagnose.objective import Objectives
from torchwise.diagnose.output_reads import OutputReads
from torchwise.diagnose.watch_parts import DeepView, InputsView, PassesView, RootInfo, StepsView
from torchwise.models.structure import behaves_by_mode, has_convolutions



class ModelsWatcher(Protocol):
    """What ModelHooks reads (and, for the NaN hunt, writes) of the Watcher."""
    health: CheckerHealth
    deep: DeepView         # whether this step is deep; the NaN hunt's findings
    loaders: PassesView
    inputs: InputsView
    optim_steps: StepsView  # its parameter addresses, and whether any step was made
    objective: Objectives
    check_mode: bool
    driven: bool
    max_steps: int | None
    steps: int
    accum: dict[int, dict] | None
    last_layer: dict[int, int]
    global_mode: bool
    function_mode: FunctionMode | None   # the TorchFunctionMode while one is entered
    phase_now: str | None

    def hit(self, id: str, *, info: dict | None = None, where: str | None = None) -> None: ...
    def pause_function_mode(self, paused: bool) -> None: ...


class ModelHooks:
    """The Watcher's part (w.models) that finds the models and watches their forwards (a root pre-hook on each
    model; in deep steps a pre/post hook on every module)."""

    def __init__(self, w: ModelsWatcher):
        self.w = w
        self.health, self.loaders, self.inputs = w.health, w.loaders, w.inputs  # created before this part
        self.deep = w.deep  # read by every hook: one lookup
        self.stack: list[nn.Module] = []
        self._owner: dict[int, int] = {}  # {0: the thread whose forward the stack holds} (see concurrent)
        self.elsewhere: dict[int, int] = {}  # thread -> depth of its forward, run while another thread's is on the stack
        self.roots: dict[int, RootInfo] = {}
        self._local_ids: set[int] = set()  # every module of the models (local mode watches only those)
        self._not_roots: set[int] = set()
        self.unregistered: dict[int, dict] = {}
        self.called: set[int] = set()  # modules seen running in a forward with gradients (deep steps)
        self.outputs = OutputReads()  # which layers' outputs anything read (no-gradient-flow's evidence)
        self.relu: dict[Any, dict] = {}
        self.bn_batches: list[int] = []
        self.bn_counts: dict[int, dict] = {}  # id(BatchNorm) -> its name and (batch, values per channel) per forward
        self.bn_where: str | None = None
        self.pending_evalmode_train: str | None = None
        self._mode_paused_in_forward = False  # the function mode left the stack for a no_grad forward
        self.light_forward = False  # a model's forward in a light deep step runs now (deep_steps.LIGHT_AFTER_STEPS)
        self.last_train_rows: int | None = None  # rows of the last training forward (a loss of a hand-made batch)
        self.eval_forwards = 0  # forwards under no_grad, in eval mode or in the eval phase (ReduceLROnPlateau's evidence)
        self._direct_frame: Any = None  # the frame of the last model.forward(x) called directly (see _direct_forward)

    def add_root(self, module: nn.Module) -> RootInfo:
        info = self.roots.get(id(module))
        if info is not None:
            return info
        names = {}
        for name, m in module.named_modules():
            names.setdefault(id(m), name)
        info = RootInfo(
            module=module, label=type(module).__name__, module_ids=set(names), names=names,
            param_names={id(p): n for n, p in module.named_parameters()},
            has_mode_layers=any(behaves_by_mode(m) for m in module.modules()),
            has_conv=has_convolutions(module),
            lazy=any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters()),
        )
        self.roots[id(module)] = info
        self._local_ids |= info.module_ids
        for p in module.parameters():
            self.w.optim_steps.param_ptrs[p.untyped_storage().data_ptr()] = id(p)
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
        if frame is self._direct_frame:
            return  # another layer of the forward already seen: its model is the root, and its forward counted
        if not any(m is part for m in owner.modules()) or next(owner.parameters(), None) is None:
            return
        if id(owner) not in self.roots:
            self.add_root(owner)
        if frame.f_code.co_name == "forward" and self._direct_frame is not frame:
            self._direct_frame = frame  # held until the next such forward: one frame, so its id is never reused
            code = frame.f_code
            args = tuple(frame.f_locals[n] for n in code.co_varnames[1:code.co_argcount] if n in frame.f_locals)
            self.root_pre(owner, args)

    def module_name(self, m: nn.Module) -> str:
        for info in self.roots.values():
            name = info.names.get(id(m))
            if name is not None:
                return f"{info.label}.{name} ({type(m).__name__})" if name else info.label
        return type(m).__name__

    def _mod_pre_impl(self, module: nn.Module, args: tuple) -> None:
        stack = self.stack
        self.called.add(id(module))
        if not stack:
            mid = id(module)
            if self.w.global_mode and mid not in self.roots and next(module.parameters(), None) is not None:
                self._direct_forward(module)  # (a loss module called every step has no parameters: no frame walk)
            if self.w.global_mode and mid not in self.roots and mid not in self._not_roots:
                if mid in self._local_ids:  # a part of a known model called directly (vae.decode(z)): not a model
                    self._not_roots.add(mid)
                elif next(module.parameters(), None) is not None:
                    self.add_root(module)
                    self.root_pre(module, args)  # the hook just added runs from the next call on
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
        stack = self.stack
        if stack and stack[-1] is module:
            stack.pop()
        if stack and isinstance(module, symmetry.SYM_LAYERS):
            self.w.last_layer[id(stack[0])] = id(module)
        elif not stack and id(module) in self.roots:
            graph_uses.on_root_output(self.w, module, out)
        if isinstance(module, nn.ReLU) and isinstance(out, torch.Tensor) and module.training:
            self._record_relu(module, out, self.module_name(module))
        if module._parameters and self.deep.active and not self.light_forward and self.w.function_mode is not None \
                and torch.is_grad_enabled():
            self.outputs.made_by(id(module), out)  # the function mode sees what reads it
        if self.deep.nonfinite_culprit is None and isinstance(out, torch.Tensor) and out.is_floating_point() \
                and (self.w.check_mode or self.deep.first_nonfinite_loss_step is not None):
            if not all_finite(out):
                ins = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
                if all(all_finite(a) for a in ins):
                    params_ok = all(all_finite(p) for p in module.parameters(recurse=False))
                    self.deep.nonfinite_culprit = {
                        "module": self.module_name(module), "step": self.w.steps, "params_finite": params_ok,
                        "where": where_defined(type(module).forward) or user_where(),
                        "n_nonfinite": int((~torch.isfinite(out)).sum()), "numel": out.numel()}
                    if self.deep.nonfinite_op is None and self.w.function_mode is not None:
                        self.deep.op_hunt = True  # the module made it: name its operation at the next forwards

    def reset_stack(self) -> None:
        """Between steps no forward is running: a forward that raised (here or in another thread) left its layers."""
        self.stack.clear()
        self.elsewhere.clear()
        self._owner.clear()

    def concurrent(self, entering: bool) -> bool:
        """Whether this layer hook belongs to a forward run in another thread while the watched one runs (a thread
        pool's rollouts of model copies: torch releases the GIL inside each operation, so their layers interleave).
        Such a forward is not a layer of the watched one: it is skipped whole, by its depth in its own thread, and
        layers are watched one forward at a time. The thread whose forward the stack holds claims it with one
        dict.setdefault, atomic under the GIL, so two threads starting a forward at once cannot both claim it."""
        tid = get_ident()
        depth = self.elsewhere.get(tid) if self.elsewhere else None
        if depth is None and (self._owner.get(0) == tid or (entering and self._owner.setdefault(0, tid) == tid)
                              or (not entering and not self._owner)):
            return False
        if entering:
            self.elsewhere[tid] = (depth or 0) + 1
        elif depth is not None:
            if depth <= 1:
                del self.elsewhere[tid]
            else:
                self.elsewhere[tid] = depth - 1
        return True

    # Hooks never break the user's program: a checker bug loses evidence, not the training run.
    def mod_pre(self, module, args):
        if compiling() or (not self.w.global_mode and id(module) not in self._local_ids) or self.concurrent(True):
            return
        if self.stack and not torch.is_grad_enabled():
            # inside a model's forward under no_grad (an evaluation, a sampling loop): what the deep hooks look at
            # per layer (activations, NaN culprits, unregistered layers, BatchNorm batches) is training's; only the
            # root's output is looked at (its mode, what it is compared with)
            self.stack.append(module)
            return
        try:
            with quiet():
                self._mod_pre_impl(module, args)
        except Exception as exc:
            self.health.internal_error("module forward pre-hook", exc)
        if len(self.stack) == 1 and id(module) in self.roots:  # a model's forward starts (not a loss module's)
            if not torch.is_grad_enabled() and not self._mode_paused_in_forward:
                # under no_grad: its torch calls skip the function mode altogether (see mod_post)
                self.w.pause_function_mode(True)
                self._mode_paused_in_forward = True
            # light: the function mode only hunts NaN-making operations in it (set each time: a forward that raised
            # never reached the post-hook that clears it)
            self.light_forward = torch.is_grad_enabled() and self.deep.light()

    def mod_post(self, module, args, out):
        if compiling() or (not self.w.global_mode and id(module) not in self._local_ids) or self.concurrent(False):
            return
        stack = self.stack
        if len(stack) > 1 and stack[-1] is module and not torch.is_grad_enabled():
            stack.pop()  # a layer inside a model's forward under no_grad (see mod_pre)
            if id(module) in self.roots and module.training and self.deep.active:
                # a model run under no_grad inside another's forward (BYOL's target network inside BYOL.forward):
                # is its output a training target or an evaluation? Followed like a top-level model's
                self.w.objective.note_model_output(out, maker=id(module))
            return
        try:
            with quiet():
                self._mod_post_impl(module, args, out)
        except Exception as exc:
            self.health.internal_error("module forward hook", exc)
        if not self.stack:
            self.light_forward = False
            self._owner.clear()  # the forward is over: the next one, from any thread, claims the stack
            if self._mode_paused_in_forward:
                self._mode_paused_in_forward = False
                self.w.pause_function_mode(False)

    def global_root_pre(self, module, args):
        if id(module) in self.roots:  # one dict lookup for the many modules that are not a model
            self.root_pre(module, args)

    def root_pre(self, module, args):
        if compiling():
            return
        self.w.optim_steps.in_step = False  # a forward is never the optimizer's own arithmetic (an LBFGS closure)
        health = self.health
        health.maybe_stop()
        try:
            with quiet():
                self._root_pre_impl(module, args)
        except Exception as exc:
            health.internal_error("model forward pre-hook", exc)
        if self.w.max_steps and self.w.check_mode:
            health.stop_if_idle(bool(self.w.steps or self.w.optim_steps.manual_steps))

    def _record_relu(self, key: Any, out: torch.Tensor, label: str) -> None:
        model_checks.record_relu(self.w, key, out, label)  # pooled over batches: batch size 1 is judged too

    def on_relu_func(self, x: Any, out: Any) -> None:
        if self.stack and isinstance(self.stack[-1], nn.ReLU):
            return  # the module hook measures it, with the module's name
        if isinstance(out, torch.Tensor):
            where = user_where()
            self._record_relu(("f", where), out, f"relu at {where}")

    def _note_no_grad_train_forward(self, module: nn.Module, info: RootInfo, args: tuple) -> None:
        """A no_grad forward in train mode: an evaluation, unless this model's output becomes a loss's target (a
        DQN's target network, a distillation teacher): decided at the end from objective.target_makers; or unless
        its input is noise the script drew (a generator's samples, shown or logged: they evaluate nothing), which
        only a deep step can tell (the function mode tags what randn makes)."""
        rec = self.w.hit_info.setdefault("eval-mode-missing~nograd", {}).setdefault(
            id(module), {"forwards": 0, "where": user_where(), "model": info.label, "seen": 0, "noise": 0})
        rec["forwards"] += 1
        if self.deep.active:
            rec["seen"] += 1
            rec["noise"] += self._samples_noise(args)

    def _samples_noise(self, args: tuple) -> bool:
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
        return x is not None and self.w.objective.tag_of(x) == "noise"

    def _root_pre_impl(self, module: nn.Module, args: tuple) -> None:
        info = self.roots.get(id(module))
        if info is None:
            return
        if self.deep.active and self.w.accum is not None:
            step_record.note_root_input(self.w, module, args)
        if self.deep.active:
            self.w.objective.note_model_input(args)  # new input values: a new batch (get_batch())
        if info.lazy:
            info.lazy = any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters())
            if info.lazy or not self.w.steps:
                return  # a forward that builds lazy layers (before training) is neither training nor evaluation
        info.n_forward += 1
        self.health.fwd_since_step += 1
        grad = torch.is_grad_enabled()
        training = module.training
        p = self.loaders.cur_pass
        is_train_fwd = grad and training and self.w.phase_now != "eval"
        if p is not None and not p.closed:
            if training:
                p.fwd_train_mode += 1
                if p.where_train_mode_fwd is None:
                    p.where_train_mode_fwd = user_where()
            else:
                p.fwd_eval_mode += 1
            p.fwd_no_grad += not grad
        evaluating = (not grad) or self.w.phase_now == "eval"
        if evaluating or not training:
            # (a forward in eval mode with gradients on is an evaluation written without no_grad, as
            # ReduceLROnPlateau's metric sees it: an eval_fn that calls model.eval() and returns the loss)
            self.eval_forwards += 1
        if evaluating:
            self.loaders.eval_seen = True
            self.loaders.eval_since_epoch = True
            if training and info.has_mode_layers and grad:
                self.w.hit("eval-mode-missing", info={"model": info.label})
            elif training and info.has_mode_layers:
                self._note_no_grad_train_forward(module, info, args)
        elif not training and info.has_mode_layers:
            self.pending_evalmode_train = self.pending_evalmode_train or (user_where() or "?")
        else:
            self.pending_evalmode_train = None  # the forward that feeds the next step() runs in train mode
        x = first_dense_input(args)
        if x is None:
            return
        if is_train_fwd and x.dim() >= 1:
            self.last_train_rows = int(x.shape[0])
        if is_train_fwd and info.has_conv and not self.w.driven and torch.backends.cudnn.benchmark:
            self.inputs.note_sample_shape(info, args, x)
        if self.deep.active:
            self.inputs.inspect_input(x, train=is_train_fwd)
        if self.inputs.capture_overfit and self.inputs.overfit_capture is None and is_train_fwd and self.w.steps == 0:
            self.inputs.capture_for_overfit(module, args)
        if self.inputs.hash_rows and x.dim() >= 1 and x.shape[0] > 0:
            others = tuple(a for a in args if a is not x and isinstance(a, torch.Tensor) and a.layout == torch.strided
                           and a.dim() >= 1 and a.shape[0] == x.shape[0])[:8]
            self.inputs.hash_input(x, grad and self.w.phase_now != "eval", id(module), others)
