"""Trainer vs the seed article's hand-written loop, same CPU workload, same run.

Prints samples/s for each and the ratio (Trainer time / hand loop time; 1.00 = no overhead), for
the Trainer as it runs by default (with torchwise check's detectors attached) and with checks=False.
Times are the process' CPU time (one torch thread, no loader workers), so that other programs
running on the machine do not distort the ratio; on an idle machine wall time gives the same.
Lightning and Accelerate are timed too when they are installed.

How the ratio is measured. On a shared 2-core VM one fit of identical code varies by 3-5% from
run to run, more than the overhead being measured. So every runner runs once per round, in an
order shuffled each round, after a garbage collection; its ratio is the median over the rounds of (its time / the hand loop's
time in the same round), which cancels slow drifts of the machine, and the spread (quartiles of
those per-round ratios) is printed beside it. The hand loop also runs a second time as a runner of
its own ("hand-written, again"): identical code, so its ratio is the measurement's resolution in
this very run. A Trainer ratio within that distance of 1.00 is not distinguishable from none.

    python bench/bench_trainer.py [--epochs 3] [--repeats 20] [--hidden 256]
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SampleDataset(torch.utils.data.Dataset):
    """The same data behind a plain map-style Dataset: both loops fetch and collate sample by sample."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def make_workload(n: int, features: int, classes: int, hidden: int, kind: str, model_kind: str = "mlp"):
    g = torch.Generator().manual_seed(0)
    if model_kind == "cnn":  # small CNN on 3x32x32 images (CIFAR-sized)
        x = torch.randn(n, 3, 32, 32, generator=g)
        y = (x.mean(dim=(2, 3)) @ torch.randn(3, classes, generator=g)).argmax(1)
    else:
        x = torch.randn(n, features, generator=g)
        y = (x @ torch.randn(features, classes, generator=g)).argmax(1)
    dataset = TensorDataset(x, y) if kind == "tensors" else SampleDataset(x, y)

    def model():
        torch.manual_seed(0)
        if model_kind == "cnn":
            return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 8 * 8, classes))
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, hidden),
                             nn.ReLU(), nn.Linear(hidden, classes))

    return dataset, model


def hand_loop(dataset, build, epochs, batch_size):
    """The seed's template: zero_grad(set_to_none), forward, loss, backward, step, loss.item(), accuracy."""
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    device = torch.device("cpu")
    start = time.process_time()
    for _ in range(epochs):
        model.train()
        total_loss, correct, total = 0.0, 0, 0
        for data, target in loader:
            data, target = data.to(device, non_blocking=True), target.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            output = model(data)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            correct += (output.argmax(dim=1) == target).sum().item()
            total += target.size(0)
    return time.process_time() - start


def torchwise_trainer(dataset, build, epochs, batch_size, checks=True):
    import torchwise

    trainer = torchwise.Trainer(build(), lambda p: torch.optim.AdamW(p, lr=1e-3), train_data=dataset,
                                max_epochs=epochs, batch_size=batch_size, device="cpu", progress=False,
                                tensorboard=False, checks=checks)
    start = time.process_time()
    trainer.fit()
    return time.process_time() - start


def _lightning():
    import logging
    import warnings

    try:
        import lightning as L
    except ImportError:
        import pytorch_lightning as L  # the same Trainer, packaged under its older name
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # its start-up banners would bury the table
    warnings.filterwarnings("ignore", module="(pytorch_)?lightning")
    return L


def lightning_trainer(dataset, build, epochs, batch_size):
    L = _lightning()

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = build()

        def training_step(self, batch, _):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    start = time.process_time()
    trainer.fit(Module(), loader)
    return time.process_time() - start


def accelerate_loop(dataset, build, epochs, batch_size):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    start = time.process_time()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            acc.backward(loss)
            optimizer.step()
            loss.item()
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20,
                   help="rounds for the MLP workloads (the CNN gets half)")
    p.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 keeps timings stable on a shared machine)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    for model_kind, kind in (("mlp", "dataset"), ("mlp", "tensors"), ("cnn", "dataset")):
        if model_kind in args.models:
            run_workload(args, kind, model_kind)


def run_workload(args: argparse.Namespace, kind: str, model_kind: str = "mlp") -> None:
    samples = args.samples if model_kind == "mlp" else args.samples // 4
    repeats = args.repeats if model_kind == "mlp" else max(2, args.repeats // 2)  # a CNN fit takes ~5x longer
    dataset, build = make_workload(samples, 64, 10, args.hidden, kind, model_kind)
    runners = {"hand-written loop": hand_loop, "hand-written, again": hand_loop,
               "torchwise.Trainer": torchwise_trainer,
               "  (checks=False)": lambda *a: torchwise_trainer(*a, checks=False)}
    for name, fn, load in (("Lightning", lightning_trainer, _lightning),
                           ("Accelerate", accelerate_loop, lambda: __import__("accelerate"))):
        try:
            load()
            runners[name] = fn
        except ImportError:
            print(f"({name} not installed: skipped)")
    times: dict[str, list[float]] = {name: [] for name in runners}
    for fn in runners.values():  # warm-up: first-call costs (allocator, imports) out of the timings
        fn(dataset, build, 1, args.batch_size)
    names, order = list(runners), random.Random(0)
    for r in range(repeats):
        # What the run before leaves behind (its garbage, the allocator's state, the caches) shifts the
        # next one by a few percent on this scale: a fixed or merely rotated order always gives a runner
        # the same predecessor (it read identical code 1.6% apart), so each round is shuffled, and each
        # run starts after a full garbage collection (a Trainer's reference cycles would otherwise be
        # collected, and their memory returned, inside the next runner's timing).
        order.shuffle(names)
        for name in names:
            gc.collect()
            times[name].append(runners[name](dataset, build, args.epochs, args.batch_size))
    base = times["hand-written loop"]
    total = samples * args.epochs
    what = {"dataset": "a map-style Dataset (both fetch sample by sample: pure loop overhead)",
            "tensors": "a TensorDataset (torchwise serves it by batch indexing)"}[kind]
    net = f"MLP 64-{args.hidden}-{args.hidden}-10" if model_kind == "mlp" else "small CNN (2 conv+BN, 3x32x32)"
    print(f"workload: {net} on {what}, {samples} samples, batch {args.batch_size}, {args.epochs} epochs, AdamW, "
          f"CPU, {args.threads} thread(s); {repeats} rounds")
    for name, values in times.items():
        ratios = [t / b for t, b in zip(values, base)]
        low, mid, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        print(f"  {name:<20} {total / statistics.median(values):>10.0f} samples/s   ratio {statistics.median(ratios):.3f}"
              + (f"   (quartiles {low:.3f}-{high:.3f})" if name != "hand-written loop" else ""))


if __name__ == "__main__":
    main()
