"""`torchwise doctor` on this machine: real computations, and the right verdicts without a GPU."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from torchwise.env import cuda_info
from torchwise.env.doctor import PROBLEM, WARNING, format_report, run_doctor
from torchwise.env.driver import check_driver

NO_GPU = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def report():
    return run_doctor()


def test_doctor_json_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torchwise", "doctor", "--json"], capture_output=True, text=True,
                          timeout=300)
    data = json.loads(proc.stdout)
    assert proc.returncode == (0 if data["ok"] else 1)
    names = [c["name"] for c in data["checks"]]
    for name in ("python", "torch", "torchvision", "numpy", "driver", "device cpu", "distributed",
                 "pinned memory", "dataloader"):
        assert name in names
    checks = {c["name"]: c for c in data["checks"]}
    assert all(c["status"] in ("ok", "warning", "problem", "info") for c in data["checks"])
    assert all(c["fix"] for c in data["checks"] if c["status"] in ("warning", "problem"))
    cpu = checks["device cpu"]
    assert cpu["status"] == "ok" and cpu["details"]["fp32_max_rel_err"] < 1e-4 and cpu["details"]["bf16_ok"]
    assert checks["distributed"]["details"]["backends"]["gloo"]
    assert checks["distributed"]["status"] == "ok" and "gloo all_reduce" in checks["distributed"]["summary"]
    assert checks["dataloader"]["status"] == "ok" and checks["dataloader"]["details"]["startup_s"] < 30
    assert data["environment"]["torch"] == torch.__version__
    assert data["environment"]["torch_cuda"] == torch.version.cuda


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


def _driver(max_cuda, version="535.104.05"):
    return cuda_info.DriverInfo(driver_version=version, cuda_driver_api=max_cuda, sources=["test"])


def test_driver_against_wheel_verdicts():
    # Only torch.version.cuda is read by this check; these stand in for wheels of other builds.
    wheel_128 = SimpleNamespace(version=SimpleNamespace(cuda="12.8", hip=None))
    too_old = check_driver(wheel_128, _driver((11, 4), "470.82"))
    assert too_old.status == PROBLEM
    assert "supports up to CUDA 11.4" in too_old.summary and "570.26" in too_old.fix
    minor = check_driver(wheel_128, _driver((12, 2)))
    assert minor.status == WARNING and "minor-version compatibility" in minor.summary and "cu121" in minor.fix
    assert check_driver(wheel_128, _driver((12, 9))).status == "ok"
    cpu_wheel = SimpleNamespace(version=SimpleNamespace(cuda=None, hip=None))
    unused = check_driver(cpu_wheel, _driver((12, 4)))
    assert unused.status == WARNING and "CPU-only build" in unused.summary and "cu124" in unused.fix


@pytest.mark.skipif(not torch.version.cuda or not NO_GPU, reason="needs a CUDA build without a visible GPU")
def test_cuda_visible_devices_hiding_every_gpu_is_named(monkeypatch):
    from torchwise.env.devices import check_cuda_devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (check,) = check_cuda_devices(torch, cuda_info.DriverInfo())
    assert check.status == WARNING and "CUDA_VISIBLE_DEVICES" in check.summary


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
