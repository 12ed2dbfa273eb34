"""`torchwise doctor`: does this install really work?

`torch.cuda.is_available()` returning True proves little: the first real kernel can still fail
("no kernel image is available"), the wheel's CUDA can be newer than the driver, DataLoader workers
can die on a tiny /dev/shm. So every item here *runs* something small and checks the answer:
a matmul + conv forward and backward on each device compared with a float64 CPU reference, a
1-rank gloo all_reduce, a pinned copy, a 2-worker DataLoader.

Every check returns a `Check` with a verdict: ok, warning (works, but something costs you speed or
will bite later), problem (something is broken; `fix` says what to do) or info (not applicable).
"""
from __future__ import annotations

import importlib
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from torchwise.env import cuda_info

OK, WARNING, PROBLEM, INFO = "ok", "warning", "problem", "info"
_ORDER = {OK: 0, INFO: 0, WARNING: 1, PROBLEM: 2}


@dataclass
class Check:
    name: str
    status: str
    summary: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    checks: list[Check]
    environment: dict[str, Any]
    elapsed_s: float

    @property
    def counts(self) -> dict[str, int]:
        counts = {OK: 0, WARNING: 0, PROBLEM: 0, INFO: 0}
        for check in self.checks:
            counts[check.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return self.counts[PROBLEM] == 0

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts,
            "environment": self.environment,
            "checks": [asdict(c) for c in self.checks],
            "elapsed_s": round(self.elapsed_s, 3),
        }


# --------------------------------------------------------------------------- versions

def _check_python() -> Check:
    version = platform.python_version()
    if sys.version_info < (3, 10):
        return Check("python", PROBLEM, f"Python {version} is older than torchwise supports",
                     fix="use Python 3.10 or newer", details={"version": version})
    return Check("python", OK, f"Python {version} ({platform.python_implementation()}, {sys.executable})",
                 details={"version": version, "executable": sys.executable})


def _check_torch(torch) -> Check:
    build = "CPU-only build"
    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda} build"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip} build"
    cudnn = None
    try:
        if torch.backends.cudnn.is_available():
            v = torch.backends.cudnn.version()
            cudnn = f"{v // 10000}.{(v % 10000) // 100}.{v % 100}" if v and v >= 10000 else str(v)
    except Exception:  # cuDNN library present in the wheel but not loadable
        cudnn = None
    details = {"version": torch.__version__, "cuda": torch.version.cuda,
               "hip": getattr(torch.version, "hip", None), "cudnn": cudnn,
               "debug": bool(getattr(torch.version, "debug", False)),
               "num_threads": torch.get_num_threads()}
    summary = f"torch {torch.__version__} ({build}" + (f", cuDNN {cudnn})" if cudnn else ")")
    if torch.version.cuda and cudnn is None:
        return Check("torch", WARNING, summary + "; cuDNN cannot be loaded, convolutions on GPU will be slow or fail",
                     fix="reinstall torch so that its bundled cuDNN wheel (nvidia-cudnn-cu*) is installed", details=details)
    if details["debug"]:
        return Check("torch", WARNING, summary + "; this is a DEBUG build (much slower)",
                     fix="install a release build of torch", details=details)
    return Check("torch", OK, summary, details=details)


def _expected_torchvision(torch_version: str) -> str | None:
    # torchvision 0.(minor+15) pairs with torch 2.minor (0.15 <-> 2.0 ... 0.29 <-> 2.14).
    parts = torch_version.split("+")[0].split(".")
    if len(parts) < 2 or parts[0] != "2" or not parts[1].isdigit():
        return None
    return f"0.{int(parts[1]) + 15}"


def _check_torchvision(torch) -> Check:
    try:
        import torchvision
    except Exception as exc:  # ImportError, or a binary mismatch raising at import
        return Check("torchvision", WARNING, f"torchvision cannot be imported ({type(exc).__name__}: {exc})"[:300],
                     fix=f"pip install torchvision=={_expected_torchvision(torch.__version__) or '<matching>'}.* "
                         "(needed for image tasks)", details={"error": str(exc)[:500]})
    version = torchvision.__version__
    expected = _expected_torchvision(torch.__version__)
    details = {"version": version, "expected_series": expected}
    try:  # a compiled torchvision op: fails with "operator torchvision::nms does not exist" on a mismatch
        boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
        keep = torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5)
        assert keep.tolist() == [0]
    except Exception as exc:
        return Check("torchvision", PROBLEM, f"torchvision {version}: its compiled operators do not work with "
                     f"torch {torch.__version__} ({type(exc).__name__}: {str(exc)[:200]})",
                     fix=f"pip install torchvision=={expected or '<the release matching your torch>'}.*",
                     details=details | {"error": str(exc)[:500]})
    if expected and not version.startswith(expected):
        return Check("torchvision", WARNING, f"torchvision {version} is not the release paired with torch "
                     f"{torch.__version__} (expected {expected}.x)",
                     fix=f"pip install torchvision=={expected}.*", details=details)
    return Check("torchvision", OK, f"torchvision {version} (compiled ops work)", details=details)


def _check_numpy(torch) -> Check:
    try:
        import numpy as np
    except Exception as exc:
        return Check("numpy", PROBLEM, f"numpy cannot be imported: {exc}", fix="pip install numpy")
    details = {"version": np.__version__}
    try:
        arr = np.arange(6, dtype=np.float32).reshape(2, 3)
        back = torch.from_numpy(arr).mul(2).numpy()
        assert float(back.sum()) == 30.0
    except Exception as exc:
        return Check("numpy", PROBLEM, f"numpy {np.__version__} does not interoperate with torch "
                     f"{torch.__version__}: {str(exc)[:200]}",
                     fix="pip install 'numpy<2' or upgrade torch (torch built against numpy 1 fails with numpy 2)",
                     details=details | {"error": str(exc)[:500]})
    return Check("numpy", OK, f"numpy {np.__version__} (torch.from_numpy round trip works)", details=details)


def _check_optional(name: str, purpose: str) -> Check:
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        return Check(name, INFO, f"{name} not installed ({purpose})", fix=f"pip install {name}",
                     details={"error": str(exc)[:300]})
    return Check(name, OK, f"{name} {getattr(module, '__version__', '?')}",
                 details={"version": getattr(module, "__version__", None)})


# --------------------------------------------------------------------------- driver vs wheel

def _check_driver(torch, driver: cuda_info.DriverInfo) -> Check:
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
                         f"NVIDIA driver {driver.driver_version or '?'} (CUDA {cuda_info._fmt(driver.cuda_driver_api)}) "
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
    details["driver_max_cuda"] = cuda_info._fmt(have)
    if have[0] < wheel[0]:
        variant = cuda_info.best_wheel_for_driver(have)
        return Check("driver", PROBLEM,
                     f"driver {drv} supports up to CUDA {cuda_info._fmt(have)}, but torch is built for CUDA "
                     f"{torch.version.cuda}: CUDA calls will fail",
                     fix=f"either upgrade the NVIDIA driver to >= {need or '?'} or install the torch build that fits the "
                         f"driver: {cuda_info.install_command(variant)}", details=details)
    if have < wheel:
        return Check("driver", WARNING,
                     f"driver {drv} supports CUDA {cuda_info._fmt(have)}, older than the wheel's CUDA {torch.version.cuda}; "
                     "it runs through minor-version compatibility, but PTX JIT and some features are unavailable",
                     fix=f"upgrade the NVIDIA driver to >= {need or '?'} or {cuda_info.install_command(cuda_info.best_wheel_for_driver(have))}",
                     details=details)
    return Check("driver", OK, f"driver {drv} supports CUDA {cuda_info._fmt(have)} >= wheel's CUDA {torch.version.cuda}",
                 details=details)


# --------------------------------------------------------------------------- real compute per device

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


def _compute_check(torch, device: str) -> tuple[bool, str, dict]:
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


def _check_cpu(torch) -> Check:
    name = "device cpu"
    try:
        ok, where, details = _compute_check(torch, "cpu")
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


def _check_cuda_devices(torch, driver: cuda_info.DriverInfo) -> list[Check]:
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
        ok, where, compute = _compute_check(torch, device)
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


def _check_mps(torch) -> list[Check]:
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        return []
    try:
        ok, where, details = _compute_check(torch, "mps")
    except Exception as exc:
        return [Check("device mps", PROBLEM, f"Apple GPU (mps) failed: {str(exc)[:300]}",
                      fix="update macOS and torch; set PYTORCH_ENABLE_MPS_FALLBACK=1 for missing ops")]
    status = OK if ok else PROBLEM
    return [Check("device mps", status, f"Apple GPU: matmul+conv fwd/bwd max rel err {details['fp32_max_rel_err']:.1e}",
                  fix=None if ok else "update macOS and torch", details=details)]


# --------------------------------------------------------------------------- distributed, pinned memory, workers

def _check_distributed(torch) -> Check:
    import torch.distributed as dist

    if not dist.is_available():
        return Check("distributed", WARNING, "torch.distributed is not available in this build",
                     fix="install an official torch wheel (this build was compiled without distributed support)")
    backends = {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                "mpi": dist.is_mpi_available()}
    details: dict[str, Any] = {"backends": backends}
    names = ", ".join(k for k, v in backends.items() if v) or "none"
    if not backends["gloo"]:
        return Check("distributed", WARNING, f"backends: {names}; gloo (the CPU backend) is missing",
                     fix="install an official torch wheel", details=details)
    if dist.is_initialized():
        return Check("distributed", OK, f"backends: {names} (a process group is already running; not re-tested)",
                     details=details)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            store = dist.FileStore(os.path.join(tmp, "store"), 1)
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
            try:
                t = torch.ones(4)
                dist.all_reduce(t)
                assert t.tolist() == [1.0] * 4
            finally:
                dist.destroy_process_group()
            details["gloo_all_reduce_ms"] = round((time.perf_counter() - start) * 1000, 1)
    except Exception as exc:
        return Check("distributed", PROBLEM, f"a 1-rank gloo all_reduce failed: {type(exc).__name__}: {str(exc)[:300]}",
                     fix="set GLOO_SOCKET_IFNAME to a working interface (e.g. lo or eth0) and check that the hostname "
                         "resolves (`getent hosts $(hostname)`)", details=details | {"error": str(exc)[:1000]})
    nccl_note = ""
    if backends["nccl"] and not torch.cuda.is_available():
        nccl_note = " (nccl is built in but needs a GPU)"
    return Check("distributed", OK, f"backends: {names}{nccl_note}; 1-rank gloo all_reduce works "
                 f"({details['gloo_all_reduce_ms']} ms)", details=details)


def _check_pinned_memory(torch) -> Check:
    if not torch.cuda.is_available():
        return Check("pinned memory", INFO, "not applicable without a GPU (pin_memory only speeds up host-to-GPU copies; "
                     "torchwise turns it off on the CPU)", details={"applicable": False})
    try:
        host = torch.randn(1 << 20).pin_memory()
        start = time.perf_counter()
        dev = host.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        assert torch.equal(dev.cpu(), host)
        gbps = host.numel() * 4 / max(elapsed, 1e-9) / 1e9
    except Exception as exc:
        return Check("pinned memory", WARNING, f"pinned host memory does not work: {str(exc)[:300]}",
                     fix="raise the locked-memory limit (ulimit -l unlimited; docker --ulimit memlock=-1) "
                         "or train with pin_memory=False", details={"error": str(exc)[:1000]})
    return Check("pinned memory", OK, f"pinned 4 MB host-to-GPU copy works ({gbps:.1f} GB/s)",
                 details={"copy_gbps": gbps})


class _SquaresDataset:
    """Module-level so that it pickles under the spawn/forkserver start methods."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        import torch

        return torch.full((4,), float(index) ** 2)


def _shm_free_gb() -> float | None:
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize / 1e9


def _check_dataloader(torch, workers: int = 2) -> Check:
    import multiprocessing

    from torch.utils.data import DataLoader

    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
    shm = _shm_free_gb()
    details: dict[str, Any] = {"workers": workers, "start_method": method,
                               "shm_free_gb": None if shm is None else round(shm, 2)}
    try:
        start = time.perf_counter()
        loader = DataLoader(_SquaresDataset(), batch_size=4, num_workers=workers, timeout=60)
        batches = list(loader)
        elapsed = time.perf_counter() - start
        total = float(sum(b.sum() for b in batches))
        assert abs(total - 4 * sum(i * i for i in range(8))) < 1e-6
    except Exception as exc:
        fix = "use num_workers=0 to train now; "
        if shm is not None and shm < 1.0:
            fix += "/dev/shm is tiny: run the container with --shm-size=8g (or --ipc=host)"
        else:
            fix += ("under spawn, the dataset must be picklable and the script must guard its entry point with "
                    "`if __name__ == '__main__':`")
        return Check("dataloader", PROBLEM, f"{workers}-worker DataLoader failed ({method}): {type(exc).__name__}: "
                     f"{str(exc)[:300]}", fix=fix, details=details | {"error": str(exc)[:1000]})
    details["startup_s"] = round(elapsed, 3)
    text = f"{workers} workers ({method}) started and returned correct batches in {elapsed:.2f} s"
    if shm is not None:
        text += f"; /dev/shm {shm:.1f} GB free"
    if shm is not None and shm < 1.0:
        return Check("dataloader", WARNING, text + " (too small: workers crash with 'bus error' on image batches)",
                     fix="run the container with --shm-size=8g or --ipc=host", details=details)
    if elapsed > 10:
        return Check("dataloader", WARNING, text + " (slow start: each epoch pays it unless persistent_workers=True)",
                     fix="use persistent_workers=True; avoid heavy imports at the top of the training script",
                     details=details)
    return Check("dataloader", OK, text, details=details)


# --------------------------------------------------------------------------- driver

def run_doctor(*, dataloader_workers: int = 2, progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Run every check. Never raises: a check that crashes is reported as a problem."""
    start = time.perf_counter()
    checks: list[Check] = [_check_python()]
    try:
        import torch
    except Exception as exc:
        checks.append(Check("torch", PROBLEM, f"torch cannot be imported: {type(exc).__name__}: {str(exc)[:300]}",
                            fix="pip install torch (in a fresh virtual environment)"))
        return DoctorReport(checks, {"python": platform.python_version()}, time.perf_counter() - start)
    driver = cuda_info.driver_info()
    steps: list[tuple[str, Callable[[], Check | list[Check]]]] = [
        ("torch", lambda: _check_torch(torch)),
        ("torchvision", lambda: _check_torchvision(torch)),
        ("numpy", lambda: _check_numpy(torch)),
        ("onnx", lambda: _check_optional("onnx", "needed for `torchwise export`")),
        ("onnxruntime", lambda: _check_optional("onnxruntime", "needed to verify exports and for `torchwise predict`")),
        ("driver", lambda: _check_driver(torch, driver)),
        ("device cpu", lambda: _check_cpu(torch)),
        ("gpu", lambda: _check_cuda_devices(torch, driver)),
        ("device mps", lambda: _check_mps(torch)),
        ("distributed", lambda: _check_distributed(torch)),
        ("pinned memory", lambda: _check_pinned_memory(torch)),
        ("dataloader", lambda: _check_dataloader(torch, dataloader_workers)),
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
    return DoctorReport(checks, env, time.perf_counter() - start)


def format_report(report: DoctorReport) -> str:
    env = report.environment
    lines = [f"torchwise doctor: torch {env.get('torch', '?')} on {env.get('platform', platform.platform())}, "
             f"Python {env.get('python', '?')}", ""]
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        lines.append(f"  {check.status:<8} {check.name:<{width}}  {check.summary}")
        if check.fix and check.status in (WARNING, PROBLEM):
            lines.append(f"  {'':<8} {'':<{width}}  fix: {check.fix}")
    counts = report.counts
    verdict = "OK" if counts[PROBLEM] == 0 and counts[WARNING] == 0 else ("PROBLEMS FOUND" if counts[PROBLEM] else "WORKS, WITH WARNINGS")
    lines += ["", f"verdict: {verdict}: {counts[OK]} ok, {counts[WARNING]} warning(s), {counts[PROBLEM]} problem(s)"
                  f" ({report.elapsed_s:.1f} s)"]
    return "\n".join(lines)
