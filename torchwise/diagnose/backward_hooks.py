"""The watcher's view of losses and backward(): the loss values, functional losses, autocast, retained graphs.

Its own module because backward() is the one call every training step makes whatever its loop looks like
(a Trainer, a hand-written loop, a hand-written update): the loss curve, the losses' inspection and the
evidence of kept graphs are gathered here, from the patched torch.autograd.backward or the loop's own call.
"""
from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from torchwise.diagnose.bounded import put_newest
from torchwise.diagnose.checks import accumulation, followed
from torchwise.diagnose.checks import model as model_checks
from torchwise.diagnose.function_mode import FunctionMode
from torchwise.diagnose.tensors import autocast_dtype, quiet
from torchwise.diagnose.health import CheckerHealth
from torchwise.diagnose.objective import Objectives
from torchwise.diagnose.user_code import user_where
from torchwise.diagnose.watch_parts import DeepView, InputsView, PassesView, StepsView



class _Marker:
    """What graph_marker hangs on a graph node: an object that dies with the node (a node takes no weakref)."""
    __slots__ = ("__weakref__",)


def graph_marker(t: torch.Tensor) -> weakref.ref | None:
    """A weak reference that stays alive exactly as long as `t`'s graph node does (None: no node to mark).
    The marker sits in the node's own metadata dict, which autograd never reads and nothing pickles or copies."""
    node = t.grad_fn
    meta = getattr(node, "metadata", None)
    if not isinstance(meta, dict):
        return None
    marker = meta.get("torchwise")
    if marker is None:
        marker = meta["torchwise"] = _Marker()
    return weakref.ref(marker)


class LossesWatcher(Protocol):
    """What LossAndBackward reads (and, for the steps' bookkeeping, writes) of the Watcher."""
    health: CheckerHealth
    deep: DeepView
    inputs: InputsView
    loaders: PassesView
    optim_steps: StepsView
    objective: Objectives
    patches: list[tuple[Any, str, Any]]
    loss_outs: dict[int, tuple[weakref.ref, str]]
    accum: dict[int, dict] | None
    hits: dict[str, int]
    steps: int
    driven: bool
    global_mode: bool
    function_mode: FunctionMode | None   # the TorchFunctionMode while one is entered
    phase_now: str | None

    def hit(self, id: str, *, info: dict | None = None, where: str | None = None) -> None: ...


# the nodes a batch-mean test looks through: a loss made of terms added, subtracted or scaled
_PASS_THROUGH = frozenset({"AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "MulBackward0",
                           "DivBackward0", "NegBackward0"})


class LossAndBackward:
    """The Watcher's part (w.loss_watch) that sees each loss function call (deep steps) and each backward()."""

    def __init__(self, w: LossesWatcher):
        self.w = w
        self.deep = w.deep  # read by every hook: one lookup
        self.backwards = 0
        self.backward_where: str | None = None
        # loss values and per-step evidence
        self.losses: list[torch.Tensor] = []
        self.loss_steps: list[int] = []
        self.loss_where: dict[str, str | None] = {}
        self.cls: dict[str, Any] = {"counts": None, "n": 0, "batches": 0, "single": 0, "weighted": False,
                                    "where": None, "C": None}
        self.bin: dict[str, Any] = {"pos": 0, "neg": 0, "weighted": False, "where": None}
        # retention
        self.bw_ids: dict[int, weakref.ref] = {}
        # (step, the loss tensor, the marker hung on its graph's top node): a loss whose tensor is gone but
        # whose graph node lives on is kept inside another tensor's graph (`total += loss / n`)
        self.bw_refs: list[tuple[int, weakref.ref, weakref.ref | None]] = []
        self.retained_losses = 0
        self.retained_inside = 0
        self.retained_holders: list[str] = []  # the user's containers found holding kept loss tensors
        self._holder_walks = 0                 # referrer walks made (each scans the heap: a few per run)
        self._bound_walks = 0                  # walks that found no growing container
        # backward-in-autocast: backward()/step() calls checked, and those that started with autocast on
        self.autocast_use: dict[str, Any] = {"backward": 0, "step": 0, "backward_in": 0, "step_in": 0,
                                             "where": None, "where_step": None, "dtype": None, "device": None,
                                             "first_step": None}
        # loss-average-wrong-count: the loss tensors returned by a torch loss function with reduction="mean"
        # (deep steps)
        self._mean_loss_outs: dict[int, weakref.ref] = {}
        # beside each loss value: the rows of the training forward before it, and whether it is a batch mean (True,
        # False; None where not looked at: outside deep steps)
        self.loss_rows: list[int | None] = []
        self.loss_is_mean: list[bool | None] = []

    def on_loss(self, kind: str, func: Any, inp: Any, target: Any, kwargs: dict, out: Any, npos: int = 2,
                source: str | None = None) -> None:
        """A loss function returned (deep steps). `source` is where its target comes from (objective.py): only
        targets taken from the data are judged as labels."""
        if not isinstance(inp, torch.Tensor) or not isinstance(target, torch.Tensor):
            return
        if isinstance(out, torch.Tensor):
            followed.remember(self.w.loss_outs, out, "loss")
            if out.dim() == 0 and kwargs.get("reduction", "mean") == "mean" and npos == 2 and \
                    kwargs.get("size_average") is None and kwargs.get("reduce") is None:
                put_newest(self._mean_loss_outs, id(out), weakref.ref(out))
        if self.loss_where.get(kind) is None:
            self.loss_where[kind] = user_where()
        where = self.loss_where[kind]
        capture = self.w.inputs.overfit_capture
        if self.w.inputs.capture_overfit and capture and "loss" not in capture and self.w.steps == 0:
            capture.update(loss=(func, dict(kwargs)), target=target.detach().clone(), where=where)
        cur = self.w.loaders.cur_pass
        if cur is not None and not cur.closed and len(cur.loss_graphs) < 32 and isinstance(out, torch.Tensor) \
                and out.grad_fn is not None and out.numel() == 1:
            cur.loss_graphs.append((cur.n_batches, weakref.ref(out), graph_marker(out)))
        if self.w.phase_now == "eval" or not torch.is_grad_enabled():
            return
        from torchwise.diagnose.checks import losses
        made_by = losses.origin(inp) if kind in ("bcelogits", "bce") else None
        with torch.no_grad():
            losses.inspect(self.w, kind, inp.detach(), target.detach(), kwargs, where, made_by,
                           labelled=source in (None, "data"))

    def token_targets(self, inp: Any, target: Any) -> bool:
        """Whether a cross_entropy/nll_loss call's class targets are token ids (a language model's)."""
        from torchwise.diagnose.checks.losses import looks_like_lm
        if not isinstance(inp, torch.Tensor) or inp.dim() < 1:
            return False
        C = int(inp.shape[1 if inp.dim() >= 2 else 0])
        return looks_like_lm(self.w, inp, target.flatten(), C)

    def patch_backward(self) -> None:
        original = torch.autograd.backward
        watcher, loss_watch = self.w, self

        def backward(tensors, *args, **kwargs):
            watcher.health.maybe_stop()
            try:
                with quiet():
                    loss_watch.on_backward(tensors)
                    if loss_watch.deep.active:
                        retain = (args[1] if len(args) > 1 else kwargs.get("retain_graph")) or \
                            (args[2] if len(args) > 2 else kwargs.get("create_graph"))
                        if isinstance(tensors, torch.Tensor) and not loss_watch.deep.light():
                            watcher.objective.on_backward(tensors)  # (light: a loss made in a forward is untagged)
                        accumulation.accum_on_backward(watcher, tensors, retain_graph=bool(retain))
            except Exception as exc:
                watcher.health.internal_error("backward patch", exc)
            return original(tensors, *args, **kwargs)

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        self.w.accum = {}
        self.w.patches.append((torch.autograd, "backward", original))
        torch.autograd.backward = backward

    def note_autocast(self, what: str, tensor: Any) -> None:
        """backward-in-autocast: a backward() ("backward") or optimizer.step() ("step") starts; is autocast
        still on for the device of `tensor` (the loss, or the optimizer's first parameter)?"""
        if not isinstance(tensor, torch.Tensor):
            return
        use = self.autocast_use
        use[what] += 1
        dtype = autocast_dtype(tensor.device.type)
        if dtype is None:
            return
        use[what + "_in"] += 1
        key = "where" if what == "backward" else "where_step"
        if use[key] is None:
            use[key] = user_where()
        if use["dtype"] is None:
            use.update(dtype=str(dtype).replace("torch.", ""), device=tensor.device.type, first_step=self.w.steps)

    @staticmethod
    def _graph_is_mean(loss: torch.Tensor) -> bool:
        """Whether a loss no torch loss function returned is a mean over its batch: a graph whose terms (through
        sums, differences and scalings) include a mean and no sum (`hinge.mean() + c * w @ w / 2`)."""
        seen_mean, stack, looked = False, [loss.grad_fn], 0
        while stack and looked < 12:
            node = stack.pop()
            looked += 1
            name = type(node).__name__ if node is not None else ""
            if name.startswith("Mean"):
                seen_mean = True
            elif name.startswith("Sum"):
                return False
            elif name in _PASS_THROUGH:
                stack.extend(n for n, _ in node.next_functions if n is not None)
        return seen_mean

    def on_backward(self, tensors: Any) -> None:
        first = tensors if isinstance(tensors, torch.Tensor) else (
            tensors[0] if isinstance(tensors, (tuple, list)) and tensors else None)
        self.note_autocast("backward", first)
        loss = tensors if isinstance(tensors, torch.Tensor) else (
            tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else None)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            return
        self.backwards += 1
        if self.backward_where is None:
            self.backward_where = user_where()
        if not self.w.optim_steps.optimizers and self.w.global_mode:  # no optimizer yet: perhaps a hand-written update follows
            self.w.optim_steps.manual_watch = self.w.optim_steps.manual_since_backward = True
        value = loss.detach().reshape(())
        if len(self.losses) < 200_000 and not self.w.driven:  # driven: end_step() brings the value
            self.losses.append(value)
            self.loss_steps.append(self.w.steps)
            self.loss_rows.append(self.w.models.last_train_rows)
            ref = self._mean_loss_outs.get(id(loss))
            fn_mean = ref is not None and ref() is loss  # a torch loss function's reduction="mean"
            # a light step's "not a mean" may be a loss made inside a forward the function mode did not see
            light = self.deep.active and self.deep.light()
            mean = (fn_mean or self._graph_is_mean(loss)) if self.deep.active else None
            self.loss_is_mean.append(None if mean is False and light else mean)
            cur = self.w.loaders.cur_pass
            if cur is not None and not cur.closed:
                cur.loss_idx.append(len(self.losses) - 1)
                if self.deep.active:
                    if fn_mean:
                        cur.mean_losses += 1
                    elif not light:
                        cur.other_losses += 1
        if self.deep.active:
            if loss.grad_fn is not None:
                ref = weakref.ref(loss)
                self.bw_refs.append((self.w.steps, ref, graph_marker(loss)))
                put_newest(self.bw_ids, id(loss), ref)
            if self.deep.first_nonfinite_loss_step is None and not bool(torch.isfinite(value)):
                self.deep.first_nonfinite_loss_step = self.w.steps
                self.deep.op_hunt = self.w.function_mode is not None  # name the operation at the next forward
        self.w.optim_steps.stepped_since_backward = False
        self.w.optim_steps.backward_since_step += 1

    def check_retained_losses(self) -> None:
        """Loss graphs still alive 3+ rounds of steps after their backward() are being stored somewhere: the
        loss tensor itself (a list, an attribute), or its graph inside another tensor's (`total += loss / n`,
        `avg = 0.9 * avg + 0.1 * loss`), however the total is spelled. A round is one step of every optimizer:
        with three optimizers stepping in turn (InfoGAN's generator, discriminator and info losses), each loss
        variable is rebound only 3 steps later."""
        keep = []
        age = 3 * max(1, len(self.w.optim_steps.optimizers))
        for step, ref, marker in self.bw_refs:
            t = ref()
            inside = t is None and marker is not None and marker() is not None
            if t is None and not inside:
                continue
            if step <= self.w.steps - age:
                if not inside and t.grad_fn is not None and not self._held_by_user(t):
                    continue  # a name rebound at the next pass (or torchwise itself) holds it: memory does not grow
                if inside or t.grad_fn is not None:
                    self.retained_losses += 1
                    self.retained_inside += inside
                    if self.retained_losses >= 3 and not self.w.hits.get("loss-retains-graph"):
                        how = "kept inside a total" if self.retained_inside * 2 > self.retained_losses \
                            else "kept alive"
                        self.w.hit("loss-retains-graph", where=self.backward_where,
                                  info={"how": how, "alive": self.retained_losses})
                continue
            keep.append((step, ref, marker))
        self.bw_refs = keep

    def _held_by_user(self, t: torch.Tensor) -> bool:
        """Whether a container of the user's program that can grow (a list, a dict, ...) holds the loss tensor;
        its name goes into the finding's evidence. A few walks per run: each scans every object."""
        if self._holder_walks >= 6 or self._bound_walks >= 2:
            return False  # two walks found a name rebound each pass (or nothing of the user's): so will the next
        self._holder_walks += 1
        from torchwise.diagnose.holders import holder_of
        holder = holder_of(t)
        if holder is None or not holder.growing:
            self._bound_walks += 1
            return False
        if holder.name not in self.retained_holders:
            self.retained_holders.append(holder.name)
        return True

    def check_eval_loss_graphs(self, info: Any) -> None:
        """An evaluation pass (no step, no backward()) ended: losses of earlier batches whose graph is still
        alive though their tensor is gone are held inside a total built from them (`total += loss * n`):
        every batch's graph stays in memory until the pass ends. Two batches are the evidence: a value kept
        from one batch (the last loss for a printout) is not a total."""
        batches = {batch for batch, ref, marker in info.loss_graphs
                   if batch < info.n_batches and ref() is None and marker is not None and marker() is not None}
        if len(batches) >= 2 and not self.w.hits.get("loss-retains-graph"):
            self.retained_losses += len(batches)
            self.w.hit("loss-retains-graph", where=info.site, info={"how": "evaluation total", "alive": len(batches)})

    def on_accumulate(self, args: tuple, out: Any) -> None:
        # a running total made at an earlier step, not errD = errD_real + errD_fake within one step
        if model_checks.accumulation_retains(self.w, args, out):
            self.w.hit("loss-retains-graph", info={"how": "accumulated into a tensor that keeps the graph"})
