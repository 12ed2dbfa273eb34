"""LOCAL 'pretrained' weight files: a model's state dict with a 1000-class head, saved as a user would."""
from __future__ import annotations

from pathlib import Path
import torch
from safetensors.torch import save_file
from torchwise.models import build_model


def imagenet_file(tmp_path: Path, name: str, kind: str = "safetensors", seed: int = 0) -> tuple[Path, dict]:
    """(path, state): the state dict of `name` built with a 1000-class head, saved as `kind`."""
    torch.manual_seed(seed)
    state = {k: v.clone() for k, v in build_model(name, 1000).state_dict().items()}
    path = tmp_path / f"{name.replace(':', '_')}-1000.{'safetensors' if kind == 'safetensors' else 'pth'}"
    if kind == "safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path, state
