"""Saving and loading model weights safely.

Weights are stored as safetensors (no pickle, so loading a file never runs code). Legacy `.pt`
files are read with `torch.load(weights_only=True)`. State dicts saved from a DDP/DataParallel
model ('module.') or a torch.compile'd one ('_orig_mod.') load into the plain model.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from torchwise.errors import CheckpointError

WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's model inside DDP / DataParallel / torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


def strip_wrapper_prefixes(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove 'module.' / '_orig_mod.' wherever a wrapper inserted them (also nested, e.g. compile inside DDP)."""
    cleaned = {}
    for key, value in state.items():
        parts = [p for p in key.split(".") if p not in ("module", "_orig_mod")] if _has_wrapper(key) else None
        cleaned[".".join(parts) if parts is not None else key] = value
    return cleaned


def _has_wrapper(key: str) -> bool:
    return key.startswith(WRAPPER_PREFIXES) or "._orig_mod." in key


def model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """A state dict ready for safetensors: unwrapped keys, contiguous, no two entries sharing memory."""
    state = unwrap_model(model).state_dict()
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for key, tensor in state.items():
        t = tensor.detach()
        ident = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else None
        # safetensors refuses tensors that share storage (tied weights); store a copy instead.
        if ident is not None and ident in seen:
            t = t.clone()
        elif ident is not None:
            seen.add(ident)
        out[key] = t.contiguous()
    return out


def save_model(model: nn.Module, path: str | Path, metadata: Mapping[str, Any] | None = None) -> Path:
    """Write the model's weights as safetensors (atomically). `metadata` values are stored as JSON strings."""
    return save_state_dict(model_state_dict(model), path, metadata)


def save_state_dict(state: Mapping[str, torch.Tensor], path: str | Path,
                    metadata: Mapping[str, Any] | None = None) -> Path:
    from safetensors.torch import save_file

    from torchwise.train.checkpoint import atomic_write_path

    path = Path(path)
    meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
    tensors = {k: v.detach().cpu().contiguous() for k, v in strip_wrapper_prefixes(state).items()}
    with atomic_write_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta or None)
    return path


def load_state_dict(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Read weights from .safetensors, or from a .pt/.pth file without executing pickled code."""
    path = Path(path)
    if path.is_dir():
        for candidate in ("model.safetensors", "final/model.safetensors"):
            if (path / candidate).is_file():
                path = path / candidate
                break
        else:
            raise CheckpointError(
                "No weights file found in this directory.",
                values={"directory": str(path), "looked for": "model.safetensors, final/model.safetensors"},
                fix="Point to a .safetensors/.pt file, a checkpoint directory or a run directory.",
            )
    if not path.is_file():
        raise CheckpointError("Weights file not found.", values={"path": str(path)}, fix="Check the path.")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device=str(map_location))
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # the unpickler's own message is cryptic; say what it means
        raise CheckpointError(
            "This file cannot be loaded as plain weights (it needs pickled code, or is not a torch file).",
            values={"path": str(path), "reason": str(exc).splitlines()[0]},
            fix="Re-save it from the original code with torch.save(model.state_dict(), ...) or "
            "torchwise.save_model(model, 'model.safetensors'); torchwise never unpickles arbitrary objects.",
        ) from None
    if isinstance(obj, Mapping):
        # common containers: {"state_dict": ...}, {"model": ...}, {"model_state_dict": ...}
        for key in ("state_dict", "model_state_dict", "model"):
            if key in obj and isinstance(obj[key], Mapping):
                obj = obj[key]
                break
        if all(isinstance(v, torch.Tensor) for v in obj.values()):
            return dict(obj)
    raise CheckpointError(
        "The file holds no state dict of tensors.",
        values={"path": str(path), "found": type(obj).__name__},
        fix="Save weights with torch.save(model.state_dict(), path) or torchwise.save_model(model, path).",
    )


def apply_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor], *, source: str = "the checkpoint",
                     strict: bool = True) -> nn.Module:
    """Load `state` into `model`, explaining a mismatch in plain words instead of PyTorch's wall of keys."""
    target = unwrap_model(model)
    state = strip_wrapper_prefixes(state)
    expected = target.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shape_mismatch = [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in expected
        if k in state and tuple(state[k].shape) != tuple(expected[k].shape)
    ]
    if shape_mismatch or (strict and (missing or unexpected)):
        raise CheckpointError(
            f"The weights in {source} do not fit this model.",
            values={
                "missing in file": _short_list(missing),
                "unexpected in file": _short_list(unexpected),
                "shape mismatches": _short_list(shape_mismatch),
                "likely cause": _likely_cause(missing, unexpected, shape_mismatch),
            },
            fix="Build the model with the same architecture and number of classes as when the weights were "
            "saved; to load a backbone only (transfer learning) use strict=False and replace the head.",
        )
    target.load_state_dict(state, strict=False)
    return model


def load_model(path: str | Path, model: nn.Module, *, strict: bool = True,
               map_location: str | torch.device = "cpu") -> nn.Module:
    """Load weights from `path` (file, checkpoint dir or run dir) into `model` and return it."""
    return apply_state_dict(model, load_state_dict(path, map_location), source=str(path), strict=strict)


def _short_list(items: list[str], limit: int = 8) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" ... and {len(items) - limit} more" if len(items) > limit else "")


def _likely_cause(missing: list[str], unexpected: list[str], shapes: list[str]) -> str:
    if shapes and not missing and not unexpected:
        return "same architecture, different sizes (e.g. another number of classes or input channels)"
    if missing and unexpected and len(missing) == len(unexpected):
        return "same number of tensors under different names: a renamed layer or a different wrapper"
    if missing and not unexpected:
        return "the file holds only part of the model (a backbone without a head?)"
    if unexpected and not missing:
        return "the file is from a bigger model, or holds extra entries"
    return "the file comes from a different model architecture"
