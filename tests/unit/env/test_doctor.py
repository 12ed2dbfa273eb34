"""`torchwise doctor` on this machine: real computations, and the right verdicts without a GPU."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from torchwise.env import cuda_info
from torchwise.env.doctor import PROBLEM, WARNING
from torchwise.env.driver import check_driver


NO_GPU = not torch.cuda.is_available()


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
