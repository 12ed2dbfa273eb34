"""Seeds, determinism switches and RNG state capture for exact resume."""
from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

_MASK63 = (1 << 63) - 1


def derive_seed(*parts: int) -> int:
    """Mix integers into one 63-bit seed (splitmix64 steps): nearby inputs give unrelated seeds.

    Used for the data order of an epoch and for per-sample augmentation seeds, so that both are a
    pure function of (seed, epoch, position) and a resumed run sees exactly what an uninterrupted
    one would have seen.
    """
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
        x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        x = z ^ (z >> 31)
    return x & _MASK63


def seed_everything(seed: int) -> None:
    """Seed python, numpy, torch and every CUDA device."""
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63):
        from torchwise.errors import ConfigError

        raise ConfigError("seed_everything needs an integer seed in [0, 2**63).", values={"seed": repr(seed)},
                          fix="Pass e.g. torchwise.seed_everything(0), the seed you give the Trainer (seed=0).")
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)  # also seeds all CUDA devices (lazily if CUDA is not initialised yet)


def torch_was_seeded() -> bool:
    """Whether torch's CPU generator was seeded in this process (torch.manual_seed, seed_everything).

    torch seeds that generator at start-up with 64 random bits from the OS, so a model built before any
    manual_seed gets different initial weights in every process. manual_seed(s) makes s the generator's
    initial_seed(): a seed below 2**32 is one a person or a program chose (a start-up seed falls there
    with probability 2**-32)."""
    return torch.initial_seed() < 2**32


def unseeded_model_note(seed: int) -> str:
    """What to say when the model was built before torch's generator was seeded (see torch_was_seeded)."""
    return (f"torchwise: note: torch's random generator was not seeded before the model was built (torch seeds it "
            f"from the OS at start-up), so the weights the model drew at random (a new model, a new head) differ "
            f"in every run; seed={seed} seeds the run from fit() on (dropout, data order, augmentations), not what "
            f"was made before it. For a reproducible run, call torchwise.seed_everything({seed}) before building "
            f"the model.")


def configure_determinism(deterministic: bool | None, cuda: bool = True, cli: bool = False) -> str:
    """Switch between reproducible kernels and fast ones; returns a sentence for the run log that names the
    setting as the user wrote it (`cli`: train.deterministic in the run's config.yaml; else the Trainer's
    deterministic=) and what is in effect. None follows the process: a script that called
    torch.use_deterministic_algorithms(True) keeps its deterministic kernels (fit() puts every switch back
    when it returns)."""
    setting = (f"train.deterministic={str(deterministic).lower()}" if cli
               else f"deterministic={deterministic}" + (" (the default)" if deterministic is None else ""))
    to_turn_on = "--set train.deterministic=true" if cli else "deterministic=True"
    already = torch.are_deterministic_algorithms_enabled()
    if deterministic is None and already:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        return f"{setting}: deterministic algorithms on (your script turned them on)"
    if deterministic:
        # cuBLAS picks non-deterministic reduction orders unless its workspace is fixed; PyTorch
        # raises at the first matmul under use_deterministic_algorithms when this is missing.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        return f"{setting}: deterministic algorithms on" + (
            " (CUBLAS_WORKSPACE_CONFIG set, cudnn.benchmark off)" if cuda else "")
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    # Fixed input shapes are the common case; benchmark mode picks the fastest conv kernels.
    torch.backends.cudnn.benchmark = True
    kernels = "fast kernels, cudnn.benchmark on" if cuda else "fast kernels"
    return f"{setting}: {kernels} ({to_turn_on} for bit-reproducible ones)"


def capture_rng_state() -> dict[str, Any]:
    """All RNG states in a form torch.load(weights_only=True) accepts (no numpy objects, no pickled code)."""
    version, mt, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(mt), gauss],
        "numpy": [np_name, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((np_name, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
