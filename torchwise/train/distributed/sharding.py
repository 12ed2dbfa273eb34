"""FSDP (fully_shard) for models that do not fit on one device, with sharded checkpoints.

Parameters, gradients and optimizer state are split across ranks. Checkpoints keep them split
(torch.distributed.checkpoint writes one file per rank into `sharded/`), and loading reshards, so a
run saved on N ranks resumes on M ranks, or on a single process. The full weights are gathered
only where a single file is wanted: `model.safetensors` in checkpoints and `final/`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn


def _fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:  # torch 2.4 / 2.5
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def is_sharded(model: nn.Module) -> bool:
    return hasattr(model, "set_requires_gradient_sync")  # what fully_shard adds to a module


def shard_model(model: nn.Module, device: torch.device) -> nn.Module:
    """Shard every direct child that holds parameters (the model's blocks), then the root."""
    fully_shard = _fully_shard()
    mesh = None
    if device.type == "cpu":
        from torch.distributed.device_mesh import init_device_mesh
        import torch.distributed as dist

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    kwargs = {"mesh": mesh} if mesh is not None else {}
    for child in model.children():
        if any(p.requires_grad for p in child.parameters()):
            fully_shard(child, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """All weights gathered on rank 0 (on the CPU); empty on the other ranks. Collective: call on all ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_sharded(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Each rank writes its own shards of the model and optimizer state into `path`. Collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path))


def load_sharded(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load (and reshard to this run's layout) what save_sharded wrote; works without a process group too."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
