"""Data checks: validation augmentation, shuffling, samplers, loader speed and settings, batch sizes under
BatchNorm, input shapes under cudnn.benchmark, input scale. Two families have modules of their own, called
from decide() here: train/val overlap (overlap.py) and the printed epoch loss (loss_average.py)."""
from __future__ import annotations

import os
import random
import statistics

import torch

from torchwise.diagnose.catalog import Finding
from torchwise.diagnose.checks.loss_average import loss_average_wrong_count
from torchwise.diagnose.checks.overlap import train_val_overlap


def _rng_state():
    import numpy as np
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _set_rng_state(state) -> None:
    import numpy as np
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        import numpy as np
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        if hasattr(a, "tobytes") and hasattr(b, "tobytes"):  # PIL images
            return a.tobytes() == b.tobytes()
        return bool(a == b)
    except Exception:
        return True


def check_val_augmentation(w, info) -> None:
    """Read the same validation samples twice: a deterministic dataset returns identical items."""
    ds = getattr(info.loader, "dataset", None)
    if ds is None or id(ds) in w.loaders.val_aug_checked:
        return
    w.loaders.val_aug_checked.add(id(ds))
    try:
        n = len(ds)
    except TypeError:
        return
    if n == 0:
        return
    state = _rng_state()
    differs = 0
    try:
        for i in sorted({0, n // 2, n - 1}):
            if not _same(ds[i], ds[i]):
                differs += 1
        if differs and n >= 2:
            # items drawn from the random state alone, whatever the index (a data set that generates its
            # samples, like a parity task's): not augmentation of fixed samples
            _set_rng_state(state)
            first = ds[0]
            _set_rng_state(state)
            if _same(first, ds[n - 1]):
                return
    except Exception:
        return
    finally:
        _set_rng_state(state)
    if differs:
        w.loaders.val_aug_candidates.append({"dataset": id(ds), "site": info.site, "samples_checked": len({0, n // 2, n - 1}),
                                     "samples_that_changed": differs, "dataset_type": type(ds).__name__,
                                     "indices": _sampled_indices(info.loader)})


def _sampled_indices(loader) -> frozenset | None:
    """The dataset indices a loader's sampler draws from, where the sampler names them (SubsetRandomSampler,
    a sampler over a list of indices); None for a sampler over the whole dataset or one that does not say."""
    for s in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        idx = getattr(s, "indices", None)
        if idx is not None:
            try:
                return frozenset(int(i) for i in idx)
            except (TypeError, ValueError):
                return None
    return None


def decide(w) -> list[Finding]:
    out: list[Finding] = []
    out.extend(_val_augmentation(w))
    out.extend(train_val_overlap(w))
    out.extend(_shuffle(w))
    out.extend(_sampler_epoch(w))
    out.extend(_loader_speed(w))
    out.extend(_pin_memory(w))
    out.extend(_cudnn_benchmark(w))
    out.extend(_bn_small_batch(w))
    out.extend(loss_average_wrong_count(w))
    out.extend(_unnormalized_input(w))
    return out


def _val_augmentation(w) -> list[Finding]:
    for info in w.loaders.val_aug_candidates:
        if _also_trained_on(w, info):
            continue
        return [Finding("val-augmentation", where=info["site"],
                        message=f"Reading the same validation sample twice gives different data "
                                f"({info['samples_that_changed']} of {info['samples_checked']} samples of the "
                                f"{info['dataset_type']} used for evaluation changed between two reads).",
                        evidence={k: v for k, v in info.items() if k not in ("dataset", "indices")})]
    return []


def _also_trained_on(w, info) -> bool:
    """Whether the evaluated samples are also trained on: train accuracy computed over the train loader is
    not validation. A validation split drawn by a sampler from the training dataset itself (a
    SubsetRandomSampler over held-out indices) is validation, augmented with the training transform."""
    train_idx: set[int] = set()
    trained = {id(p.loader): p.loader for p in w.loaders.passes
               if p.steps > 0 and id(getattr(p.loader, "dataset", None)) == info["dataset"]}
    for loader in trained.values():  # once per loader, not once per epoch
        idx = _sampled_indices(loader)
        if idx is None:  # trained over the whole dataset
            return True
        train_idx |= idx
    evaluated = info["indices"]
    if not train_idx:
        return False
    return evaluated is None or len(evaluated & train_idx) * 2 > len(evaluated)


def _sampler_epoch(w) -> list[Finding]:
    for sid, recs in w.loaders.sampler_epochs.items():
        if len(recs) >= 2 and recs[0]["shuffle"] and len({r["epoch"] for r in recs}) == 1:
            return [Finding("sampler-epoch-not-set", where=recs[0]["site"],
                            message=f"The DistributedSampler was iterated {len(recs)} times and its epoch was "
                                    f"{recs[0]['epoch']} every time: each epoch used the same order.",
                            evidence={"passes": len(recs), "epoch": recs[0]["epoch"]})]
    return []


def _unnormalized_input(w) -> list[Finding]:
    st = w.inputs.input_stats
    if st["n"] < 2:
        return []
    reason = None
    if st["max_abs_mean"] > 20 or st["max_std"] > 30:
        reason = (f"the inputs have mean up to {st['max_abs_mean']:.4g} and standard deviation up to "
                  f"{st['max_std']:.4g} (max |x| = {st['max_abs']:.4g}); normalized inputs have mean ~0 and std ~1")
    elif st["scale_ratio"] > 1e3 and st.get("max_feature_std", 0) > 10:
        reason = (f"the input features have standard deviations that differ by a factor of "
                  f"{st['scale_ratio']:.3g} (largest {st['max_feature_std']:.4g})")
    if not reason:
        return []
    return [Finding("unnormalized-input", where=st["where"], message=f"In {st['n']} checked batches {reason}.",
                    evidence={"max_abs_mean": st["max_abs_mean"], "max_std": st["max_std"],
                              "feature_scale_ratio": st["scale_ratio"]})]


def _train_loader_site(w) -> str | None:
    for p in w.loaders.passes:
        if p.steps > 0:
            return p.site
    return None


def _single_class_by_chance(o: dict) -> float:
    """How many of the batches seen would hold a single class if they were shuffled: sum over batches of
    sum_k p_k ** size, with p the class shares of every label seen. Rare positives in batches of 8 give mostly
    single-class batches however well they are shuffled (3% positives: 78% of them)."""
    p = o["counts"].double() / max(1, int(o["counts"].sum()))
    return sum(k * float((p ** size).sum()) for size, k in o["sizes"].items())


def _shuffle(w) -> list[Finding]:
    """no-shuffle: far more single-class batches than shuffled batches of these class shares would hold (sorted
    data), not merely many of them (imbalanced classes in small batches); judged per classification loss (per
    number of classes), for a multi-task step's losses each have their own labels."""
    c = w.loss_watch.cls
    for o in c.get("order", {}).values():
        n = o["batches"]
        if n < 10 or int((o["counts"] > 0).sum()) < 2 or o["single"] < 0.5 * n \
                or o["single"] < _single_class_by_chance(o) + 0.4 * n:
            continue
        from torch.utils.data import SequentialSampler
        site = None
        for p in w.loaders.passes:
            if p.steps > 0 and isinstance(getattr(p.loader, "sampler", None), SequentialSampler):
                site = p.site
                break
        return [Finding("no-shuffle", where=site or c["where"],
                        message=f"{o['single']} of {n} training batches contain a single class: the data is "
                                f"ordered by label and not shuffled"
                                f"{' (the DataLoader uses shuffle=False)' if site else ''}.",
                        evidence={"single_class_batches": o["single"], "batches": n})]
    return []


def _loader_speed(w) -> list[Finding]:
    """dataloader-bottleneck: most of each training step waits for the next batch. A warning where more
    workers surely help: the wait is not the process's own CPU work (reading files, decoding in a library
    that releases the GIL, sleeping on I/O), or the model is on an accelerator that idles meanwhile. CPU work
    for a model on the CPU is an info hint: loading and computing share the same cores there."""
    for p in w.loaders.passes:
        if p.steps < 3 or len(p.waits) < 5:
            continue
        waits, gaps, cpu, queued = p.waits[2:], p.gaps[2:], p.cpu_waits[2:], p.queued_waits[2:]
        blocked = p.blocked_waits[2:]
        if not gaps:
            continue
        med_wait = statistics.median(waits)
        frac = sum(waits) / max(sum(gaps), 1e-9)
        nw = getattr(p.loader, "num_workers", None)
        if nw is not None and nw >= (os.cpu_count() or 1):
            continue  # every core already loads data: more workers cannot help
        if med_wait > 0.020 and frac > 0.6:
            cpu_share = sum(cpu) / max(sum(waits), 1e-9)
            # a busy machine stretches the wall time of CPU work, and the time spent waiting for a core is
            # not I/O: the wait is "busy" when it is this process's CPU work or its turn for a core
            busy_share = (sum(cpu) + sum(queued)) / max(sum(waits), 1e-9)
            # a wait that is neither this process's work nor a block on I/O (no thread gave up its core, no page
            # read from disk) is time the machine gave elsewhere: nothing a worker would change
            blocked_share = sum(blocked) / max(len(blocked), 1)
            on_cpu = _trains_on_cpu(w)
            hint = _CPU_BOUND_LOADING if on_cpu and busy_share > 0.3 else \
                _MACHINE_WAIT if on_cpu and blocked_share < 0.5 else ""
            return [Finding("dataloader-bottleneck", where=p.site, severity="info" if hint else "",
                            maybe_fine=hint,
                            message=f"{frac:.0%} of each training step is spent waiting for the next batch "
                                    f"({med_wait * 1000:.1f} ms median per batch; num_workers={nw}).",
                            evidence={"wait_fraction": frac, "median_wait_ms": med_wait * 1000, "num_workers": nw,
                                      "cpu_share_of_wait": round(cpu_share, 2),
                                      "queued_share_of_wait": round(busy_share - cpu_share, 2),
                                      "blocked_share_of_waits": round(blocked_share, 2)})]
    return []


_MACHINE_WAIT = ("The loading thread neither worked nor blocked on I/O for most of the wait: the machine gave the time to "
                 "something else (other processes on the cores, a CPU quota). More workers would not make the batch "
                 "sooner; on a quiet machine the wait may be gone.")

_CPU_BOUND_LOADING = ("The model trains on the CPU and making the batch is CPU work of this process (transforms, "
                      "decoding): loading and computing share the same cores, so with a small model the batch "
                      "naturally takes most of the step. Workers help only where cores are idle.")


def _trains_on_cpu(w) -> bool:
    """Whether every watched model holds its parameters on the CPU (False when no model was seen)."""
    devices = [next(r.module.parameters(), None) for r in w.models.roots.values()]
    return bool(devices) and all(p is None or p.device.type == "cpu" for p in devices)


def _pin_memory(w) -> list[Finding]:
    if not w.models.roots:
        return []
    if not _trains_on_cpu(w):
        return []
    pinned = [p for p in w.loaders.passes if getattr(p.loader, "pin_memory", False)]
    if pinned:
        batches = sum(p.n_batches for p in pinned)
        return [Finding("pin-memory-misuse", where=pinned[0].site,
                        message=f"A DataLoader with pin_memory=True produced {batches} batches in {len(pinned)} "
                                "pass(es), but every model parameter is on the CPU: there is no GPU copy to speed up.",
                        evidence={"pin_memory": True, "model_device": "cpu", "batches": batches})]
    return []


# --------------------------------------------------------------------------- cudnn-benchmark-varying-shapes
def _cudnn_benchmark(w) -> list[Finding]:
    from torchwise.diagnose.shape_watch import LIMIT, show_shape  # the Trainer's own watch: the same limit

    st = w.inputs.bench_shapes
    shapes = st["shapes"]
    if w.driven or len(shapes) <= LIMIT:
        return []  # driven: the Trainer switches benchmark off by itself when the shapes vary
    from torchwise.diagnose.shape_watch import SAMPLE_SHAPES_KEPT
    n = f"{len(shapes)}+" if len(shapes) >= SAMPLE_SHAPES_KEPT else str(len(shapes))
    examples = [show_shape(k) for k in list(shapes)[:4]]
    steps = list(shapes.values())[:LIMIT + 1]
    if st["device"] == "cuda":
        cost = "cuDNN searched its convolution algorithms again for each new shape."
    else:  # the same script is run on GPUs, where the searches cost
        place = "CPU" if st["device"] == "cpu" else st["device"]
        cost = (f"This run is on the {place}, where the flag does nothing; on a GPU cuDNN searches its "
                "convolution algorithms again for each new shape.")
    return [Finding("cudnn-benchmark-varying-shapes", where=_train_loader_site(w) or st["where"],
                    message=f"torch.backends.cudnn.benchmark was True while the convolutional model {st['model']} was "
                            f"trained on inputs of {n} different sample shapes (batch dimension left out; e.g. "
                            f"{', '.join(examples)}) in {st['forwards']} forward passes; the first "
                            f"{len(steps)} appeared at optimizer steps {', '.join(map(str, steps))}. {cost}",
                    evidence={"sample shapes": len(shapes), "examples": examples, "first seen at steps": steps,
                              "training forwards": st["forwards"], "device": st["device"]})]


BN_MIN_BATCH = 8      # fewer samples than this in a batch ...
BN_MIN_VALUES = 64    # ... and fewer values than this per channel: each channel's statistics are noise


def _bn_small_batch(w) -> list[Finding]:
    """BatchNorm layers whose per-channel statistics come from too few values. A channel's mean and variance
    are taken over batch x positions: a BatchNorm2d at batch 2 over 32x32 maps has 2048 values per channel
    and is fine; a BatchNorm1d on (N, C) at batch 2 has 2. Judged per layer, on the median of its training
    forwards (a short last batch does not count): a few samples (< 8) and few values per channel (< 64)."""
    worst = None
    for rec in w.models.bn_counts.values():
        counts = rec["counts"]
        if len(counts) < 3:
            continue
        batch = statistics.median(n for n, _ in counts)
        values = statistics.median(m for _, m in counts)
        if batch < BN_MIN_BATCH and values < BN_MIN_VALUES and (worst is None or values < worst[1]):
            worst = (batch, values, len(counts), rec["name"], min(n for n, _ in counts))
    if worst is None:
        return []
    batch, values, n, name, smallest = worst
    per = "" if values == batch else f" and {int(values)} values per channel (batch x positions)"
    return [Finding("bn-small-batch", where=_train_loader_site(w) or w.models.bn_where,
                    message=f"{name} was trained on batches of {int(batch)} samples{per} (median of {n} training "
                            f"forward passes; smallest batch {smallest}): its mean and variance per channel are "
                            "estimated from too few values.",
                    evidence={"median_batch": batch, "values_per_channel": values, "smallest_batch": smallest,
                              "forwards": n, "layer": name})]
