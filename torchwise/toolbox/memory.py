"""Where training memory goes: `torchwise.memory_estimate(model, example_input, batch_size=...)`.

The seed's accounting, done per model and per precision:

    parameters 4N + gradients 4N + optimizer state (Adam 8N, SGD+momentum 4N) + activations

- parameters, gradients and optimizer state come from the model and the optimizer type;
- activations are MEASURED, not guessed: one forward/backward at the requested batch size under
  `torch.autograd.graph.saved_tensors_hooks`, which sees every tensor autograd keeps for backward
  (deduplicated by storage; parameters and the input batch are not counted twice). Under autocast
  this includes the low-precision copies of the weights, which is why AMP saves less than half;
- the peak is the larger of the two moments a training step has: backward starting (parameters,
  optimizer state, every activation, and the gradient being passed back, at most the size of
  the largest activation) and the optimizer step (parameters, gradients, optimizer state and the step's
  temporaries: one parameter-sized buffer for Adam's denominator and Nesterov's lookahead).

`measure=True` checks the estimate against reality, with real training steps at that batch size:
on CUDA from the allocator's own counters (max_memory_allocated), on the CPU from the peak
resident set size of a FRESH process (peak RSS is a process-lifetime maximum: only a clean process,
with the peak reset by /proc/self/clear_refs just before the steps, gives a meaningful delta).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.toolbox.summary import as_inputs, format_bytes

PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd_momentum", "sgd_nesterov", "rmsprop", "adagrad", "adadelta", "adamax",
              "nadam", "radam")


# ----------------------------------------------------------------------------- optimizer state


@dataclass(frozen=True)
class OptimizerCost:
    name: str
    state_copies: int        # parameter-sized state buffers per trainable parameter
    step_temporaries: int    # parameter-sized temporaries while optimizer.step() runs


def optimizer_cost(optimizer: str | torch.optim.Optimizer) -> OptimizerCost:
    """State kept per trainable parameter, by optimizer type (and its momentum/amsgrad settings)."""
    if isinstance(optimizer, torch.optim.Optimizer):
        d = optimizer.defaults
        kind = type(optimizer).__name__.lower()
        if kind == "sgd":
            kind = "sgd_nesterov" if d.get("nesterov") else ("sgd_momentum" if d.get("momentum") else "sgd")
        extra = 1 if d.get("amsgrad") else 0
        if kind == "rmsprop":
            extra = (1 if d.get("momentum") else 0) + (1 if d.get("centered") else 0)
    else:
        kind, extra = str(optimizer).lower(), 0
    table = {"sgd": (0, 0), "sgd_momentum": (1, 0), "sgd_nesterov": (1, 1), "adam": (2, 1), "adamw": (2, 1),
             "adamax": (2, 1), "nadam": (2, 1), "radam": (2, 1), "rmsprop": (1, 1), "adagrad": (1, 1),
             "adadelta": (2, 1)}
    if kind not in table:
        raise TorchwiseError("No memory model for this optimizer.", values={"optimizer": kind,
                                                                           "known": ", ".join(OPTIMIZERS)},
                             fix="Pass the closest known optimizer by name (e.g. 'adamw' for any Adam variant).")
    copies, temps = table[kind]
    return OptimizerCost(kind, copies + extra, temps)


def make_optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    name = name.lower()
    lr = 1e-4  # irrelevant to memory; small so that repeated measuring steps stay finite
    if name.startswith("sgd"):
        return torch.optim.SGD(params, lr=lr, momentum=0.0 if name == "sgd" else 0.9, nesterov=name == "sgd_nesterov")
    classes = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop,
               "adagrad": torch.optim.Adagrad, "adadelta": torch.optim.Adadelta, "adamax": torch.optim.Adamax,
               "nadam": torch.optim.NAdam, "radam": torch.optim.RAdam}
    optimizer_cost(name)  # raises the clear error for unknown names
    return classes[name](params, lr=lr)


# ----------------------------------------------------------------------------- activations, measured


@dataclass
class Activations:
    saved_bytes: int          # everything autograd keeps between forward and backward
    largest_bytes: int        # the largest single saved tensor (storage)
    output_bytes: int         # the model's output


def batch_like(example: Any, batch_size: int | None) -> tuple[Any, ...]:
    inputs = as_inputs(example)
    if batch_size is None:
        return inputs
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor) or t.ndim == 0:
            raise TorchwiseError("The example input must be a tensor with a batch dimension.",
                                 values={"got": type(t).__name__}, fix="Pass e.g. torch.randn(1, 3, 32, 32).")
        shape = (batch_size, *t.shape[1:])
        out.append(torch.randn(shape, device=t.device) if t.is_floating_point()
                   else torch.zeros(shape, dtype=t.dtype, device=t.device))
    return tuple(out)


def target_for(output: torch.Tensor, task: str) -> torch.Tensor:
    if task == "classification" and output.ndim == 2 and output.shape[1] > 1:
        return torch.zeros(output.shape[0], dtype=torch.long, device=output.device)
    return torch.zeros(output.shape, dtype=torch.float32, device=output.device)


def default_loss(task: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if task == "classification":
        return lambda out, y: nn.functional.cross_entropy(out.float(), y) if y.dtype == torch.long \
            else nn.functional.binary_cross_entropy_with_logits(out.float(), y)
    return lambda out, y: nn.functional.mse_loss(out.float(), y)


def autocast_for(precision: str, device: torch.device):
    import contextlib

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def measure_activations(model: nn.Module, inputs: tuple[Any, ...], *, precision: str = "fp32", task: str = "classification",
                        loss_fn: Callable | None = None) -> Activations:
    """One forward/backward; the bytes of every tensor saved for backward (parameters, buffers and
    the inputs excluded: they are counted elsewhere). Gradients are cleared afterwards."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    exclude = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    exclude |= {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in exclude and ptr != 0:
            sizes[ptr] = max(sizes.get(ptr, 0), storage.nbytes())
        return t

    loss_fn = loss_fn or default_loss(task)
    grads_before = {p: p.grad for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast_for(precision, device):
            out = model(*inputs)
        loss = loss_fn(out, target_for(out, task))
    output_bytes = out.untyped_storage().nbytes()
    loss.backward()
    for p, g in grads_before.items():
        p.grad = g
    return Activations(sum(sizes.values()), max(sizes.values(), default=0), output_bytes)


# ----------------------------------------------------------------------------- the estimate


@dataclass
class PrecisionRow:
    precision: str
    params: int
    grads: int
    optimizer_state: int
    batch: int
    activations: int
    transient: int
    estimate: int
    measured: int | None = None
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return self.estimate / self.measured if self.measured else None


@dataclass
class MemoryReport:
    device: str
    batch_size: int
    optimizer: str
    rows: list[PrecisionRow]
    method: str = "estimate only"
    notes: list[str] = field(default_factory=list)

    def row(self, precision: str) -> PrecisionRow:
        return next(r for r in self.rows if r.precision == precision)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "batch_size": self.batch_size, "optimizer": self.optimizer,
                "method": self.method, "rows": [{**r.__dict__, "ratio": r.ratio} for r in self.rows],
                "notes": self.notes}

    def table(self) -> str:
        header = ("precision", "params", "grads", "optimizer", "batch", "activations", "transient",
                  "peak (est.)", "peak (measured)", "est/meas")
        body = []
        for r in self.rows:
            if r.error:
                body.append((r.precision, *(["-"] * 8), r.error[:40]))
                continue
            body.append((r.precision, *(format_bytes(v) for v in (r.params, r.grads, r.optimizer_state, r.batch,
                                                                  r.activations, r.transient, r.estimate)),
                         format_bytes(r.measured) if r.measured is not None else "-",
                         f"{r.ratio:.2f}" if r.ratio is not None else "-"))
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
        line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
        rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
        out = [f"memory for one training step: batch {self.batch_size}, optimizer {self.optimizer}, "
               f"device {self.device}", line(header), rule, *(line(b) for b in body), rule,
               f"measured: {self.method}"]
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)

    __str__ = table


def _param_bytes(model: nn.Module) -> tuple[int, int, int]:
    params = list(model.parameters())
    total = sum(p.numel() * p.element_size() for p in params)
    trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return total, trainable, buffers


def estimate_row(model: nn.Module, inputs: tuple[Any, ...], precision: str, cost: OptimizerCost, *,
                 task: str = "classification", loss_fn: Callable | None = None) -> PrecisionRow:
    total, trainable, buffers = _param_bytes(model)
    acts = measure_activations(model, inputs, precision=precision, task=task, loss_fn=loss_fn)
    batch = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    state = cost.state_copies * trainable
    # Backward starts with every activation alive; on top of them, the gradient being passed back
    # (at most the size of the largest activation) and the output's own gradient.
    backward = state + acts.saved_bytes + acts.largest_bytes + acts.output_bytes
    step = state + trainable + cost.step_temporaries * trainable
    transient = max(backward - state - acts.saved_bytes, step - state - trainable)
    estimate = total + buffers + batch + max(backward, step)
    return PrecisionRow(precision, total + buffers, trainable, state, batch, acts.saved_bytes, transient, estimate)


def memory_estimate(model: nn.Module, example_input: Any, *, batch_size: int | None = None,
                    optimizer: str | torch.optim.Optimizer = "adamw", precisions: tuple[str, ...] | None = None,
                    task: str = "classification", loss_fn: Callable | None = None, device: str | torch.device = "cpu",
                    measure: bool = False, threads: int | None = None) -> MemoryReport:
    """Parameters, gradients, optimizer state, activations and the peak of one training step, per
    precision. `example_input`: a batch (or one sample with a batch dimension) shaped like the data;
    `batch_size`: the batch to account for (default: the example's own). `measure=True` also runs
    real training steps and reports the measured peak next to the estimate."""
    from torchwise.train.step.precision import choose_device

    dev = choose_device(device)
    cost = optimizer_cost(optimizer)
    if precisions is None:
        # CPU autocast supports fp16 only through slow reference kernels (minutes per step): bf16 is the
        # CPU's mixed precision, fp16 stays available by asking for it.
        precisions = PRECISIONS if dev.type == "cuda" else ("fp32", "bf16")
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise TorchwiseError("Unknown precision.", values={"precision": unknown, "allowed": ", ".join(PRECISIONS)},
                             fix="Use fp32, bf16 and/or fp16.")
    model = model.to(dev)
    was_training = model.training
    model.train()
    inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in batch_like(example_input, batch_size))
    bs = int(inputs[0].shape[0])
    rows = []
    try:
        for precision in precisions:
            try:
                rows.append(estimate_row(model, inputs, precision, cost, task=task, loss_fn=loss_fn))
            except RuntimeError as exc:  # e.g. an op without a low-precision kernel on this device
                rows.append(PrecisionRow(precision, 0, 0, 0, 0, 0, 0, 0, error=str(exc).splitlines()[0]))
    finally:
        model.train(was_training)
    report = MemoryReport(str(dev), bs, cost.name, rows)
    if measure:
        good = [r for r in rows if not r.error]
        if dev.type == "cuda":
            for r in good:
                r.measured = measure_cuda_peak(model, inputs, r.precision, cost.name, task=task, loss_fn=loss_fn)
            report.method = "torch.cuda.max_memory_allocated over 3 training steps (allocator counters)"
        else:
            for r in good:
                result = measure_cpu_peak(model, [tuple(t.shape) for t in inputs], r.precision, cost.name,
                                          task=task, threads=threads)
                r.measured = result["peak_bytes"]
                if result.get("note") and result["note"] not in report.notes:
                    report.notes.append(result["note"])
            report.method = ("peak RSS growth of a fresh process over 3 training steps (VmHWM reset via "
                             "/proc/self/clear_refs) + its resident parameters and batch")
    return report


# ----------------------------------------------------------------------------- measuring


def _train_steps(model: nn.Module, inputs: tuple[Any, ...], precision: str, optimizer_name: str, task: str,
                 loss_fn: Callable | None, steps: int, after_step: Callable[[], None] | None = None) -> None:
    """`steps` training steps on `inputs`, each the Trainer's own step body (train/step/body.py: autocast,
    GradScaler for fp16, the finite check, the update), so what is measured is what training runs."""
    from torchwise.train.step.precision import choose_precision
    from torchwise.train.step.body import StepRunner

    device = inputs[0].device
    opt = make_optimizer(optimizer_name, [p for p in model.parameters() if p.requires_grad])
    loss_fn = loss_fn or default_loss(task)
    made: list[torch.Tensor] = []

    def loss_on_made_target(out: torch.Tensor, _: Any) -> torch.Tensor:
        if not made:  # a target shaped like the first output, kept for the later steps
            made.append(target_for(out, task))
        return loss_fn(out, made[0])

    runner = StepRunner(model, opt, loss_on_made_target, choose_precision(precision, device), device, None)
    model.train()
    micro = [(inputs, None, int(inputs[0].shape[0]))]
    for _ in range(steps):
        runner.run(micro, measure_norm=False)
        if after_step is not None:
            after_step()


def measure_cuda_peak(model: nn.Module, inputs: tuple[Any, ...], precision: str, optimizer_name: str, *,
                      task: str = "classification", loss_fn: Callable | None = None, steps: int = 3,
                      checkpointing: bool = False) -> int:
    """Peak bytes allocated by a copy of `model` training on `inputs` (parameters and batch included)."""
    import copy
    import gc

    device = inputs[0].device
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    clone = copy.deepcopy(model)
    if checkpointing:
        from torchwise.train.speed.activation_checkpointing import enable_checkpointing

        enable_checkpointing(clone)
    batch = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)
    done = [0]

    def after_step() -> None:
        done[0] += 1
        if done[0] == 1:  # the first step also pays one-off costs (cuDNN autotuning, cuBLAS workspace)
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    try:
        _train_steps(clone, batch, precision, optimizer_name, task, loss_fn, max(2, steps), after_step)
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - start)
    finally:
        del clone, batch
        gc.collect()
        torch.cuda.empty_cache()


def measure_cpu_peak(model: nn.Module | str, input_shapes: list[tuple[int, ...]], precision: str, optimizer_name: str,
                     *, task: str = "classification", threads: int | None = None, steps: int = 3,
                     checkpointing: bool = False, timeout: float = 300) -> dict[str, Any]:
    """Peak memory of training steps in a fresh Python process. `model`: a module (pickled whole to a
    temporary file; its class must be importable) or a build_model spec "name:num_classes:in_channels:HxW"."""
    with tempfile.TemporaryDirectory(prefix="torchwise-mem-") as tmp:
        spec: dict[str, Any] = {"input_shapes": [list(s) for s in input_shapes], "precision": precision,
                                "optimizer": optimizer_name, "task": task, "threads": threads, "steps": steps,
                                "checkpointing": checkpointing}
        if isinstance(model, nn.Module):
            path = Path(tmp) / "model.pt"
            try:
                torch.save(model.cpu(), path)
            except Exception as exc:  # local classes, lambdas: pickle cannot name them
                raise TorchwiseError("The model cannot be sent to a fresh process for measuring.",
                                     values={"model": type(model).__name__, "reason": str(exc)[:200]},
                                     fix="Define the model class at module top level (importable), or call "
                                         "memory_estimate(..., measure=False) for the estimate alone.") from None
            spec["model_file"] = str(path)
        else:
            spec["model_spec"] = model
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ)
        # Fixed mmap threshold: blocks above 128 KiB come from mmap and go back to the OS when freed, so
        # RSS follows what is live instead of what glibc keeps cached (its default threshold adapts upwards).
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, "-m", "torchwise.toolbox.memory", str(spec_path)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise TorchwiseError("Measuring memory in a fresh process failed.",
                             values={"exit code": proc.returncode, "stderr": proc.stderr[-1500:]},
                             fix="Check that the model runs on an input of this shape: torchwise summary.")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{field_name} not in /proc/self/status")


def _worker(spec_path: str) -> None:
    import gc

    spec = json.loads(Path(spec_path).read_text())
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    if "model_file" in spec:
        model = torch.load(spec["model_file"], weights_only=False)  # our own file, written a moment ago
    else:
        from torchwise.models import build_model

        name, classes, channels, size = spec["model_spec"].rsplit(":", 3)  # a timm:NAME keeps its colon
        model = build_model(name, int(classes), int(channels), tuple(int(s) for s in size.split("x")) if size else None)
    if spec.get("checkpointing"):
        from torchwise.train.speed.activation_checkpointing import enable_checkpointing

        enable_checkpointing(model)
    torch.manual_seed(0)
    inputs = tuple(torch.randn(s) for s in spec["input_shapes"])
    total, _, buffers = _param_bytes(model)
    resident = total + buffers + sum(t.numel() * t.element_size() for t in inputs)
    # Warm-up step first, then everything it allocated is dropped: the first call of each kernel maps
    # library code pages and oneDNN builds its primitives, which count in RSS but are not training memory.
    warm = __import__("copy").deepcopy(model)
    _train_steps(warm, inputs, spec["precision"], spec["optimizer"], spec["task"], None, 1)
    del warm
    gc.collect()
    note = None
    base = _status_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM (the peak) to the current RSS
    except OSError:
        base = max(base, _status_kib("VmHWM"))
        note = "could not reset the peak RSS (/proc/self/clear_refs): the measured peak may be low"
    _train_steps(model, inputs, spec["precision"], spec["optimizer"], spec["task"], None, int(spec["steps"]))
    peak_growth = _status_kib("VmHWM") - base
    print(json.dumps({"peak_bytes": resident + max(0, peak_growth), "growth_bytes": peak_growth,
                      "resident_bytes": resident, "note": note}))


def checkpointing_saving(model: nn.Module, example_input: Any, *, batch_size: int | None = None,
                         optimizer: str = "adamw", precision: str = "fp32", task: str = "classification",
                         device: str | torch.device = "cpu", threads: int | None = None) -> dict[str, Any]:
    """Measured peak of a training step without and with gradient checkpointing (same measuring as
    memory_estimate(measure=True))."""
    from torchwise.train.step.precision import choose_device

    dev = choose_device(device)
    model = model.to(dev)
    inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in batch_like(example_input, batch_size))
    peaks = {}
    for flag in (False, True):
        if dev.type == "cuda":
            peaks[flag] = measure_cuda_peak(model, inputs, precision, optimizer, task=task, checkpointing=flag)
        else:
            peaks[flag] = measure_cpu_peak(model, [tuple(t.shape) for t in inputs], precision, optimizer, task=task,
                                           threads=threads, checkpointing=flag)["peak_bytes"]
    return {"without": peaks[False], "with": peaks[True], "saving": 1 - peaks[True] / peaks[False],
            "batch_size": int(inputs[0].shape[0]), "precision": precision, "device": str(dev)}


def bytes_from_text(text: str) -> int:
    """'4GB', '512MiB', '2.5G', '1000000' -> bytes (binary units for K/M/G/T, as memory is sold)."""
    t = str(text).strip().lower().replace(" ", "")
    units = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
             "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4, "tb": 1024**4, "tib": 1024**4}
    from torchwise.numbers import NumberTextError, read_number  # the one reader of numbers in text

    number = t.rstrip("kmgtib")
    unit = t[len(number):]
    try:
        value = float(read_number(number))
    except NumberTextError:
        value = math.nan
    if unit not in units or not math.isfinite(value) or value <= 0:
        raise TorchwiseError("Cannot read this memory size.", values={"size": text},
                             fix="Write it like 4GB, 512MB or 2.5GiB.")
    return int(value * units[unit])


if __name__ == "__main__":
    _worker(sys.argv[1])
