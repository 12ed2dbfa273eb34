"""Training-loader throughput of the image task with data.cache = off / memory / disk, in one run.

    python bench/bench_image_cache.py [--images 1500] [--sizes 224,64] [--workers 0,2] [--epochs 2]

Writes --images real JPEG files (500x375, smooth random content plus noise, quality 90) into a
temporary folder (two class folders), prepares the task the way `torchwise train` does
(torchwise.data.tasks.prepare_task with data.image_size and data.cache set), then times a
DataLoader over the training split (batch 64, shuffled, train transform: random resized crop +
flip + normalize) for --epochs epochs, with 0 and 2 worker processes (persistent; their start-up is
included). Prints images/s per arm and the ratio against `off` measured in the same run, plus the
preparation time of each arm (scan + cache build; for disk also a second preparation that reuses
the cache). Sizes: 224 is the torchvision default input, 64 the smallcnn default for these images.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_jpegs(root: Path, count: int, seed: int = 0) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = root / ("a" if i % 2 == 0 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        coarse = Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).resize((500, 375), Image.BICUBIC)
        pixels = np.asarray(coarse, dtype=np.int16) + rng.integers(-12, 13, (375, 500, 3))
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / f"{i:05d}.jpg", quality=90)


def loader_rate(dataset, *, batch: int, workers: int, epochs: int) -> float:
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0, generator=torch.Generator().manual_seed(0))
    seen = 0
    started = time.perf_counter()
    for _ in range(epochs):
        for x, _y in loader:
            seen += x.shape[0]
    elapsed = time.perf_counter() - started
    del loader
    return seen / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--sizes", default="224,64", help="model input sides (data.image_size), comma-separated")
    ap.add_argument("--workers", default="0,2", help="DataLoader worker counts, comma-separated")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="measurements per arm, interleaved; the best is kept")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the main process (workers use 1)")
    ap.add_argument("--dir", help="use this folder for the images and the disk cache (default: a temporary one)")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from torchwise import config as cfg
    from torchwise.data.tasks import prepare_task

    sizes = [int(s) for s in args.sizes.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench_image_cache_") as tmp:
        base = Path(args.dir) if args.dir else Path(tmp)
        data, cache_dir = base / "images", base / "cache"
        if not data.exists():
            started = time.perf_counter()
            write_jpegs(data, args.images)
            print(f"wrote {args.images} JPEG files of 500x375 in {time.perf_counter() - started:.1f} s "
                  f"({sum(p.stat().st_size for p in data.rglob('*.jpg')) / args.images / 1024:.0f} KiB each)")
        print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
              f"batch {args.batch}, {args.epochs} epochs of the training split")
        rows = []
        for size in sizes:
            tasks = {}
            for mode in ("off", "memory", "disk"):
                config = cfg.resolve(flags={"data": str(data), "image_size": str(size)},
                                     sets=[f"data.cache={mode}", f"data.cache_dir={cache_dir}"])
                started = time.perf_counter()
                task = prepare_task(config, None, log=lambda _line: None)
                prepared = time.perf_counter() - started
                note = f"prepare {prepared:.1f} s"
                if mode == "disk":
                    started = time.perf_counter()
                    task = prepare_task(config, None, log=lambda _line: None)
                    note += f", again (reusing the cache) {time.perf_counter() - started:.1f} s"
                tasks[mode] = task
                print(f"  size {size:>3}  {mode:<6}  {len(task.train)} training images; {note}; "
                      f"{task.summary['cache'].split(': ', 1)[-1]}")
            # Interleaved (off, memory, disk, off, ...) so that load from other processes hits every arm alike.
            best: dict[tuple[str, int], float] = {}
            for repeat in range(args.repeats):
                for workers in worker_counts:
                    for mode, task in tasks.items():
                        rate = loader_rate(task.train, batch=args.batch, workers=workers, epochs=args.epochs)
                        best[mode, workers] = max(best.get((mode, workers), 0.0), rate)
                        print(f"  size {size:>3}  {mode:<6}  workers {workers}  run {repeat + 1}: {rate:8.1f} images/s")
            rows += [(size, mode, workers, rate) for (mode, workers), rate in best.items()]
        print(f"\nbest of {args.repeats} interleaved runs, {args.epochs} epochs each")
        print("size  workers   off img/s  memory img/s (x off)  disk img/s (x off)")
        for size in sizes:
            for workers in worker_counts:
                rate = {m: r for s, m, w, r in rows if s == size and w == workers}
                print(f"{size:>4}  {workers:>7}  {rate['off']:10.1f}  {rate['memory']:12.1f} ({rate['memory'] / rate['off']:4.2f}x)"
                      f"  {rate['disk']:10.1f} ({rate['disk'] / rate['off']:4.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
