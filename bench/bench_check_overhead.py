"""Overhead of the mistake checker on a plain hand-written training loop, measured in one run.

    python bench/bench_check_overhead.py [--steps 240] [--block 20] [--threads N]

Arms, interleaved in blocks so that machine noise hits all of them alike:
  plain    the loop alone
  trainer  the loop driving a Watcher the way the Trainer does (local hooks, loss_scope,
           observe_backward; deep checks in the first 5 steps, then every 50th)   target <= 5%
  check    the loop under `torchwise check`'s global instrumentation (TorchFunctionMode on every op,
           global module hooks in deep steps) - informational: a check run is a few hundred steps
Prints the median step time of each arm and the ratios; exits 1 if the trainer arm exceeds 5%.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn


def make_model() -> nn.Module:
    # mid-size: ~1.9M parameters, a conv stem plus an MLP head, BatchNorm and Dropout
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 384), nn.ReLU(), nn.Dropout(0.1), nn.Linear(384, 384), nn.ReLU(),
        nn.Linear(384, 10),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="measured steps per arm")
    ap.add_argument("--block", type=int, default=4, help="steps per arm before switching arms")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-check-arm", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from torchwise.diagnose.watch import Watcher

    torch.manual_seed(0)
    # a learnable, balanced task (each class adds its own pattern), so the loop is a correct one
    y = torch.arange(args.batch * 8) % 10
    x = torch.randn(args.batch * 8, 3, 32, 32) + torch.randn(10, 3, 32, 32)[y]
    arms = ["plain", "trainer"] + ([] if args.no_check_arm else ["check"])
    state = {}
    for arm in arms:
        model = make_model()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        w = None
        if arm == "trainer":
            w = Watcher(deep_first=5, deep_every=50)
            w.attach(model, opt)
            w.phase("train")
        state[arm] = {"model": model, "opt": opt, "watcher": w, "times": [], "i": 0}
    loss_fn = nn.CrossEntropyLoss()

    def step(arm: str) -> float:
        s = state[arm]
        model, opt, w = s["model"], s["opt"], s["watcher"]
        i = (s["i"] * args.batch) % len(x)
        s["i"] += 1
        xb, yb = x[i:i + args.batch], y[i:i + args.batch]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(xb)
        if w is not None:
            with w.loss_scope():
                loss = loss_fn(out, yb)
            w.observe_backward(loss)
        else:
            loss = loss_fn(out, yb)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    check_watcher = None
    for arm in arms:  # warm-up (allocator, first deep steps are part of the measured run below)
        for _ in range(3):
            if arm == "check":
                check_watcher = check_watcher or Watcher(check_mode=True, deep_first=5, deep_every=50).attach()
            step(arm)
            if arm == "check":
                check_watcher.detach()
                check_watcher.attached = False
    measured = 0
    rounds = 0
    while measured < args.steps:
        rounds += 1
        for arm in (arms if rounds % 2 else arms[::-1]):  # alternate the order: no arm always runs first
            if arm == "check":
                cw = Watcher(check_mode=True, deep_first=5, deep_every=50)
                cw.steps = measured  # keep the deep-step schedule of one continuous run
                cw.attach()
            for _ in range(args.block):
                state[arm]["times"].append(step(arm))
            if arm == "check":
                cw.detach()
        measured += args.block

    med = {arm: statistics.median(state[arm]["times"]) for arm in arms}
    mean = {arm: statistics.fmean(state[arm]["times"]) for arm in arms}
    params = sum(p.numel() for p in state["plain"]["model"].parameters())
    print(f"model: {params / 1e6:.2f}M parameters, batch {args.batch}, {args.steps} steps per arm, "
          f"{torch.get_num_threads()} thread(s)")
    for arm in arms:
        print(f"  {arm:8s} median {med[arm] * 1000:7.2f} ms/step   mean {mean[arm] * 1000:7.2f} ms/step   "
              f"ratio (mean) {mean[arm] / mean['plain']:.3f}")
    ratio = mean["trainer"] / mean["plain"]
    findings = state["trainer"]["watcher"].findings()
    print(f"trainer-path overhead: {100 * (ratio - 1):+.1f}% per step (mean, deep checks every 50 steps included; "
          f"median {100 * (med['trainer'] / med['plain'] - 1):+.1f}%); "
          f"findings on this correct loop: {[f.id for f in findings]}")
    return 0 if ratio <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
