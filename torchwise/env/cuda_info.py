"""What the machine offers CUDA-wise, found without needing a working GPU.

torch can only say "no GPU" when something is wrong; it cannot say *why*. The NVIDIA driver can be
asked directly (libcuda's cuDriverGetVersion, /proc/driver/nvidia/version, nvidia-smi), so the
doctor can tell "no driver", "driver too old for this wheel" and "GPU hidden by
CUDA_VISIBLE_DEVICES" apart.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

# Minimum Linux driver that ships a given CUDA release (NVIDIA's CUDA toolkit release notes,
# "toolkit driver version" table). Since CUDA 11, a driver of the same major version runs newer
# minor releases through minor-version compatibility, but PTX JIT and a few features need at least
# the listed driver.
MIN_DRIVER_FOR_CUDA: dict[tuple[int, int], str] = {
    (11, 8): "520.61.05",
    (12, 1): "530.30.02",
    (12, 4): "550.54.14",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}
# CUDA variants torch wheels have been published for, newest first (used to suggest a wheel a
# given driver can run).
WHEEL_CUDA_VARIANTS: list[tuple[int, int]] = [(13, 0), (12, 9), (12, 8), (12, 6), (12, 4), (12, 1), (11, 8)]


@dataclass
class DriverInfo:
    driver_version: str | None = None          # e.g. "550.54.14"
    cuda_driver_api: tuple[int, int] | None = None   # highest CUDA the driver supports, e.g. (12, 4)
    sources: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)     # names from nvidia-smi, if it ran
    errors: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.driver_version is not None or self.cuda_driver_api is not None

    def as_dict(self) -> dict:
        return {
            "driver_version": self.driver_version,
            "driver_max_cuda": format_cuda_version(self.cuda_driver_api),
            "sources": self.sources,
            "gpus": self.gpus,
            "errors": self.errors,
        }


def format_cuda_version(version: tuple[int, int] | None) -> str | None:
    """(12, 4) -> "12.4", the way nvidia-smi and torch.version.cuda write it; None stays None."""
    return None if version is None else f"{version[0]}.{version[1]}"


def parse_cuda_version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _from_libcuda(info: DriverInfo) -> None:
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        try:
            status = lib.cuDriverGetVersion(ctypes.byref(version))
        except AttributeError:
            continue
        if status == 0 and version.value > 0:
            info.cuda_driver_api = (version.value // 1000, (version.value % 1000) // 10)
            info.sources.append(f"{name}: cuDriverGetVersion")
        return


def _from_proc(info: DriverInfo) -> None:
    path = "/proc/driver/nvidia/version"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if match:
        info.driver_version = info.driver_version or match.group(1)
        info.sources.append(path)


def _from_nvidia_smi(info: DriverInfo, timeout: float = 10.0) -> None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        info.errors.append(f"nvidia-smi: {exc}")
        return
    if out.returncode != 0:
        info.errors.append(f"nvidia-smi exited {out.returncode}: {(out.stderr or out.stdout).strip()[:300]}")
        return
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if parts and parts[0]:
            info.gpus.append(parts[0])
        if len(parts) > 1 and not info.driver_version:
            info.driver_version = parts[1]
    info.sources.append("nvidia-smi")
    if info.cuda_driver_api is None:
        try:
            head = subprocess.run([exe], capture_output=True, text=True, timeout=timeout).stdout
        except (OSError, subprocess.TimeoutExpired):
            head = ""
        info.cuda_driver_api = parse_cuda_version((re.search(r"CUDA Version:\s*([\d.]+)", head) or [None, None])[1])


def driver_info() -> DriverInfo:
    info = DriverInfo()
    _from_libcuda(info)
    _from_proc(info)
    _from_nvidia_smi(info)
    return info


def best_wheel_for_driver(driver_cuda: tuple[int, int]) -> tuple[int, int] | None:
    """The newest published wheel CUDA variant this driver runs at full compatibility."""
    for variant in WHEEL_CUDA_VARIANTS:
        if variant <= driver_cuda:
            return variant
    return None


def install_command(variant: tuple[int, int] | None) -> str:
    if variant is None:
        return "pip install torch  # a CPU-only build"
    tag = f"cu{variant[0]}{variant[1]}"
    return (f"pip install --force-reinstall torch torchvision --index-url <PyTorch wheel index>/{tag}"
            f"  (the '{tag}' variant; the PyTorch 'Get Started' page gives the exact index)")


def visible_devices_env() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")
