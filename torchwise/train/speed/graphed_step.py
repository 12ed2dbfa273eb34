"""fast "cuda_graph": capture the whole training step once, then replay it every step.

Small and mid-size models are launch-bound on modern GPUs: the host spends a few microseconds on
each of a step's hundreds of kernel launches while the GPU waits. A CUDA graph launches all of
them at once. What is captured is the one step body, `StepRunner.body` (train/step/body.py), run with
its finite check on the device (`device_body`): forward, backward, clipping, the non-finite flag
and the fused optimizer's update (skipped on the device for a non-finite step).

What a graph needs, and how it gets it here:
- Fixed addresses: each batch is copied into tensors allocated at capture; the graph's gradients
  live in its private memory pool (set to None just before capture, as PyTorch's whole-network
  capture recipe does).
- Optimizer state before capture: the first WARMUP steps run eagerly and create it.
- A learning rate the scheduler can change: during capture each param group's lr is a device
  tensor; afterwards the group holds its float again (what schedulers, logs and checkpoints
  read) and the tensor is refilled from it before a replay whenever it changed.
- No host sync inside: the body on the device has none; autocast's cast cache is off during capture.
- One stream for the warm-up and the capture: cuBLAS keeps a handle and a workspace per stream,
  created at first use; created inside a capture they would come from the graph's pool.
- The same autocast cast-cache setting (off) in the eager steps as in the graph: torch.compile
  guards on it and would recompile inside the capture, which it cannot do.
Steps the graph cannot replay run eagerly through the same body, on the same parameters
and optimizer state: the warm-up, a batch of another shape (a short last batch), the Watcher's
deep steps (its hooks are Python, which a replay would skip), and steps whose optimizer settings
other than the learning rate changed since the capture (OneCycleLR cycles Adam's beta1; the
fused kernel takes betas as numbers, so the graph holds the captured ones). A capture that fails
(an operation that syncs with the host, say) leaves the run on sync-free eager steps and says why.
"""
from __future__ import annotations

import sys
from typing import Any

import torch

from torchwise.train.step.body import StepResult, NoWatcher

WARMUP = 3


def graph_blocker(device: torch.device, dist: Any, accumulate: int, optimizer: torch.optim.Optimizer,
                  compile_options: Any = None) -> str | None:
    """Why the step cannot be captured with this set-up (None: it can)."""
    mode = (compile_options or {}).get("mode")
    if device.type != "cuda":
        return f"needs a CUDA device (training on {device.type})"
    if dist.enabled:
        return "not under DDP yet (its gradient all-reduce is driven from the host)"
    if accumulate != 1:
        return f"needs accumulate=1 (accumulate={accumulate})"
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return f"captures fused Adam/AdamW only (optimizer: {type(optimizer).__name__})"
    if mode in ("reduce-overhead", "max-autotune"):
        return f"torch.compile mode={mode!r} captures CUDA graphs itself (use the default mode with cuda_graph)"
    return None


_HYPER = ("betas", "eps", "weight_decay")  # what the fused kernel reads as numbers at capture time


def _hyper(optimizer: torch.optim.Optimizer) -> list[tuple]:
    return [tuple(float(v) if not isinstance(v, tuple) else tuple(float(b) for b in v)
                  for v in (g.get(k) for k in _HYPER)) for g in optimizer.param_groups]


class GraphedStep:
    def __init__(self, core: Any):
        self.core = core  # the StepRunner whose device_body is captured
        self.graph: Any = None
        self.static: tuple[list[torch.Tensor], torch.Tensor] | None = None
        self.out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.shape: Any = None
        self.lr_tensors: list[torch.Tensor] = []
        self.lr_values: list[float] = []
        self.hyper: list[tuple] = []
        self.eager_steps = 0
        self.replays = 0
        self.eager_why: dict[str, int] = {}  # why steps after the capture ran eagerly, and how often
        self.failure: str | None = None
        self.stream = torch.cuda.Stream(core.device)  # the warm-up's and the capture's
        self._last_eager_shape: Any = None

    def run(self, micro: list[tuple[tuple[Any, ...], Any, int]], measure_norm: bool) -> StepResult:
        shape = _shape_key(micro)
        deep = getattr(self.core.watcher, "is_deep", False)
        # capture only a shape that has run eagerly: cudnn.benchmark's trials cannot run inside a capture
        if self.graph is None and self.failure is None and shape is not None and not deep \
                and self.eager_steps >= WARMUP and shape == self._last_eager_shape:
            self._capture(micro, shape)
        why = self._eager_reason(shape, deep)
        if why is None:
            return self._replay(micro, measure_norm)
        self.eager_steps += 1
        self._last_eager_shape = shape
        if self.graph is not None:
            self.eager_why[why] = self.eager_why.get(why, 0) + 1
        if self.graph is None and self.failure is None:  # warm-up: on the stream the capture will use
            current = torch.cuda.current_stream(self.core.device)
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                result = self.core.run_on_device(micro, measure_norm, cache_casts=False)
            current.wait_stream(self.stream)
            return result
        return self.core.run_on_device(micro, measure_norm, cache_casts=False)

    def _eager_reason(self, shape: Any, deep: bool) -> str | None:
        if self.graph is None:
            return "warm-up"
        if shape != self.shape:
            return "another batch shape"
        if deep:
            return "deep check step"
        if _hyper(self.core.optimizer) != self.hyper:
            return "optimizer settings other than lr changed (e.g. OneCycleLR's momentum)"
        return None

    def _capture(self, micro: list, shape: Any) -> None:
        inputs, target, n = micro[0]
        core, opt = self.core, self.core.optimizer
        device = core.device
        self.static = ([x.detach().clone() for x in inputs], target.detach().clone())
        # float32: the fused kernel reads the lr tensor as float, whatever the default dtype is
        lrs = [torch.tensor(float(g["lr"]), dtype=torch.float32, device=device) for g in opt.param_groups]
        saved = [(g["lr"], g.get("capturable", False)) for g in opt.param_groups]
        watcher, core.watcher = core.watcher, NoWatcher()  # Python hooks would run once, at capture
        graph = torch.cuda.CUDAGraph()
        stream_before = torch.cuda.current_stream(device)
        try:
            for g, lr in zip(opt.param_groups, lrs):
                g["lr"], g["capturable"] = lr, True
            torch.cuda.synchronize(device)
            opt.zero_grad(set_to_none=True)  # backward in the graph allocates the gradients in its pool
            # torch.cuda.device: the capture must happen on the training device, not the current one.
            # thread_local: a DataLoader's pin-memory thread may call CUDA while we capture.
            with torch.cuda.device(device), \
                    torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
                self.out = core.device_body([(tuple(self.static[0]), self.static[1], n)], cache_casts=False)
        except Exception as exc:  # noqa: BLE001 - any capture failure leaves the run on eager steps
            self.failure = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
            self.static = self.out = None
            # a capture that failed inside CUDA can leave its stream current: put ours back
            torch.cuda.set_stream(stream_before)
            torch.cuda.synchronize(device)
            print(f"torchwise: CUDA-graph capture failed, training continues with sync-free eager steps "
                  f"({self.failure})", file=sys.stderr)
            return
        finally:
            for g, (lr, capturable) in zip(opt.param_groups, saved):
                g["lr"], g["capturable"] = lr, capturable
            core.watcher = watcher
        self.graph, self.shape, self.hyper = graph, shape, _hyper(opt)
        self.lr_tensors, self.lr_values = lrs, [float(g["lr"]) for g in opt.param_groups]

    def _replay(self, micro: list, measure_norm: bool) -> StepResult:
        inputs, target, n = micro[0]
        static_inputs, static_target = self.static  # type: ignore[misc]
        for dst, src in zip(static_inputs, inputs):
            dst.copy_(src, non_blocking=True)
        static_target.copy_(target, non_blocking=True)
        for i, g in enumerate(self.core.optimizer.param_groups):  # the scheduler's latest value
            lr = float(g["lr"])
            if lr != self.lr_values[i]:
                self.lr_tensors[i].fill_(lr)
                self.lr_values[i] = lr
        self.graph.replay()
        self.replays += 1
        loss, found, norm = self.out  # type: ignore[misc]
        loss_value, bad, norm_value = torch.stack([loss, found, norm]).tolist()
        return self.core.result(loss_value, bad, norm_value, n, measured=measure_norm or self.core.clip is not None)


def _shape_key(micro: list) -> Any:
    """What must match for a replay: one micro-batch of tensors with these shapes and dtypes."""
    if len(micro) != 1:
        return None
    inputs, target, _ = micro[0]
    tensors = (*inputs, target)
    if not all(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors):
        return None
    return tuple((tuple(t.shape), t.dtype, t.stride()) for t in tensors)
