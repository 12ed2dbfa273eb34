"""GPU training throughput: the seed template, hand-tuned loops, Lightning, Accelerate and torchwise.Trainer,
on the same workloads in the same run (issue 7).

Workloads (synthetic in-memory data, nothing is downloaded):
    resnet  torchvision ResNet-18 (num_classes=10) on 32x32 uint8 images, batch 256      -> images/s
    mlp     MLP 64-256-256-10, batch 64                                                    -> us per step
    gpt     GPT-style decoder, 124M parameters (12 layers, 12 heads, d=768, vocab 50257, T=1024), bf16
                                                                                           -> tokens/s and MFU
What is timed, for every contender alike: N consecutive training iterations after W warm-up iterations
(fetching the batch + forward + loss + backward + optimizer step + whatever the contender does per step),
wall time (perf_counter) between two torch.cuda.synchronize() calls, taken at the same point of the loop
(after the optimizer step: a Trainer's "step_end" event, Lightning's on_train_batch_end). Not timed: building
the model, optimizer and loader, DataLoader worker start-up, the Trainer's set-up (loader tuning) and the
first steps (torch.compile, CUDA-graph capture); set-up and the first step are reported separately.

    python bench/bench_gpu.py [--json out.json] [--only resnet,mlp,gpt] [--quick] [--device cpu]
                              [--compile-mode reduce-overhead|max-autotune-no-cudagraphs|default|none]
                              [--peak-tflops 989] [--budget-s 390]
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's torchwise, installed or not

H200_BF16_PEAK_TFLOPS = 989.0
TARGETS = {"resnet": "ResNet-18 >= 80,000 images/s", "mlp": "tiny MLP step <= 100 us",
           "gpt": "GPT-124M >= 47% MFU", "all": "torchwise never slower than hand-tuned eager (ok: within 2% or faster)"}
# the parts fast="auto" already decides on a GPU (and compile, timed in its own phase): the others get contenders
BASE_PARTS = ("channels_last", "tf32", "fused_optimizer", "compile", "prefetch", "sync_free")
HAND = "hand-tuned eager"


class Skip(Exception):
    """A contender that cannot run here; the message says why."""


class ContenderTimeout(Exception):
    pass


# ---------------------------------------------------------------------------------------------- models
class FromUint8(nn.Module):
    """uint8 images in, the network on floats in [0, 1]: the conversion is part of every contender's step."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float().div(255))  # .float() keeps channels_last


class DecoderBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm_attn, self.norm_mlp = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc_in, self.fc_out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm_attn(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, heads, t, d/heads)
        x = x + self.out(mixed.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc_in(self.norm_mlp(x)), approximate="tanh"))


class Decoder(nn.Module):
    """A GPT-style causal language model: token + learned position embeddings, pre-norm blocks, tied output."""

    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(DecoderBlock(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tokens.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * layers) if name.endswith(("out.weight", "fc_out.weight")) else 1))
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


# ---------------------------------------------------------------------------------------------- workloads
@dataclass
class Workload:
    name: str
    title: str
    build: Callable[[], nn.Module]
    x: torch.Tensor                 # the whole data set, on the CPU
    y: torch.Tensor
    batch: int
    warmup: int
    steps: int
    seed_steps: tuple[int, int]     # (warmup, steps) for the fp32 seed template
    conv: bool
    loss: Callable[..., torch.Tensor]
    tokens_per_sample: int = 1      # gpt: T
    flops_per_token: float = 0.0    # gpt: 6*N + 12*L*d*T

    def unit(self) -> str:
        return {"resnet": "images/s", "mlp": "us/step", "gpt": "tokens/s"}[self.name]


def make_workload(name: str, quick: bool, scale: float) -> Workload:
    g = torch.Generator().manual_seed(0)

    def steps(w: int, n: int) -> tuple[int, int]:
        return max(1, int(w * scale)), max(2, int(n * scale))

    if name == "resnet":
        import torchvision

        n, batch, size = (128, 8, 32) if quick else (50_000, 256, 32)
        x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        y = torch.randint(0, 10, (n,), generator=g)
        w, s = steps(1, 3) if quick else steps(15, 100)
        return Workload(name, f"ResNet-18 (torchvision, 10 classes), {size}x{size} uint8 images, batch {batch}, "
                        f"{n} in-memory samples", lambda: FromUint8(torchvision.models.resnet18(num_classes=10)),
                        x, y, batch, w, s, (w, s), True, nn.functional.cross_entropy)
    if name == "mlp":
        n, batch = (1024, 64) if quick else (50_000, 64)
        x = torch.randn(n, 64, generator=g)
        y = (x @ torch.randn(64, 10, generator=g)).argmax(1)
        w, s = steps(5, 20) if quick else steps(50, 500)

        def build() -> nn.Module:
            return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

        return Workload(name, f"MLP 64-256-256-10, batch {batch}, {n} in-memory samples", build, x, y, batch, w, s,
                        (w, s), False, nn.functional.cross_entropy)
    if name == "gpt":
        vocab, ctx, d, layers, heads, batch, windows = ((512, 64, 64, 2, 2, 4, 64) if quick
                                                        else (50257, 1024, 768, 12, 12, 16, 2048))
        stream = torch.randint(0, vocab, (windows * (ctx + 1),), generator=g).view(windows, ctx + 1)
        w, s = steps(2, 4) if quick else steps(5, 20)
        seed = steps(1, 3) if quick else steps(2, 5)

        def build() -> nn.Module:
            return Decoder(vocab, ctx, d, layers, heads)

        with torch.device("meta"):
            params = sum(p.numel() for p in build().parameters())  # tied head counted once
        flops = 6 * params + 12 * layers * d * ctx
        return Workload(name, f"GPT-style decoder, {params / 1e6:.1f}M parameters ({layers} layers, {heads} heads, "
                        f"d={d}, vocab {vocab}, T={ctx}), batch {batch}x{ctx} tokens, {windows} random windows",
                        build, stream[:, :-1], stream[:, 1:], batch, w, s, seed, False, lm_loss, ctx, float(flops))
    raise SystemExit(f"unknown workload {name!r} (use resnet, mlp, gpt)")


# ---------------------------------------------------------------------------------------------- timing
class Clock:
    """tick() after every training iteration; the timed window is iterations warmup+1 .. warmup+steps."""

    def __init__(self, warmup: int, steps: int, device: torch.device):
        self.warmup, self.steps, self.device = warmup, steps, device
        self.n = 0
        self.created = self.loop_start = time.perf_counter()
        self.first_step_s = self.t0 = self.t1 = None

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        """Call just before the loop: what came before is set-up."""
        self.loop_start = time.perf_counter()

    def tick(self) -> bool:
        self.n += 1
        if self.n == 1:
            self.sync()
            self.first_step_s = time.perf_counter() - self.loop_start
        if self.n == self.warmup:
            self.sync()
            self.t0 = time.perf_counter()
        if self.n == self.warmup + self.steps:
            self.sync()
            self.t1 = time.perf_counter()
        return self.n >= self.warmup + self.steps

    @property
    def total(self) -> int:
        return self.warmup + self.steps

    def result(self) -> dict[str, Any]:
        if self.t1 is None:
            raise RuntimeError(f"the loop stopped after {self.n} of {self.total} iterations")
        return {"warmup_steps": self.warmup, "timed_steps": self.steps, "timed_s": self.t1 - self.t0,
                "setup_s": self.loop_start - self.created, "first_step_s": self.first_step_s}


def device_batches(x: torch.Tensor, y: torch.Tensor, batch: int, count: int):
    """`count` random batches indexed from tensors already on the device (no host work but the launch)."""
    n, done = len(x), 0
    while done < count:
        order = torch.randperm(n, device=x.device)
        for i in range(0, n - batch + 1, batch):
            if done == count:
                return
            idx = order[i:i + batch]
            yield x[idx], y[idx]
            done += 1


class DeviceBatches:
    """The same as an iterable with a length (Lightning wants one)."""

    def __init__(self, x, y, batch, count):
        self.args = (x, y, batch, count)

    def __len__(self) -> int:
        return self.args[3]

    def __iter__(self):
        return device_batches(*self.args)


def forever(loader):
    while True:
        yield from loader


@contextlib.contextmanager
def time_limit(seconds: float):
    def expire(*_):
        raise ContenderTimeout(f"ran past its time limit of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def adamw(params, device: torch.device, **extra):
    """AdamW(lr=1e-3), fused when this torch has a fused kernel for the device; returns (optimizer, note)."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=1e-3, fused=True, **extra), "fused AdamW"
    except (RuntimeError, TypeError, ValueError) as exc:
        return torch.optim.AdamW(params, lr=1e-3, foreach=True, **extra), f"foreach AdamW (fused unavailable: {exc})"


def autocast(device: torch.device, **kw):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, **kw)


# ---------------------------------------------------------------------------------------------- contenders
def seed_template(wl: Workload, dev: torch.device, args) -> dict[str, Any]:
    """The seed article's loop: fp32, DataLoader(shuffle, workers, pinned), zero_grad/forward/loss/backward/step/item."""
    cuda = dev.type == "cuda"
    notes = [f"fp32, DataLoader(num_workers={args.seed_workers}, pin_memory={cuda}), loss.item() every step"]
    if not cuda:
        notes.append("pin_memory skipped: no GPU")
    warmup, steps = wl.seed_steps
    clock = Clock(warmup, steps, dev)
    model = wl.build().to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(wl.x, wl.y), batch_size=wl.batch, shuffle=True, num_workers=args.seed_workers,
                        pin_memory=cuda, drop_last=True)
    model.train()
    total = 0.0
    clock.start()
    for data, target in forever(loader):
        data, target = data.to(dev, non_blocking=True), target.to(dev, non_blocking=True)
        optimizer.zero_grad()
        output = model(data)
        loss = wl.loss(output, target)
        loss.backward()
        optimizer.step()
        total += loss.item()
        if clock.tick():
            break
    return {**clock.result(), "notes": notes}


def hand_setup(wl: Workload, dev: torch.device, **opt_extra):
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    model = wl.build().to(dev)
    if wl.conv:
        model = model.to(memory_format=torch.channels_last)
    optimizer, note = adamw(model.parameters(), dev, **opt_extra)
    x, y = wl.x.to(dev), wl.y.to(dev)
    notes = ["bf16 autocast", note, "data on the device (indexed per step)", "no per-step .item()",
             "cudnn.benchmark, TF32"] + (["channels_last"] if wl.conv else [])
    return model, optimizer, x, y, notes


def hand_tuned(wl: Workload, dev: torch.device, args, compile_mode: str | None = None) -> dict[str, Any]:
    clock = Clock(wl.warmup, wl.steps, dev)
    model, optimizer, x, y, notes = hand_setup(wl, dev)
    step_model = model
    graphs = compile_mode is not None and "reduce-overhead" in compile_mode
    if compile_mode is not None:
        step_model = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
        notes.append(f"torch.compile(mode={compile_mode!r}) of the model (loss and optimizer eager); compile time "
                     "is in first_step_s, not in the throughput")
    model.train()
    clock.start()
    for xb, yb in device_batches(x, y, wl.batch, clock.total):
        if wl.conv:
            xb = xb.contiguous(memory_format=torch.channels_last)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        with autocast(dev):
            loss = wl.loss(step_model(xb), yb)
        loss.backward()
        optimizer.step()
        if clock.tick():
            break
    return {**clock.result(), "notes": notes}


def hand_cuda_graph(wl: Workload, dev: torch.device, args) -> dict[str, Any]:
    """The whole step (forward, loss, backward, fused AdamW) captured once in a CUDA graph and replayed."""
    if dev.type != "cuda":
        raise Skip("CUDA graphs need a GPU")
    clock = Clock(wl.warmup, wl.steps, dev)
    model, optimizer, x, y, notes = hand_setup(wl, dev, capturable=True)
    notes.append("whole step in one CUDA graph (torch.cuda.graph; autocast cache off); the batch is copied into "
                 "static buffers before each replay")
    model.train()
    static_x, static_y = x[:wl.batch].clone(), y[:wl.batch].clone()
    if wl.conv:
        static_x = static_x.contiguous(memory_format=torch.channels_last)

    def step():
        with autocast(dev, cache_enabled=False):
            loss = wl.loss(model(static_x), static_y)
        loss.backward()
        optimizer.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture (cudnn/cublas choices, optimizer state)
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        step()
    clock.start()
    for xb, yb in device_batches(x, y, wl.batch, clock.total):
        static_x.copy_(xb)
        static_y.copy_(yb)
        graph.replay()
        if clock.tick():
            break
    return {**clock.result(), "notes": notes}


def lightning_run(wl: Workload, dev: torch.device, args) -> dict[str, Any]:
    try:
        import lightning as L
    except ImportError:
        try:
            import pytorch_lightning as L
        except ImportError:
            raise Skip("neither lightning nor pytorch_lightning is installed") from None
    clock = Clock(wl.warmup, wl.steps, dev)
    conv = wl.conv

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = wl.build()
            if conv:
                self.net = self.net.to(memory_format=torch.channels_last)

        def training_step(self, batch, _):
            xb, yb = batch
            if conv:
                xb = xb.contiguous(memory_format=torch.channels_last)
            return wl.loss(self.net(xb), yb)

        def configure_optimizers(self):
            return adamw(self.parameters(), dev)[0]

    class Tick(L.Callback):
        def on_train_batch_end(self, trainer, *_):
            if clock.tick():
                trainer.should_stop = True

    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    trainer = L.Trainer(accelerator="gpu" if dev.type == "cuda" else "cpu", devices=1, precision="bf16-mixed",
                        max_steps=clock.total, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[Tick()])
    x, y = wl.x.to(dev), wl.y.to(dev)
    clock.start()  # Lightning's own set-up happens inside fit(): it lands in first_step_s
    trainer.fit(Module(), train_dataloaders=DeviceBatches(x, y, wl.batch, clock.total))
    return {**clock.result(), "notes": [f"{L.__name__} {L.__version__}, precision='bf16-mixed', fused AdamW, "
                                        "the same device-resident batches as hand-tuned eager"
                                        + (", channels_last" if conv else "")]}


def accelerate_run(wl: Workload, dev: torch.device, args) -> dict[str, Any]:
    try:
        import accelerate
        from accelerate import Accelerator
    except ImportError:
        raise Skip("accelerate is not installed") from None
    clock = Clock(wl.warmup, wl.steps, dev)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    acc = Accelerator(mixed_precision="bf16", cpu=dev.type == "cpu")
    model = wl.build().to(acc.device)
    if wl.conv:
        model = model.to(memory_format=torch.channels_last)
    optimizer, note = adamw(model.parameters(), dev)
    model, optimizer = acc.prepare(model, optimizer)
    x, y = wl.x.to(acc.device), wl.y.to(acc.device)
    clock.start()
    for xb, yb in device_batches(x, y, wl.batch, clock.total):
        if wl.conv:
            xb = xb.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=True)
        loss = wl.loss(model(xb), yb)
        acc.backward(loss)
        optimizer.step()
        if clock.tick():
            break
    return {**clock.result(), "notes": [f"accelerate {accelerate.__version__}, mixed_precision='bf16', {note}, "
                                        "the same device-resident batches, no per-step .item()"]}


def torchwise_run(wl: Workload, dev: torch.device, args, *, fast: Any = "auto", checks: bool = True,
                  on_device: bool = False, compile_mode: str | None = None, cuda_only: bool = False,
                  state: dict | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    import torchwise
    from torchwise.train.speed import fast as fast_module

    if cuda_only and dev.type != "cuda":
        raise Skip("a GPU part: this CPU run only checks that the script works")
    clock = Clock(wl.warmup, wl.steps, dev)
    model = wl.build()
    if fast != "auto" or compile_mode is not None:
        auto = fast_module.plan_fast("auto", dev, model).on
        fast = sorted(auto | set(fast if fast != "auto" else ()) | ({"compile"} if compile_mode else set()))
    workers: Any = "auto"
    if on_device:
        workers = 0
    elif state and state.get("workers") is not None:
        workers = state["workers"]  # what the default contender's loader tuning picked: no second tuning
    data = TensorDataset(wl.x.to(dev), wl.y.to(dev)) if on_device else TensorDataset(wl.x, wl.y)
    kwargs: dict[str, Any] = dict(max_steps=clock.total, batch_size=wl.batch, device=str(dev), precision="auto",
                                  fast=fast, checks=checks, num_workers=workers, progress=False, seed=0)
    kwargs.update(extra or {})
    if wl.name == "gpt":
        kwargs["loss"] = lm_loss
    if compile_mode is not None:
        kwargs["compile_options"] = {} if compile_mode == "default" else {"mode": compile_mode}
    trainer = torchwise.Trainer(model, train_data=data, **kwargs)
    # fit() does its set-up (loader tuning, wrapping) before "fit_start": that is set-up, not step time
    trainer.on("fit_start", lambda **_: (clock.sync(), clock.start()))
    trainer.on("step_end", lambda **_: clock.tick())
    clock.created = time.perf_counter()
    result = trainer.fit()
    out = clock.result()
    plan = trainer.train_loader.plan
    if state is not None and not on_device and state.get("workers") is None:
        state["workers"] = plan.num_workers
    rows = [r.get("samples_per_s") for r in result.history if r.get("samples_per_s")]
    out["notes"] = [f"Trainer(fast={fast!r}, precision='auto', checks={checks}, num_workers={workers!r}"
                    + "".join(f", {k}={v!r}" for k, v in (extra or {}).items())
                    + (", data: TensorDataset already on the device" if on_device else ", data: CPU TensorDataset")
                    + ", progress=False); timed between step_end events",
                    f"precision {trainer.precision.name}; {trainer.fast_plan.describe()}",
                    f"data: batch {plan.batch_size}, workers {plan.num_workers}, pin_memory {plan.pin_memory}"
                    + (f", {plan.note}" if plan.note else "")]
    if rows:
        out["trainer_samples_per_s"] = rows[-1]
    if result.findings:
        out["notes"].append("checks found: " + "; ".join(str(f.get("title") or f.get("kind") or f)[:80]
                                                          for f in result.findings[:3]))
    return out


# ---------------------------------------------------------------------------------------------- the run
_STATE: dict[str, dict[str, Any]] = {}


def _trainer_parameters() -> dict[str, Any]:
    import inspect

    from torchwise.train.trainer import Trainer

    return dict(inspect.signature(Trainer.__init__).parameters)


def contenders(wl: Workload, dev: torch.device, args, compile_phase: bool):
    """(name, function) in the order they run; compile contenders come in a second phase (slow to build)."""
    from torchwise.train.speed import fast as fast_module

    state = _STATE.setdefault(wl.name, {})  # the default contender's loader choice, reused by the others
    mode = args.compile_mode
    if compile_phase:
        def needs_compile():
            if dev.type != "cuda":
                raise Skip("torch.compile is benchmarked on the GPU only (minutes of compile on a CPU)")
            if mode == "none":
                raise Skip("--compile-mode none")
            if wl.name not in args.compile_only:
                raise Skip(f"--compile-only {','.join(args.compile_only)}")

        def hand_compiled(*a):
            needs_compile()
            return hand_tuned(*a, compile_mode=mode)

        def tw_compiled(*a):
            needs_compile()
            return torchwise_run(*a, checks=False, compile_mode=mode, state=state)

        return [(f"{HAND} + compile", hand_compiled), ("torchwise +compile, checks=False", tw_compiled)]
    runners = [(HAND, hand_tuned), ("hand-tuned + CUDA graph (whole step)", hand_cuda_graph),
               ("seed template (fp32, DataLoader)", seed_template),
               ("torchwise default", lambda *a: torchwise_run(*a, state=state)),
               ("torchwise checks=False", lambda *a: torchwise_run(*a, checks=False, state=state))]
    for part in getattr(fast_module, "PARTS", ()):
        if part in BASE_PARTS:
            continue
        runners.append((f"torchwise +{part}", lambda *a, p=part: torchwise_run(*a, fast=[p], cuda_only=True, state=state)))
        runners.append((f"torchwise +{part}, checks=False",
                        lambda *a, p=part: torchwise_run(*a, fast=[p], checks=False, cuda_only=True, state=state)))
    # a device prefetcher (or anything like it) offered as a Trainer keyword that is off by default
    for key, prm in _trainer_parameters().items():
        if "prefetch" in key and prm.default in (False, None, 0):
            runners.append((f"torchwise {key}=True", lambda *a, k=key: torchwise_run(
                *a, extra={k: True}, cuda_only=True, state=state)))
    runners += [("torchwise data on device, checks=False", lambda *a: torchwise_run(*a, checks=False, on_device=True)),
                ("Lightning (bf16-mixed)", lightning_run), ("Accelerate (bf16)", accelerate_run)]
    return runners


def summarize(wl: Workload, out: dict[str, Any], args) -> None:
    steps_per_s = out["timed_steps"] / out["timed_s"]
    out["step_us"] = 1e6 / steps_per_s
    out["samples_per_s"] = steps_per_s * wl.batch
    if wl.name == "resnet":
        out["images_per_s"] = out["value"] = out["samples_per_s"]
    elif wl.name == "mlp":
        out["value"] = out["step_us"]
    else:
        out["tokens_per_s"] = out["value"] = out["samples_per_s"] * wl.tokens_per_sample
        if args.peak_tflops:
            out["mfu"] = out["tokens_per_s"] * wl.flops_per_token / (args.peak_tflops * 1e12)
    out["unit"] = wl.unit()


def speed(entry: dict[str, Any]) -> float | None:
    """Higher is faster, whatever the unit."""
    if entry.get("status") != "ok":
        return None
    return 1.0 / entry["step_us"]


class Bench:
    def __init__(self, args):
        self.args = args
        self.started = time.perf_counter()
        self.flags = self._flags()
        self.report: dict[str, Any] = {"meta": self._meta(), "workloads": {}}

    def _flags(self):
        return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
                torch.backends.cudnn.deterministic, torch.get_float32_matmul_precision())

    def restore_flags(self) -> None:
        """Each contender starts from torch's defaults: a Trainer's TF32/benchmark switches are global."""
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.deterministic, precision) = self.flags
        torch.set_float32_matmul_precision(precision)
        torch.use_deterministic_algorithms(False)

    def _meta(self) -> dict[str, Any]:
        a, dev = self.args, self.args.dev
        meta: dict[str, Any] = {
            "device": str(dev), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "python": platform.python_version(), "cpus": os.cpu_count(), "quick": a.quick,
            "compile_mode": a.compile_mode, "peak_tflops": a.peak_tflops, "budget_s": a.budget_s,
            "argv": sys.argv[1:], "targets": TARGETS,
            "timed": "wall time (perf_counter) of N training iterations after W warm-up iterations, between two "
                     "torch.cuda.synchronize() calls; each iteration = batch fetch + forward + loss + backward + "
                     "optimizer step + the contender's per-step work; set-up and the first step (compile, capture) "
                     "are reported separately (setup_s, first_step_s) and not in the throughput",
            "mfu": "model FLOPs per token = 6*N (all parameters, tied head once) + 12*L*d*T (attention), "
                   "divided by the peak",
        }
        if dev.type == "cuda":
            meta["gpu"] = torch.cuda.get_device_name(dev)
            meta["gpu_memory_gib"] = round(torch.cuda.get_device_properties(dev).total_memory / 2**30, 1)
        try:
            import torchwise
            from torchwise.train.speed import fast as fast_module

            meta["torchwise"] = torchwise.__version__
            meta["fast_parts"] = list(getattr(fast_module, "PARTS", ()))
            meta["trainer_keywords_of_interest"] = [k for k in _trainer_parameters()
                                                    if any(w in k for w in ("prefetch", "graph", "fast", "compile"))]
        except Exception as exc:  # the bench still runs the hand loops
            meta["torchwise"] = f"import failed: {exc}"
        for mod in ("torchvision", "lightning", "pytorch_lightning", "accelerate"):
            try:
                meta[mod] = __import__(mod).__version__
            except Exception:
                meta[mod] = None
        return meta

    def save(self) -> None:
        self.report["meta"]["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        if self.args.json:
            path = Path(self.args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(json.dumps(self.report, indent=2, default=str))
            tmp.replace(path)

    def remaining(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.started)

    def run_one(self, wl: Workload, name: str, fn: Callable, compile_phase: bool) -> None:
        entries = self.report["workloads"][wl.name]["contenders"]
        need = 60.0 if compile_phase else 8.0
        limit = min(self.args.compile_timeout_s if compile_phase else self.args.contender_timeout_s, self.remaining())
        entry: dict[str, Any]
        if any(s in name for s in self.args.skip):
            entry = {"status": "skipped", "reason": "--skip"}
        elif limit < need:
            entry = {"status": "skipped", "reason": f"time budget: {max(0, self.remaining()):.0f} s left of "
                                                    f"--budget-s {self.args.budget_s:.0f}"}
        else:
            self.restore_flags()
            torch.manual_seed(0)
            start = time.perf_counter()
            try:
                with time_limit(limit):
                    entry = {"status": "ok", **fn(wl, self.args.dev, self.args)}
                summarize(wl, entry, self.args)
            except Skip as exc:
                entry = {"status": "skipped", "reason": str(exc)}
            except BaseException as exc:  # one failing contender must not lose the others' numbers
                if isinstance(exc, KeyboardInterrupt):
                    raise
                entry = {"status": "error", "error": f"{type(exc).__name__}: {str(exc).strip()[:1500]}",
                         "traceback": traceback.format_exc()[-3000:]}
            entry["wall_s"] = round(time.perf_counter() - start, 2)
            self.cleanup(compile_phase)
        entries[name] = entry
        self.add_ratios(wl)
        print(f"  [{wl.name}] {self.line(wl, name, entry)}", flush=True)
        self.save()

    def cleanup(self, compiled: bool) -> None:
        gc.collect()
        if compiled:
            with contextlib.suppress(Exception):
                torch._dynamo.reset()
        if self.args.dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def add_ratios(self, wl: Workload) -> None:
        entries = self.report["workloads"][wl.name]["contenders"]
        base = speed(entries.get(HAND, {}))
        for entry in entries.values():
            s = speed(entry)
            if s is not None and base:
                entry["speed_vs_hand_tuned"] = s / base  # > 1: faster than the hand-tuned eager loop

    def line(self, wl: Workload, name: str, e: dict[str, Any]) -> str:
        if e["status"] != "ok":
            why = e.get("reason") or e.get("error", "")
            return f"{name:<42} {e['status'].upper()}: {why.splitlines()[0][:150] if why else ''}"
        if wl.name == "mlp":
            value = f"{e['step_us']:>10.1f} us/step"
        elif wl.name == "resnet":
            value = f"{e['images_per_s']:>10.0f} img/s  "
        else:
            value = f"{e['tokens_per_s']:>10.0f} tok/s  " + (f" MFU {100 * e['mfu']:5.1f}%" if "mfu" in e else "")
        ratio = e.get("speed_vs_hand_tuned")
        extra = f"  x{ratio:.2f} vs hand" if ratio is not None else ""
        if name.startswith("torchwise") and ratio is not None and self.args.dev.type == "cuda":
            extra += "  ok" if ratio >= 0.98 else "  SLOWER"
        return (f"{name:<42} {value}{extra}   (setup {e['setup_s']:.1f}s, first step {e['first_step_s']:.2f}s, "
                f"{e['timed_steps']} steps in {e['timed_s']:.2f}s)")

    def table(self) -> None:
        a = self.args
        meta = self.report["meta"]
        print("\n" + "=" * 100)
        print(f"device {meta.get('gpu', meta['device'])}, torch {meta['torch']}, CUDA {meta['cuda']}, "
              f"torchwise {meta.get('torchwise')}, fast parts {meta.get('fast_parts')}")
        print(f"timed: {meta['timed']}")
        if a.peak_tflops:
            print(f"MFU: {meta['mfu']}: peak {a.peak_tflops:g} TFLOP/s"
                  + (" (H200 bf16 dense)" if a.peak_tflops == H200_BF16_PEAK_TFLOPS else " (--peak-tflops)"))
        if a.dev.type != "cuda":
            print("(a CPU run: it checks the script; the targets are for the H200)")
        for name, w in self.report["workloads"].items():
            print(f"\n{w['title']}   [target: {TARGETS[name]}; {TARGETS['all']}]")
            for cname, e in w["contenders"].items():
                print("  " + self.line(self.workloads[name], cname, e))
            check = self.target_check(name, w["contenders"])
            if check:
                print("  -> " + check)
                w["target_check"] = check
        print(f"\ntotal {time.perf_counter() - self.started:.0f} s" + (f"; JSON: {a.json}" if a.json else ""))

    def target_check(self, name: str, entries: dict[str, Any]) -> str:
        ok = {k: e for k, e in entries.items() if e.get("status") == "ok"}
        tw = {k: e for k, e in ok.items() if k.startswith("torchwise")}
        if not tw:
            return ""
        best_name, best = max(tw.items(), key=lambda kv: speed(kv[1]))
        if name == "resnet":
            hit = best["images_per_s"] >= 80_000
            what = f"best torchwise {best['images_per_s']:.0f} img/s"
        elif name == "mlp":
            hit = best["step_us"] <= 100
            what = f"best torchwise {best['step_us']:.1f} us/step"
        elif "mfu" in best:
            hit = best["mfu"] >= 0.47
            what = f"best torchwise MFU {100 * best['mfu']:.1f}%"
        else:
            return f"best torchwise {best['tokens_per_s']:.0f} tok/s ({best_name}); no MFU without --peak-tflops"
        default = tw.get("torchwise default", {}).get("speed_vs_hand_tuned")
        return (f"{what} ({best_name}): target {'met' if hit else 'NOT met'}"
                + (f"; torchwise default x{default:.2f} vs hand-tuned eager" if default else ""))

    def run(self, names: list[str]) -> None:
        workloads = self.workloads = {}
        for name in names:
            wl = make_workload(name, self.args.quick, self.args.steps_scale)
            workloads[name] = wl
            self.report["workloads"][name] = {"title": wl.title, "unit": wl.unit(), "batch": wl.batch,
                                              "warmup_steps": wl.warmup, "timed_steps": wl.steps,
                                              "seed_template_steps": list(wl.seed_steps),
                                              "flops_per_token": wl.flops_per_token or None,
                                              "target": TARGETS[name], "contenders": {}}
        for phase in (False, True):
            order = list(workloads.items())
            if phase:  # cheapest compile first: the MLP's 100 us target needs it most
                print(f"\ncompile phase (mode {self.args.compile_mode!r}; compile time is in first_step_s)")
                order.sort(key=lambda kv: ("mlp", "resnet", "gpt").index(kv[0]))
            for name, wl in order:
                if not phase:
                    print(f"\n{wl.title}")
                for cname, fn in contenders(wl, self.args.dev, self.args, phase):
                    self.run_one(wl, cname, fn, phase)
        self.table()
        self.save()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--device", default="auto", help="auto (cuda if present), cuda, cuda:N or cpu")
    p.add_argument("--only", default="resnet,mlp,gpt", help="comma-separated workloads")
    p.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (seconds, also on a CPU)")
    p.add_argument("--json", help="write every number here (updated after each contender)")
    p.add_argument("--compile-mode", default="reduce-overhead",
                   help="torch.compile mode for the compile contenders: reduce-overhead, max-autotune-no-cudagraphs, "
                        "default, or none to skip them")
    p.add_argument("--compile-only", default="resnet,mlp,gpt", help="workloads that get the compile contenders")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help=f"dense bf16 peak for MFU (default on a GPU: {H200_BF16_PEAK_TFLOPS:g}, the H200's)")
    p.add_argument("--budget-s", type=float, default=390.0,
                   help="whole-run budget: contenders that would start after it are skipped (and say so)")
    p.add_argument("--contender-timeout-s", type=float, default=90.0)
    p.add_argument("--compile-timeout-s", type=float, default=200.0)
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply every warm-up/timed step count")
    p.add_argument("--seed-workers", type=int, default=4, help="the seed template's DataLoader workers")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 on a CPU run, so that a shared machine does not distort it)")
    p.add_argument("--skip", default="", help="comma-separated substrings of contender names to skip")
    args = p.parse_args()
    args.dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                            else "cpu" if args.device == "auto" else args.device)
    if args.dev.type == "cuda":
        if args.dev.index is not None:  # set_device refuses a device without an index ("cuda")
            torch.cuda.set_device(args.dev)
        args.dev = torch.device("cuda", torch.cuda.current_device())
        if args.peak_tflops is None:
            args.peak_tflops = H200_BF16_PEAK_TFLOPS
    if args.threads or args.dev.type == "cpu":
        torch.set_num_threads(args.threads or 1)
    args.compile_only = [s for s in args.compile_only.split(",") if s]
    args.skip = [s for s in args.skip.split(",") if s]
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    bench = Bench(args)
    print(f"bench_gpu: device {bench.report['meta'].get('gpu', args.dev)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}; budget {args.budget_s:.0f} s; peak {args.peak_tflops} TFLOP/s", flush=True)
    bench.run(names)


if __name__ == "__main__":
    main()
