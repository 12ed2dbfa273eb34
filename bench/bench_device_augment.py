"""BatchAugment (one batched resampling on the batch's device) vs torchvision.transforms.v2 per sample.

The baseline is what a DataLoader worker does today: for each image of the batch,
RandomResizedCrop + RandomHorizontalFlip + ToDtype(float32, scale=True) + Normalize, in a Python
loop, then torch.stack. BatchAugment does the same kind of work for the whole uint8 batch at once
(bilinear, no antialiasing; torchvision's crop is timed with antialias=True, its default, and
antialias=False). Prints images/s for each and the speed ratio, on the CPU (with the torch threads
this process has) and on CUDA when available (images already on the device; time includes the
random draws, not the host-to-device copy).

    python bench/bench_device_augment.py [--batch 256] [--repeats 5] [--threads N] [--cpu-time]

On a machine shared with other programs, `--threads 1 --cpu-time` gives the stable numbers (the
process' CPU time, which other programs do not inflate); with several threads on busy cores, OpenMP
threads wait for each other and wall times swing by 10x.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


CLOCK = time.perf_counter


def timed(fn, repeats: int, sync=lambda: None, clock=None) -> float:
    clock = clock or CLOCK
    fn()
    sync()                                        # warm-up (allocations, kernel selection)
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        sync()
        times.append(clock() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--cpu-time", action="store_true", help="time CPU runs by process CPU time, not wall time")
    args = parser.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)

    from torchvision.transforms import v2

    from torchwise.data.device_augment import BatchAugment

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, batch {args.batch}, "
          f"median of {args.repeats}, {'CPU' if args.cpu_time else 'wall'} time")
    print(f"{'images':>10} {'device':>6} {'method':>34} {'images/s':>11} {'vs tv loop':>10}")
    for side in (32, 224):
        images = torch.randint(0, 256, (args.batch, 3, side, side), dtype=torch.uint8,
                               generator=torch.Generator().manual_seed(0))
        results = {}
        for antialias in (True, False):
            per_sample = v2.Compose([v2.RandomResizedCrop(side, scale=(0.08, 1.0), antialias=antialias),
                                     v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                                     v2.Normalize(mean, std)])
            results[f"torchvision v2 loop, antialias={antialias}"] = (
                "cpu", timed(lambda: torch.stack([per_sample(img) for img in images]), args.repeats))
        augment = BatchAugment(size=side, scale=(0.08, 1.0), hflip=0.5, mean=mean, std=std)
        g = torch.Generator().manual_seed(0)
        results["BatchAugment"] = ("cpu", timed(lambda: augment(images, g), args.repeats))
        cl = images.contiguous(memory_format=torch.channels_last)
        results["BatchAugment, channels_last"] = ("cpu", timed(lambda: augment(cl, g), args.repeats))
        if torch.cuda.is_available():
            on_gpu = images.cuda()
            g_cuda = torch.Generator(device="cuda").manual_seed(0)
            results["BatchAugment (cuda generator)"] = (
                "cuda", timed(lambda: augment(on_gpu, g_cuda), args.repeats, torch.cuda.synchronize, time.perf_counter))
            results["BatchAugment (cpu generator)"] = (
                "cuda", timed(lambda: augment(on_gpu, g), args.repeats, torch.cuda.synchronize, time.perf_counter))
        baseline = results["torchvision v2 loop, antialias=True"][1]
        for name, (device, seconds) in results.items():
            print(f"{f'3x{side}x{side}':>10} {device:>6} {name:>34} {args.batch / seconds:>11,.0f} "
                  f"{baseline / seconds:>9.1f}x")


if __name__ == "__main__":
    main()
