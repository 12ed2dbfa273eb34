"""Device and numeric precision choice."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from torchwise.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def choose_device(device: str | torch.device = "auto") -> torch.device:
    """'auto' picks cuda > mps > cpu; an explicit device is checked to exist."""
    if isinstance(device, torch.device):
        dev = device
    elif device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    else:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ConfigError("Unknown device.", values={"device": device, "reason": str(exc)},
                              fix="Use 'auto', 'cpu', 'cuda', 'cuda:1' or 'mps'.") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("A CUDA device was asked for, but PyTorch sees none.",
                              values={"device": str(dev), "torch": torch.__version__, "built with CUDA": torch.version.cuda},
                              fix="Run `torchwise doctor` to see why, or use device='cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError("That CUDA device does not exist.",
                              values={"device": str(dev), "devices present": torch.cuda.device_count()},
                              fix=f"Use an index below {torch.cuda.device_count()}.")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("MPS was asked for but is not available.", values={"device": str(dev)}, fix="Use device='cpu'.")
    return dev


@dataclass(frozen=True)
class Precision:
    name: str                       # "fp32" | "bf16" | "fp16"
    autocast_dtype: torch.dtype | None
    use_grad_scaler: bool           # fp16 needs loss scaling; bf16 has fp32's exponent range and does not

    def autocast(self, device: torch.device, cache: bool = True):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        # cache=False inside CUDA-graph capture: cached casts would be tensors from outside the graph
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype, cache_enabled=cache)

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler:
        """Always a GradScaler; a disabled one (fp32, bf16) passes scale/unscale_/step/update through."""
        return torch.amp.GradScaler(device.type, enabled=self.use_grad_scaler)

    def make_scaler(self, device: torch.device):
        """The GradScaler when loss scaling is used, else None."""
        return self.grad_scaler(device) if self.use_grad_scaler else None


def choose_precision(requested: str, device: torch.device) -> Precision:
    """'auto': bf16 autocast on a GPU that supports it, fp16 + GradScaler on one that doesn't, fp32 elsewhere."""
    if requested not in PRECISIONS:
        raise ConfigError("Unknown precision.", values={"precision": requested, "allowed": ", ".join(PRECISIONS)},
                          fix="Use one of the allowed values ('auto' picks the best for the device).")
    if requested == "auto":
        if device.type == "cuda":
            requested = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            requested = "fp32"
    if requested == "fp32":
        return Precision("fp32", None, False)
    if requested == "bf16":
        return Precision("bf16", torch.bfloat16, False)
    return Precision("fp16", torch.float16, True)
