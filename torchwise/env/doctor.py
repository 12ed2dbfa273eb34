"""`torchwise doctor`: does this install really work?

`torch.cuda.is_available()` returning True proves little: the first real kernel can still fail
("no kernel image is available"), the wheel's CUDA can be newer than the driver, DataLoader workers
can die on a tiny /dev/shm. So every item here *runs* something small and checks the answer:
a matmul + conv forward and backward on each device compared with a float64 CPU reference, a
1-rank gloo all_reduce, a pinned copy, a 2-worker DataLoader.

Every check returns a `Check` with a verdict: ok, warning (works, but something costs you speed or
will bite later), problem (something is broken; `fix` says what to do) or info (not applicable).
This module runs them in order; the checks live by what they check: packages.py (Python, torch,
torchvision, numpy, optional packages), driver.py (the NVIDIA driver against the wheel), devices.py
(CPU, CUDA, mps; the workload in compute.py), runtime.py (distributed, pinned memory, DataLoader
workers); report.py holds `Check`, `DoctorReport` and the text of a report.
"""
from __future__ import annotations

import platform
import time
from typing import Any, Callable

from torchwise.env import cuda_info
from torchwise.env.devices import check_cpu, check_cuda_devices, check_mps
from torchwise.env.driver import check_driver
from torchwise.env.packages import check_numpy, check_optional, check_python, check_torch, check_torchvision
from torchwise.env.report import INFO, OK, PROBLEM, WARNING, Check, DoctorReport, format_report
from torchwise.env.runtime import check_dataloader, check_distributed, check_pinned_memory

# The doctor's public face: `from torchwise.env.doctor import run_doctor, format_report, PROBLEM` keeps working.
__all__ = ["INFO", "OK", "PROBLEM", "WARNING", "Check", "DoctorReport", "format_report", "run_doctor"]


def run_doctor(*, dataloader_workers: int = 2, progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Run every check. Never raises: a check that crashes is reported as a problem."""
    start = time.perf_counter()
    checks: list[Check] = [check_python()]
    try:
        import torch
    except Exception as exc:
        checks.append(Check("torch", PROBLEM, f"torch cannot be imported: {type(exc).__name__}: {str(exc)[:300]}",
                            fix="pip install torch (in a fresh virtual environment)"))
        return DoctorReport(checks, {"python": platform.python_version()}, time.perf_counter() - start)
    driver = cuda_info.driver_info()
    steps: list[tuple[str, Callable[[], Check | list[Check]]]] = [
        ("torch", lambda: check_torch(torch)),
        ("torchvision", lambda: check_torchvision(torch)),
        ("numpy", lambda: check_numpy(torch)),
        ("onnx", lambda: check_optional("onnx", "needed for `torchwise export`")),
        ("onnxruntime", lambda: check_optional("onnxruntime", "needed to verify exports and for `torchwise predict`")),
        ("driver", lambda: check_driver(torch, driver)),
        ("device cpu", lambda: check_cpu(torch)),
        ("gpu", lambda: check_cuda_devices(torch, driver)),
        ("device mps", lambda: check_mps(torch)),
        ("distributed", lambda: check_distributed(torch)),
        ("pinned memory", lambda: check_pinned_memory(torch)),
        ("dataloader", lambda: check_dataloader(torch, dataloader_workers)),
    ]
    for name, step in steps:
        if progress:
            progress(name)
        try:
            result = step()
        except Exception as exc:  # a bug in a check must not hide the other checks
            result = Check(name, PROBLEM, f"the check itself crashed: {type(exc).__name__}: {str(exc)[:300]}",
                           details={"error": str(exc)[:1000]})
        checks.extend(result if isinstance(result, list) else [result])
    return DoctorReport(checks, _environment(torch, checks, driver), time.perf_counter() - start)


def _environment(torch, checks: list[Check], driver: cuda_info.DriverInfo) -> dict[str, Any]:
    """What a bug report needs to know about this machine, beside the checks."""
    env = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": next((c.details.get("cudnn") for c in checks if c.name == "torch"), None),
        "torchvision": next((c.details.get("version") for c in checks if c.name == "torchvision"), None),
        "numpy": next((c.details.get("version") for c in checks if c.name == "numpy"), None),
        "driver": driver.as_dict(),
        "cuda_available": bool(torch.cuda.is_available()),
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    from torchwise.version import __version__

    env["torchwise"] = __version__
    return env
