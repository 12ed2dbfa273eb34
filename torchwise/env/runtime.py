"""The doctor's checks of what training needs around the compute: a process group (a 1-rank gloo all_reduce),
pinned host-to-GPU copies and DataLoader worker processes."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from torchwise.env.report import INFO, OK, PROBLEM, WARNING, Check


def check_distributed(torch) -> Check:
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


def check_pinned_memory(torch) -> Check:
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


def check_dataloader(torch, workers: int = 2) -> Check:
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
