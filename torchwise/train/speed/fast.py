"""`fast=`: the speed switches, each reported at the start of a run with the reason when it is off.

    fast="auto"   per device: channels_last for convolutional models, TF32 matmuls, a fused
                  optimizer, sync-free steps and side-stream prefetch of the next batch on GPUs;
                  torch.compile and CUDA graphs stay off by default (compile time outweighs short
                  runs; graphs are new), turn them on with fast=[..., "compile"] / [..., "cuda_graph"]
    fast="off"    none of them
    fast=[...]    exactly these parts: "channels_last", "tf32", "fused_optimizer", "compile",
                  "prefetch", "sync_free", "cuda_graph"

sync_free: the step is queued on the device without waiting for it; the host reads the loss once,
at the end. A non-finite loss or gradient skips the update on the device, through the fused
optimizer's found_inf (so it needs one; fp16's GradScaler keeps its own sync).
cuda_graph: the whole sync-free step (forward, backward, clipping, update) is captured once as a
CUDA graph and replayed; steps it cannot replay (a short last batch, a deep check) run eagerly.
See train/speed/graphed_step.py.

bf16 autocast is `precision=` (auto picks it on GPUs that have it).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch import nn

from torchwise.errors import ConfigError
from torchwise.models.structure import has_convolutions
from torchwise.train.speed.process_switches import cuda_matmul_tf32
from torchwise.train.distributed.sharding import is_sharded

PARTS = ("channels_last", "tf32", "fused_optimizer", "compile", "prefetch", "sync_free", "cuda_graph")


@dataclass
class FastPlan:
    on: set[str] = field(default_factory=set)
    why_off: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{p} on" if p in self.on else f"{p} off ({self.why_off.get(p, 'not asked')})" for p in PARTS]
        return "fast: " + ", ".join(parts)


def plan_fast(fast: str | Iterable[str], device: torch.device, model: nn.Module) -> FastPlan:
    if isinstance(fast, str) and fast not in ("auto", "off"):
        fast = [fast]
    if not isinstance(fast, str):
        asked = list(fast)
        unknown = [p for p in asked if p not in PARTS]
        if unknown:
            close = difflib.get_close_matches(unknown[0], PARTS, n=1)
            raise ConfigError("Unknown fast-path part.", values={"fast": asked, "allowed": ", ".join(PARTS),
                                                                "did you mean": close[0] if close else "-"},
                              fix="Use 'auto', 'off' or a list of the allowed parts.")
        plan = FastPlan(on=set(asked), why_off={p: "not asked" for p in PARTS if p not in asked})
        if "tf32" in plan.on and cuda_matmul_tf32() is None:
            plan.on.discard("tf32")
            plan.why_off["tf32"] = _SCRIPT_TF32
        if "cuda_graph" in plan.on and device.type != "cuda":
            plan.on.discard("cuda_graph")
            plan.why_off["cuda_graph"] = f"needs a CUDA device (training on {device.type})"
        return plan
    plan = FastPlan()
    if fast == "off":
        plan.why_off = {p: "fast='off'" for p in PARTS}
        return plan
    cuda = device.type == "cuda"
    convolutional = has_convolutions(model, dims=(2, 3))  # channels_last is a 4-D / 5-D memory format
    if cuda and convolutional:
        plan.on.add("channels_last")
    else:
        plan.why_off["channels_last"] = "no convolution in the model" if cuda else "pays off on GPUs"
    if not (cuda and torch.cuda.get_device_capability(device)[0] >= 8):
        plan.why_off["tf32"] = "needs an Ampere or newer GPU"
    elif cuda_matmul_tf32() is None:
        plan.why_off["tf32"] = _SCRIPT_TF32
    else:
        plan.on.add("tf32")
    if cuda:
        plan.on.add("fused_optimizer")
    else:
        plan.why_off["fused_optimizer"] = "pays off on GPUs"
    for part in ("prefetch", "sync_free"):
        if cuda:
            plan.on.add(part)
        else:
            plan.why_off[part] = "pays off on GPUs"
    plan.why_off["compile"] = "opt-in: fast=[..., 'compile']"
    plan.why_off["cuda_graph"] = "opt-in: fast=[..., 'cuda_graph']" if cuda else "needs a CUDA device"
    return plan


def apply_to_model(plan: FastPlan, model: nn.Module) -> None:
    if "channels_last" in plan.on:
        model.to(memory_format=torch.channels_last)
    if "tf32" in plan.on:
        # cuBLAS matmuls only (the older flag: set_float32_matmul_precision would also switch oneDNN's
        # CPU matmuls). Convolutions already run in TF32 by default (cudnn.allow_tf32) unless the
        # script turned that off, which is then respected. fit() puts the flag back on return.
        torch.backends.cuda.matmul.allow_tf32 = True


_SCRIPT_TF32 = "left as your script set it (through the per-backend fp32_precision API)"


def to_channels_last(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(x.contiguous(memory_format=torch.channels_last) if isinstance(x, torch.Tensor) and x.ndim == 4
                 else x for x in inputs)


def compile_model(model: nn.Module, options: dict[str, Any] | None = None) -> nn.Module:
    return torch.compile(model, **(options or {}))


def device_step_blocker(optimizer: torch.optim.Optimizer, scaler: Any, model: nn.Module) -> str | None:
    """Why sync-free steps cannot run with this set-up (None: they can)."""
    if not all(group.get("fused") for group in optimizer.param_groups):
        return "needs a fused optimizer (fused_optimizer, or fused=True in yours)"
    if scaler is not None:
        return "fp16's GradScaler reads its overflow flag on the host (use bf16)"
    if is_sharded(model):
        return "not with FSDP"
    return None
