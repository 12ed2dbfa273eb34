"""The process-wide switches a run turns, put back as they were when fit() returns.

fit() turns global torch switches: deterministic algorithms (and the cuBLAS workspace variable
they need), cudnn.benchmark, TF32 matmuls. Left behind, they change the numbers of whatever the
user's script computes next (a TF32 matmul differs from fp32 in the fourth digit) with nothing to
show why. So fit() captures them first and restores them on the way out, also when it raises.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"


def cuda_matmul_tf32() -> bool | None:
    """Whether cuBLAS float32 matmuls may use TF32, or None where the script set it through the
    newer per-backend fp32_precision API: reading the older flag then raises (mixing the APIs)."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        return None


@dataclass(frozen=True)
class ProcessSwitches:
    deterministic: bool
    deterministic_warn_only: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    cuda_matmul_tf32: bool | None
    cublas_workspace: str | None

    @classmethod
    def capture(cls) -> "ProcessSwitches":
        return cls(deterministic=torch.are_deterministic_algorithms_enabled(),
                   deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                   cudnn_benchmark=torch.backends.cudnn.benchmark,
                   cudnn_deterministic=torch.backends.cudnn.deterministic,
                   cuda_matmul_tf32=cuda_matmul_tf32(),
                   cublas_workspace=os.environ.get(_WORKSPACE))

    def restore(self) -> None:
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.deterministic_warn_only)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        if self.cuda_matmul_tf32 is not None and cuda_matmul_tf32() != self.cuda_matmul_tf32:
            torch.backends.cuda.matmul.allow_tf32 = self.cuda_matmul_tf32
        if self.cublas_workspace is None:
            os.environ.pop(_WORKSPACE, None)
        else:
            os.environ[_WORKSPACE] = self.cublas_workspace
