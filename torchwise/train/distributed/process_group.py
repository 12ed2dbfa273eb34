"""Running the Trainer on several processes (DDP), started by torchrun.

The Trainer detects torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) by itself,
joins the process group (nccl on GPUs, gloo on CPU), takes one device per rank and wraps the model
in DistributedDataParallel. Every decision that must be the same on all ranks (skip a non-finite
step, stop early) is reduced across ranks first, so no rank is ever left waiting in a collective.
"""
from __future__ import annotations

import atexit
import datetime
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from torchwise.errors import TorchwiseError


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_from_torchrun() -> DistEnv:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistEnv()
    return DistEnv(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))


def setup(device_arg: Any, timeout_s: float) -> tuple[DistEnv, Any]:
    """Join the process group when started by torchrun; returns the env and the device to use."""
    env = env_from_torchrun()
    if not env.enabled:
        return env, device_arg
    use_cuda = torch.cuda.is_available() and str(device_arg) in ("auto", "cuda")
    device = torch.device("cuda", env.local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s))
        # evaluate()/predict() may still be called after fit(), so the group lives until the process ends
        atexit.register(leave)
    return env, device


def leave(*, together: bool = False) -> None:
    """Tear the process group down while the interpreter is still whole.

    A DDP model that is only garbage (a reference cycle) is otherwise freed during interpreter
    finalization; its reducer's and gloo's threads then reach for the GIL that is gone, and the rank
    dies with "terminate called without an active exception" (SIGABRT) after a run that succeeded.
    So: collect that garbage first, then destroy the group. `together` waits for every rank first,
    so no rank leaves while another still works (only after a run that succeeded: a failed rank's
    peers must not wait for it).
    """
    if not dist.is_initialized():
        return
    import gc

    gc.collect()
    if together:
        _collective(dist.barrier)
    dist.destroy_process_group()
    gc.collect()


STRATEGIES = ("auto", "ddp", "fsdp")


def wrap_model(model: torch.nn.Module, env: DistEnv, device: torch.device, strategy: str) -> torch.nn.Module:
    """The module the train step calls: DDP around the model, or the model itself sharded in place (FSDP)."""
    if not env.enabled:
        return model
    if strategy == "fsdp":
        from torchwise.train.distributed.sharding import shard_model

        return shard_model(model, device)
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def sum_across(values: list[float], env: DistEnv, device: torch.device) -> list[float]:
    """Element-wise sum over ranks (one collective for several numbers)."""
    if not env.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    _collective(dist.all_reduce, t, op=dist.ReduceOp.SUM)
    return t.tolist()


def max_across(value: int, env: DistEnv, device: torch.device) -> int:
    if not env.enabled:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    _collective(dist.all_reduce, t, op=dist.ReduceOp.MAX)
    return int(t.item())


def gather_objects(obj: Any, env: DistEnv) -> list[Any]:
    if not env.enabled:
        return [obj]
    out: list[Any] = [None] * env.world_size
    _collective(dist.all_gather_object, out, obj)
    return out


def decide_on_main(decide: Callable[[], Any], env: DistEnv) -> Any:
    """`decide()` on rank 0 alone (its result there, None elsewhere). A TorchwiseError it raises is raised on
    every rank: each ends with the same clear error, instead of waiting in its next collective for a rank
    that has left (used for what only rank 0 may do: take the run folder's lock, check the folder)."""
    result, refusal = None, None
    if env.is_main:
        try:
            result = decide()
        except TorchwiseError as exc:
            refusal = exc
    if env.enabled:
        shared = gather_objects(refusal, env)[0]
        refusal = refusal if env.is_main else shared
    if refusal is not None:
        raise refusal
    return result


def barrier(env: DistEnv) -> None:
    if env.enabled:
        _collective(dist.barrier)


def _collective(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, dist.DistBackendError) as exc:  # gloo/nccl say "connection closed" or time out
        raise TorchwiseError(
            "Lost contact with another training process (a rank died or stopped answering).",
            values={"this rank": dist.get_rank() if dist.is_initialized() else "-", "reason": str(exc).splitlines()[0]},
            fix="Look above for the first rank that failed (torchrun prints its exit code). Checkpoints on disk are "
                "complete; rerun with resume to continue.") from exc


def free_port(preferred: int = 29500) -> int:
    """`preferred` when nothing listens on it, else a port the OS picks (no 'Address already in use')."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise TorchwiseError("No free TCP port for the process group.", fix="Pass --master HOST:PORT with a free port.")


def launch(module_args: list[str], *, nproc: int, nnodes: int = 1, node_rank: int = 0,
           master: str | None = None) -> int:
    """Start `python -m <module_args>` on `nproc` processes through torchrun (torch.distributed.run)."""
    from torch.distributed.run import main as torchrun_main

    if master:
        host, _, port = master.rpartition(":")
        host, port = host or "127.0.0.1", int(port)
    else:
        host, port = "127.0.0.1", free_port()
    args = [f"--nproc-per-node={nproc}", f"--nnodes={nnodes}", f"--node-rank={node_rank}",
            f"--master-addr={host}", f"--master-port={port}", "-m", *module_args]
    try:
        torchrun_main(args)
    except Exception as exc:  # torchrun's ChildFailedError: one rank failed; its summary is printed above
        raise TorchwiseError("A training process failed; the run was stopped on all ranks.",
                             values={"processes": nproc * nnodes, "failure": str(exc).strip().splitlines()[-1][:300]},
                             fix="Read the first traceback above (the failing rank). Checkpoints on disk are "
                                 "complete; rerun with --resume to continue.") from None
    return 0


def interleave(shards: list[torch.Tensor]) -> torch.Tensor:
    """Rank r's shard holds samples r, r + world, ...: the shards interleaved back into data order."""
    total = sum(len(s) for s in shards)
    out = torch.empty((total, *shards[0].shape[1:]), dtype=shards[0].dtype)
    for rank, shard in enumerate(shards):
        out[rank::len(shards)] = shard
    return out
