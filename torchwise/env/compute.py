"""The small real workload every device runs: matmul + conv forward and backward, compared with float64 on the CPU.

A device that reports itself available can still compute wrong numbers or fail on its first kernel;
only running something and checking the answer tells.
"""
from __future__ import annotations

import time
from typing import Any


def _workload(torch, device: str, dtype) -> list:
    """matmul + conv2d forward and backward; returns outputs and gradients on the CPU in float64."""
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(64, 96, generator=gen)
    b = torch.randn(96, 48, generator=gen)
    x = torch.randn(4, 3, 20, 20, generator=gen)
    w = torch.randn(8, 3, 3, 3, generator=gen) * 0.2
    tensors = [t.to(device=device, dtype=dtype).requires_grad_(True) for t in (a, b, x, w)]
    a_, b_, x_, w_ = tensors
    mm = a_ @ b_
    conv = F.relu(F.conv2d(x_, w_, padding=1))
    loss = mm.square().mean() + conv.square().mean()
    loss.backward()
    out = [mm, conv, a_.grad, b_.grad, x_.grad, w_.grad]
    return [t.detach().to("cpu", torch.float64) for t in out]


def _compare(ref: list, got: list, tol: float) -> tuple[bool, float, str]:
    names = ["matmul", "conv", "d matmul/dA", "d matmul/dB", "d conv/dx", "d conv/dw"]
    worst, worst_name = 0.0, names[0]
    for name, r, g in zip(names, ref, got):
        if not bool(g.isfinite().all()):
            return False, float("inf"), name
        err = float((r - g).abs().max() / r.abs().max().clamp_min(1e-12))
        if err > worst:
            worst, worst_name = err, name
    return worst <= tol, worst, worst_name


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


def check_compute(torch, device: str) -> tuple[bool, str, dict]:
    details: dict[str, Any] = {}
    ref = _workload(torch, "cpu", torch.float64)
    saved = None
    if device.startswith("cuda"):
        # TF32 would make fp32 matmuls differ by ~1e-3; compare true fp32, report TF32 separately.
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        got = _workload(torch, device, torch.float32)  # warm-up (kernel load, cuDNN init)
        _sync(torch, device)
        start = time.perf_counter()
        got = _workload(torch, device, torch.float32)
        _sync(torch, device)
        details["workload_ms"] = round((time.perf_counter() - start) * 1000, 2)
    finally:
        if saved is not None:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    ok, err, where = _compare(ref, got, tol=1e-4)
    details |= {"fp32_max_rel_err": err, "fp32_worst": where, "fp32_ok": ok}
    try:
        bf = _workload(torch, device, torch.bfloat16)
        bf_ok, bf_err, bf_where = _compare(ref, bf, tol=5e-2)
        details |= {"bf16_ok": bf_ok, "bf16_max_rel_err": bf_err}
    except Exception as exc:  # bf16 conv unsupported on this device/build
        details |= {"bf16_ok": False, "bf16_error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return ok, where, details
