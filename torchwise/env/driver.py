"""The doctor's check of the NVIDIA driver against the CUDA the torch wheel was built for."""
from __future__ import annotations

from torchwise.env import cuda_info
from torchwise.env.report import INFO, OK, PROBLEM, WARNING, Check


def check_driver(torch, driver: cuda_info.DriverInfo) -> Check:
    wheel = cuda_info.parse_cuda_version(torch.version.cuda)
    details = driver.as_dict() | {"wheel_cuda": torch.version.cuda,
                                  "CUDA_VISIBLE_DEVICES": cuda_info.visible_devices_env()}
    if wheel is None and getattr(torch.version, "hip", None):
        return Check("driver", INFO, f"ROCm {torch.version.hip} build: the AMD GPU driver is checked by the device test",
                     details=details)
    if wheel is None:
        if driver.found and driver.cuda_driver_api:
            variant = cuda_info.best_wheel_for_driver(driver.cuda_driver_api)
            return Check("driver", WARNING,
                         f"NVIDIA driver {driver.driver_version or '?'} "
                         f"(CUDA {cuda_info.format_cuda_version(driver.cuda_driver_api)}) "
                         "is installed, but this torch is a CPU-only build: the GPU is not used",
                         fix=cuda_info.install_command(variant), details=details)
        return Check("driver", INFO, "CPU-only torch build and no NVIDIA driver: nothing to match", details=details)
    need = cuda_info.MIN_DRIVER_FOR_CUDA.get(wheel)
    if not driver.found:
        return Check("driver", WARNING,
                     f"torch is a CUDA {torch.version.cuda} build, but no NVIDIA driver was found "
                     "(no libcuda, no /proc/driver/nvidia, no nvidia-smi): it will run on the CPU only",
                     fix=(f"if this machine has an NVIDIA GPU, install driver >= {need or 'the one for CUDA ' + torch.version.cuda}"
                          " and check `nvidia-smi`; if it has none, the CPU-only torch wheel is several GB smaller"
                          " (pip install torch --index-url <PyTorch wheel index>/cpu)"),
                     details=details)
    have = driver.cuda_driver_api
    drv = driver.driver_version or "?"
    if have is None:
        return Check("driver", WARNING, f"NVIDIA driver {drv} found, but the CUDA version it supports could not be read",
                     fix="run `nvidia-smi` and compare its 'CUDA Version' with torch.version.cuda", details=details)
    have_text = cuda_info.format_cuda_version(have)
    details["driver_max_cuda"] = have_text
    if have[0] < wheel[0]:
        variant = cuda_info.best_wheel_for_driver(have)
        return Check("driver", PROBLEM,
                     f"driver {drv} supports up to CUDA {have_text}, but torch is built for CUDA "
                     f"{torch.version.cuda}: CUDA calls will fail",
                     fix=f"either upgrade the NVIDIA driver to >= {need or '?'} or install the torch build that fits the "
                         f"driver: {cuda_info.install_command(variant)}", details=details)
    if have < wheel:
        return Check("driver", WARNING,
                     f"driver {drv} supports CUDA {have_text}, older than the wheel's CUDA {torch.version.cuda}; "
                     "it runs through minor-version compatibility, but PTX JIT and some features are unavailable",
                     fix=f"upgrade the NVIDIA driver to >= {need or '?'} or "
                         f"{cuda_info.install_command(cuda_info.best_wheel_for_driver(have))}",
                     details=details)
    return Check("driver", OK, f"driver {drv} supports CUDA {have_text} >= wheel's CUDA {torch.version.cuda}",
                 details=details)
