"""The doctor's device checks: the CPU, each CUDA GPU (or why none is seen) and Apple's mps, each running the
reference workload of compute.py."""
from __future__ import annotations

import os
import platform
from typing import Any

from torchwise.env import cuda_info
from torchwise.env.compute import check_compute
from torchwise.env.report import INFO, OK, PROBLEM, WARNING, Check


def check_cpu(torch) -> Check:
    name = "device cpu"
    try:
        ok, where, details = check_compute(torch, "cpu")
    except Exception as exc:
        return Check(name, PROBLEM, f"matmul/conv on the CPU failed: {type(exc).__name__}: {str(exc)[:300]}",
                     fix="reinstall torch in a fresh virtual environment", details={"error": str(exc)[:1000]})
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    details |= {"threads": torch.get_num_threads(), "cores_available": cores, "cores_total": os.cpu_count(),
                "memory": _host_memory(), "capability": platform.processor() or platform.machine()}
    mem = details["memory"]
    mem_txt = f", RAM {mem['available_gb']:.1f}/{mem['total_gb']:.1f} GB free" if mem else ""
    text = (f"matmul+conv fwd/bwd match the float64 reference (max rel err {details['fp32_max_rel_err']:.1e}), "
            f"bf16 {'ok' if details.get('bf16_ok') else 'FAILED'}, {details['threads']} threads on "
            f"{cores} available cores{mem_txt}")
    if not ok:
        return Check(name, PROBLEM, f"CPU results are wrong: {where} differs from the float64 reference by "
                     f"{details['fp32_max_rel_err']:.1e} (relative)",
                     fix="reinstall torch; check for an overclocked/unstable CPU or a broken BLAS (MKL/OpenBLAS) override "
                         "in LD_LIBRARY_PATH / LD_PRELOAD", details=details)
    if details["threads"] > cores:
        return Check(name, WARNING, text + f"; torch uses {details['threads']} threads for {cores} cores "
                     "(oversubscription slows everything down)",
                     fix=f"set OMP_NUM_THREADS={cores} or torch.set_num_threads({cores})", details=details)
    return Check(name, OK, text, details=details)


def _host_memory() -> dict | None:
    try:
        info = {}
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                key, value = line.split(":", 1)
                info[key] = int(value.split()[0]) * 1024
        return {"total_gb": info["MemTotal"] / 1e9, "available_gb": info["MemAvailable"] / 1e9}
    except (OSError, KeyError, ValueError):
        return None


def _arch_supported(torch, capability: tuple[int, int]) -> bool | None:
    try:
        archs = torch.cuda.get_arch_list()
    except Exception:
        return None
    if not archs:
        return None
    major, minor = capability
    sm = major * 10 + minor
    for arch in archs:
        kind, _, num = arch.partition("_")
        num = num.rstrip("af")
        if not num.isdigit():
            continue
        value = int(num)
        if kind == "sm" and value // 10 == major and value <= sm:
            return True  # same major: binary compatible
        if kind == "compute" and value <= sm:
            return True  # PTX can be JIT-compiled forward
    return False


def check_cuda_devices(torch, driver: cuda_info.DriverInfo) -> list[Check]:
    checks = []
    visible = cuda_info.visible_devices_env()
    if not torch.version.cuda and not getattr(torch.version, "hip", None):
        return [Check("gpu", INFO, "CPU-only torch build: no GPU checks", details={"available": False})]
    try:
        available = torch.cuda.is_available()
        count = torch.cuda.device_count()
    except Exception as exc:
        return [Check("gpu", PROBLEM, f"torch.cuda failed to initialise: {str(exc)[:300]}",
                      fix="check `nvidia-smi`; reboot after a driver upgrade; match the driver and the wheel (see 'driver')",
                      details={"error": str(exc)[:1000]})]
    if not available or count == 0:
        details = {"available": False, "device_count": count, "CUDA_VISIBLE_DEVICES": visible,
                   "driver_found": driver.found, "nvidia_smi_gpus": driver.gpus}
        if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
            return [Check("gpu", WARNING, f"no GPU visible: CUDA_VISIBLE_DEVICES={visible!r} hides every GPU",
                          fix="unset CUDA_VISIBLE_DEVICES (or set it to the GPU index you want, e.g. 0)", details=details)]
        if driver.gpus:
            return [Check("gpu", PROBLEM, f"nvidia-smi sees {', '.join(driver.gpus)} but torch sees no GPU",
                          fix="the driver and the torch wheel disagree (see 'driver'); reboot if the driver was just "
                              "upgraded; inside a container, run it with --gpus all", details=details)]
        return [Check("gpu", WARNING,
                      f"no GPU: torch.cuda.is_available() is False (torch is a CUDA {torch.version.cuda} build); "
                      "training runs on the CPU",
                      fix="nothing to do if this machine has no GPU; otherwise install the NVIDIA driver (see 'driver') "
                          "and, in a container, pass the GPU in (docker run --gpus all)",
                      details=details)]
    for index in range(count):
        checks.append(_check_one_cuda(torch, index))
    return checks


def _check_one_cuda(torch, index: int) -> Check:
    device = f"cuda:{index}"
    name = f"device {device}"
    details: dict[str, Any] = {}
    try:
        props = torch.cuda.get_device_properties(index)
        capability = (props.major, props.minor)
        details |= {"gpu": props.name, "capability": f"{props.major}.{props.minor}",
                    "memory_total_gb": props.total_memory / 1e9,
                    "multiprocessors": props.multi_processor_count}
    except Exception as exc:
        return Check(name, PROBLEM, f"cannot read the properties of {device}: {str(exc)[:300]}",
                     fix="check `nvidia-smi`", details={"error": str(exc)[:1000]})
    arch_ok = _arch_supported(torch, capability)
    details["arch_list"] = torch.cuda.get_arch_list()
    try:
        ok, where, compute = check_compute(torch, device)
        details |= compute
        free, total = torch.cuda.mem_get_info(index)
        details |= {"memory_free_gb": free / 1e9}
    except Exception as exc:
        msg = str(exc)
        fix = "check `nvidia-smi`, the driver ('driver' line) and that no other process holds the GPU"
        if "no kernel image" in msg or arch_ok is False:
            fix = (f"this torch wheel has no kernels for compute capability {props.major}.{props.minor} "
                   f"(it has {', '.join(details['arch_list'])}); install a torch build that supports this GPU")
        return Check(name, PROBLEM, f"{props.name}: the first real kernel failed: {type(exc).__name__}: {msg[:300]}",
                     fix=fix, details=details | {"error": msg[:1000]})
    details["tf32_supported"] = capability >= (8, 0)
    details["tf32_matmul_enabled"] = bool(torch.backends.cuda.matmul.allow_tf32)
    details["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    try:
        details["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
    except Exception:
        details["bf16_supported"] = capability >= (8, 0)
    text = (f"{props.name} (sm_{props.major}{props.minor}, {details['memory_free_gb']:.1f}/{details['memory_total_gb']:.1f}"
            f" GB free): matmul+conv fwd/bwd match the CPU (max rel err {details['fp32_max_rel_err']:.1e}, "
            f"{details['workload_ms']} ms), bf16 {'yes' if details['bf16_supported'] else 'no'}, "
            f"TF32 {'yes' if details['tf32_supported'] else 'no'}")
    if not ok:
        return Check(name, PROBLEM, f"{props.name} computes WRONG results: {where} differs from the CPU by "
                     f"{details['fp32_max_rel_err']:.1e} (relative)",
                     fix="faulty GPU, overclock or driver bug: run `nvidia-smi -q -d ECC`, try another driver", details=details)
    if arch_ok is False:
        return Check(name, WARNING, text + "; the wheel has no native kernels for this GPU (PTX JIT at start-up)",
                     fix="install a torch build that lists this architecture in torch.cuda.get_arch_list()", details=details)
    if details["memory_free_gb"] < 0.5 * details["memory_total_gb"]:
        return Check(name, WARNING, text + "; more than half of its memory is already used by other processes",
                     fix="see `nvidia-smi` for the processes holding it", details=details)
    return Check(name, OK, text, details=details)


def check_mps(torch) -> list[Check]:
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        return []
    try:
        ok, where, details = check_compute(torch, "mps")
    except Exception as exc:
        return [Check("device mps", PROBLEM, f"Apple GPU (mps) failed: {str(exc)[:300]}",
                      fix="update macOS and torch; set PYTORCH_ENABLE_MPS_FALLBACK=1 for missing ops")]
    status = OK if ok else PROBLEM
    return [Check("device mps", status, f"Apple GPU: matmul+conv fwd/bwd max rel err {details['fp32_max_rel_err']:.1e}",
                  fix=None if ok else "update macOS and torch", details=details)]
