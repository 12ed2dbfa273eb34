"""The wrappers around the training step, composed in one place: `compose_step`.

    step = compose_step(core, on_oom="adapt", accumulate=2, device_steps="sync_free",
                        eager_model=model, on_compile_fallback=tell)
    result = step.run(micro_batches, measure_norm=True)      # the Trainer's call, as on a StepRunner

From the inside out:
- `core`: the StepRunner, whose `body` is the one training step; `device_steps` picks how it runs:
  "eager" (finite check read on the host), "sync_free" (on the device), "cuda_graph" (the body
  captured once and replayed, train/speed/graphed_step.py), or None (leave the core's choice as it is);
- `OOMGuard` (on_oom): an out-of-memory step is freed and run again in smaller micro-batches
  ("adapt"), or raised with the remedies ("raise");
- `CompileFallback` (eager_model given): a step that fails inside torch.compile's machinery runs
  again on the eager model, and the run stays eager.
Each layer has the same `run(micro_batches, measure_norm)`, `inner`, and passes every other
attribute (`scaler`, `optimizer`, ...) through to the layer inside it.

OOM recovery, `on_oom="adapt"` and `on_oom="raise"`:
- "adapt": when a step runs out of memory, the step is freed (gradients dropped, the exception and
  its frames released, the CUDA cache emptied), every micro-batch is split in two and the SAME step
  is run again. The step body weights each micro-batch's loss by its share of the samples, so two
  halves accumulate exactly the gradient of the whole: the effective batch and the result stay the
  same (up to float rounding; BatchNorm statistics are the one thing that sees the smaller
  micro-batch). The split is kept for the rest of the run, and said once per halving.
- "raise": the out-of-memory error is raised as before — still a `torch.OutOfMemoryError`, so
  existing `except` clauses keep working — with the seed's remedies and this run's numbers in it.
A step is retried only if the optimizer had not started updating the weights (parameter version
counters unchanged): a half-applied update must not be applied twice.
"""
from __future__ import annotations

import gc
import sys
from typing import Any, Callable

import torch

from torchwise.errors import OutOfMemory, TorchwiseError
from torchwise.train.step.batches import split_parts
from torchwise.train.step.failures import is_compile_failure, is_oom

MODES = ("adapt", "raise")


class TrainingOutOfMemory(OutOfMemory, torch.OutOfMemoryError):
    """Out of memory in a training step, with the remedies; also a torch.OutOfMemoryError."""


def free_memory(optimizer: torch.optim.Optimizer | None = None) -> None:
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def remedies(micro_batch: int | None, accumulate: int | None) -> str:
    half = f"batch {micro_batch // 2} x accumulate {2 * accumulate}" if micro_batch and micro_batch > 1 and accumulate \
        else "a smaller batch with more accumulation"
    return ("in the order to try them: 1) on_oom='adapt' (or by hand: " + half + ": same effective batch, same "
            "result); 2) mixed precision: precision='bf16' (or 'fp16' on GPUs without bf16); 3) gradient "
            "checkpointing: torchwise.train.speed.activation_checkpointing.enable_checkpointing(model); 4) a lighter optimizer "
            "state: SGD with momentum keeps one buffer per weight, Adam two; 5) log loss.item(), not loss, and "
            "del large tensors you keep; `torchwise memory` shows where the memory goes and "
            "`torchwise memory --find-batch-size` the largest batch that fits.")


def split_micro_batches(micro: list[tuple[tuple[Any, ...], Any, int]], parts: int) -> list | None:
    """Each (inputs, target, n) into `parts` pieces along the batch dimension; None if impossible."""
    from torchwise.train.step.contract import StepContract

    out = []
    for inputs, target, n in micro:
        k = min(parts, n)
        if k <= 1:
            out.append((inputs, target, n))
            continue
        ins, tgts = split_parts(inputs, k), split_parts(target, k)
        if ins is None or tgts is None:
            return None
        out += [(i, t, StepContract.size(i, t)) for i, t in zip(ins, tgts)]
    return out


class OOMGuard:
    """Wraps a StepRunner; see the module docstring."""

    def __init__(self, runner: Any, mode: str = "adapt", notify: Callable[[str], None] | None = None,
                 accumulate: int = 1):
        if mode not in MODES:
            raise TorchwiseError("Unknown on_oom mode.", values={"on_oom": mode, "allowed": ", ".join(MODES)},
                                 fix="'adapt' halves the micro-batch and doubles accumulation; 'raise' stops.")
        self.runner, self.mode, self.accumulate = runner, mode, accumulate
        self.notify = notify or (lambda text: print(text, file=sys.stderr, flush=True))
        self.parts = 1          # each loader batch is run as this many micro-batches
        self.steps = 0

    @property
    def scaler(self):
        return self.runner.scaler

    @property
    def inner(self) -> Any:
        return self.runner

    def __getattr__(self, name: str) -> Any:  # everything else the Trainer may read from its runner
        runner = self.__dict__.get("runner")
        if runner is None:
            raise AttributeError(name)
        return getattr(runner, name)

    def run(self, micro_batches: list, measure_norm: bool):
        self.steps += 1
        micro = micro_batches
        if self.parts > 1:
            micro = split_micro_batches(micro_batches, self.parts) or micro_batches
        # Only "adapt" retries a step, and only it needs to know whether the optimizer had already written
        # to the weights; the default "raise" adds nothing to the step's hot path.
        params = self.runner.params if self.mode == "adapt" else []
        while True:
            versions = [p._version for p in params]
            failure = None
            try:
                return self.runner.run(micro, measure_norm)
            except Exception as exc:  # noqa: BLE001 - anything that is not an OOM is re-raised at once
                if not is_oom(exc):
                    raise
                failure = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                if self.mode == "raise":
                    raise self._error(failure, micro, "on_oom='raise'") from exc
            # Out of the except block: the exception, its traceback and the frames' tensors are gone.
            free_memory(self.runner.optimizer)
            largest = max(n for _, _, n in micro)
            if any(p._version != v for p, v in zip(params, versions)):
                raise self._error(failure, micro, "the optimizer had already started updating the weights, so "
                                                  "the step cannot be repeated safely")
            if getattr(getattr(self.runner, "dist", None), "enabled", False):
                raise self._error(failure, micro, "under DDP every rank must take the same number of "
                                                  "micro-steps; adapting on one rank alone would hang the others")
            smaller = split_micro_batches(micro, 2) if largest > 1 else None
            if smaller is None:
                raise self._error(failure, micro, "the micro-batch cannot be split further")
            self.parts *= 2
            new_largest = max(n for _, _, n in smaller)
            total = sum(n for _, _, n in micro)
            self.notify(f"torchwise: step {self.steps}: out of memory with micro-batch {largest}; continuing with "
                        f"micro-batch {new_largest} x {self.accumulate * self.parts} accumulation steps "
                        f"(effective batch {total} and results unchanged). ({failure})")
            micro = smaller

    def _error(self, failure: str | None, micro: list, why: str) -> TrainingOutOfMemory:
        largest = max(n for _, _, n in micro)
        return TrainingOutOfMemory(
            f"Out of memory in training step {self.steps} ({why}).",
            values={"error": failure or "-", "micro-batch": largest,
                    "accumulation": self.accumulate * self.parts,
                    "effective batch": sum(n for _, _, n in micro)},
            fix=remedies(largest, self.accumulate * self.parts))


def compile_failure_reason(exc: BaseException) -> str:
    """'Type: first line' of the error that explains a compile failure (BackendCompilerFailed wraps the
    backend's own error, which is the one that explains)."""
    inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc
    return f"{type(inner).__name__}: {(str(inner).strip().splitlines() or [''])[0][:300]}"


class CompileFallback:
    """fast "compile": a step that fails inside torch.compile's machinery (not in the model's own code)
    is run again on `eager_model`, and every later step too. `on_fallback(exc, reason)` is told once
    (the Trainer's message and fast plan)."""

    def __init__(self, inner: Any, core: Any, eager_model: torch.nn.Module,
                 on_fallback: Callable[[BaseException, str], None] | None = None):
        self.inner, self.core, self.eager_model = inner, core, eager_model
        self.on_fallback = on_fallback or (lambda exc, reason: print(
            f"torchwise: torch.compile failed, training continues in eager mode ({type(exc).__name__} - {reason})",
            file=sys.stderr, flush=True))

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def run(self, micro_batches: list, measure_norm: bool):
        try:
            return self.inner.run(micro_batches, measure_norm=measure_norm)
        except Exception as exc:

            if self.eager_model is None or not is_compile_failure(exc):
                raise
            self.core.model, self.eager_model = self.eager_model, None
            self.on_fallback(exc, compile_failure_reason(exc))
            return self.inner.run(micro_batches, measure_norm=measure_norm)


DEVICE_STEPS = ("eager", "sync_free", "cuda_graph")


def compose_step(core: Any, *, on_oom: str = "raise", accumulate: int = 1, device_steps: str | None = None,
                 eager_model: torch.nn.Module | None = None,
                 on_compile_fallback: Callable[[BaseException, str], None] | None = None,
                 notify: Callable[[str], None] | None = None) -> Any:
    """The training step with its wrappers, in their one order (see the module docstring). `core`: a
    StepRunner; `device_steps`: "eager" | "sync_free" | "cuda_graph" (what the fast plan allows; the
    caller checks the blockers: fast.device_step_blocker, graphed_step.graph_blocker) or None to keep
    the core's; `eager_model`: the uncompiled model when `core.model` is torch.compile's."""
    if device_steps is not None:
        if device_steps not in DEVICE_STEPS:
            raise TorchwiseError("Unknown device_steps.", values={"device_steps": device_steps,
                                                                  "allowed": ", ".join(DEVICE_STEPS)},
                                 fix="'eager' works everywhere; 'sync_free' and 'cuda_graph' need a fused optimizer.")
        core.sync_free = device_steps != "eager"
        if device_steps == "cuda_graph":
            from torchwise.train.speed.graphed_step import GraphedStep

            core.graphed = GraphedStep(core)
        else:
            core.graphed = None
    step: Any = OOMGuard(core, on_oom, notify, accumulate=accumulate)
    if eager_model is not None:
        step = CompileFallback(step, core, eager_model, on_compile_fallback)
    return step


def find_layer(step: Any, kind: type) -> Any:
    """The layer of type `kind` in a composed step (None if it has none)."""
    while step is not None:
        if isinstance(step, kind):
            return step
        step = getattr(step, "inner", None)
    return None
