"""`torchwise doctor` on this machine: real computations (it starts processes to probe the devices), and the
right verdicts without a GPU."""
from __future__ import annotations


import pytest
import torch

from torchwise.env import cuda_info
from torchwise.env.doctor import WARNING, format_report, run_doctor


NO_GPU = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def report():
    return run_doctor()


@pytest.mark.skipif(not NO_GPU, reason="checks the GPU-less verdicts")
def test_doctor_says_the_right_things_without_a_gpu(report):
    checks = {c.name: c for c in report.checks}
    assert report.ok  # no GPU is not a problem: everything runs on the CPU
    assert not any(name.startswith("device cuda") for name in checks)
    assert checks["pinned memory"].status == "info"
    if torch.version.cuda:  # a CUDA wheel on a machine without a GPU (this CI machine)
        gpu = checks["gpu"]
        assert gpu.status == WARNING and "torch.cuda.is_available() is False" in gpu.summary
        assert f"CUDA {torch.version.cuda} build" in gpu.summary
        driver = checks["driver"]
        assert driver.status == WARNING and "no NVIDIA driver" in driver.summary
        assert "CPU-only" in driver.fix and cuda_info.MIN_DRIVER_FOR_CUDA.get(
            cuda_info.parse_cuda_version(torch.version.cuda), "") in driver.fix
    text = format_report(report)
    assert "verdict: WORKS, WITH WARNINGS" in text or "verdict: OK" in text
    assert "fix: " in text


@pytest.mark.gpu
@pytest.mark.skipif(NO_GPU, reason="needs a CUDA device")
def test_doctor_on_gpu(report):
    checks = {c.name: c for c in report.checks}
    gpu = checks["device cuda:0"]
    assert gpu.status in ("ok", "warning"), gpu.summary
    assert gpu.details["fp32_max_rel_err"] < 1e-4
    assert checks["driver"].status in ("ok", "warning")
    assert checks["pinned memory"].status == "ok"
    print(format_report(report))
