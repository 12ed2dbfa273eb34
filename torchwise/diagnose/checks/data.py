"""Data checks: validation augmentation, train/val overlap, shuffling, samplers, loader speed and
settings, batch sizes under BatchNorm, input shapes under cudnn.benchmark, input scale."""
from __future__ import annotations

import math
import os
import random
import re as _re
import statistics

import torch

from torchwise.diagnose.catalog import Finding


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
    if ds is None or id(ds) in w.val_aug_checked:
        return
    w.val_aug_checked.add(id(ds))
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
        w.val_aug_candidates.append({"dataset": id(ds), "site": info.site, "samples_checked": len({0, n // 2, n - 1}),
                                     "samples_that_changed": differs, "dataset_type": type(ds).__name__})


def decide(w) -> list[Finding]:
    out: list[Finding] = []
    h = w.hits
    # a loader that is also trained on (train accuracy computed over the train loader) is not validation data
    trained = {id(getattr(p.loader, "dataset", None)) for p in w.passes if p.steps > 0}
    for info in w.val_aug_candidates:
        if info["dataset"] in trained:
            continue
        out.append(Finding("val-augmentation", where=info["site"],
                           message=f"Reading the same validation sample twice gives different data "
                                   f"({info['samples_that_changed']} of {info['samples_checked']} samples of the "
                                   f"{info['dataset_type']} used for evaluation changed between two reads).",
                           evidence={k: v for k, v in info.items() if k != "dataset"}))
        break
    out.extend(_overlap(w))
    out.extend(_shuffle(w))
    for sid, recs in w.sampler_epochs.items():
        if len(recs) >= 2 and recs[0]["shuffle"] and len({r["epoch"] for r in recs}) == 1:
            out.append(Finding("sampler-epoch-not-set", where=recs[0]["site"],
                               message=f"The DistributedSampler was iterated {len(recs)} times and its epoch was "
                                       f"{recs[0]['epoch']} every time: each epoch used the same order.",
                               evidence={"passes": len(recs), "epoch": recs[0]["epoch"]}))
            break
    out.extend(_loader_speed(w))
    out.extend(_pin_memory(w))
    out.extend(_cudnn_benchmark(w))
    out.extend(_bn_small_batch(w))
    out.extend(loss_average_wrong_count(w))
    st = w.input_stats
    if st["n"] >= 2:
        reason = None
        if st["max_abs_mean"] > 20 or st["max_std"] > 30:
            reason = (f"the inputs have mean up to {st['max_abs_mean']:.4g} and standard deviation up to "
                      f"{st['max_std']:.4g} (max |x| = {st['max_abs']:.4g}); normalized inputs have mean ~0 and std ~1")
        elif st["scale_ratio"] > 1e3 and st.get("max_feature_std", 0) > 10:
            reason = (f"the input features have standard deviations that differ by a factor of "
                      f"{st['scale_ratio']:.3g} (largest {st['max_feature_std']:.4g})")
        if reason:
            out.append(Finding("unnormalized-input", where=st["where"], message=f"In {st['n']} checked batches {reason}.",
                               evidence={"max_abs_mean": st["max_abs_mean"], "max_std": st["max_std"],
                                         "feature_scale_ratio": st["scale_ratio"]}))
    return out


def _train_loader_site(w) -> str | None:
    for p in w.passes:
        if p.steps > 0:
            return p.site
    return None


def _chance_match(w) -> float:
    """The chance that a fresh sample matches one of the training samples seen, from how often the first
    training rows repeated each other: N rows with D distinct ones come from a space of about M equally likely
    samples, D = M (1 - exp(-N / M)); the training set then covers len(train_hashes) / M of it. 0 for a data
    set whose samples do not repeat (any real one)."""
    import math
    probe = getattr(w, "train_repeats", {"rows": 0, "repeats": 0})
    n, r = probe["rows"], probe["repeats"]
    if n < 200 or r < 5:
        return 0.0
    d = n - r
    lo, hi = float(d), float(d) * 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid * (1 - math.exp(-n / mid)) < d:
            lo = mid
        else:
            hi = mid
    return min(1.0, len(w.train_hashes) / hi)


def _overlap(w) -> list[Finding]:
    masked = _masked_verdicts(w)
    for v in masked.values():
        if v["overlap"]:  # judged on the rows of the output: whether or not the forward was hashed as an evaluation
            return [_masks_overlap_finding(v)]
    if not w.train_hashes or not w.eval_groups:
        return []
    fulls, partials, nones, on_train = [], [], [], []
    # a sample space so small that fresh samples repeat (8 values from {-1, 0, 1}): the share of the first
    # training rows that repeat an earlier one is the share of evaluation rows that match training by chance
    chance = _chance_match(w)
    trained = {id(getattr(p.loader, "dataset", None)) for p in w.passes if p.steps > 0}
    for g in w.eval_groups:
        hs = g["hashes"]
        if len(hs) < 5 or g["step"] == 0:  # before any training step: a baseline, not validation
            continue
        if _masked_group(masked, hs, w.train_hashes):
            nones.append((g, 0, len(hs)))  # rows held out of the training loss were evaluated
            continue
        if g.get("dataset") is not None and g["dataset"] in trained:
            # accuracy over the training data itself: fine next to a real validation set, a mistake alone
            hit = sum(x in w.train_hashes for x in hs)
            if hit >= 0.9 * len(hs):
                on_train.append((g, hit, len(hs)))
            continue
        hit = sum(x in w.train_hashes for x in hs)
        frac = hit / len(hs)
        if frac <= 2 * chance + 0.02:
            nones.append((g, hit, len(hs)))  # no more than training samples repeat each other by chance
            continue
        (fulls if frac >= 0.9 else partials if (frac > 0.02 and hit >= 5) else nones).append((g, hit, len(hs)))
    bad = partials or (fulls if not nones else []) or (on_train if not (fulls or partials or nones) else [])
    if not bad:
        return []
    g, hit, n = bad[0]
    return [Finding("train-val-overlap", where=g["where"],
                    message=f"{hit} of {n} samples evaluated here ({hit / n:.0%}) are identical to samples the model "
                            "was trained on.",
                    evidence={"overlapping": hit, "evaluated": n, "evaluations": len(w.eval_groups)})]


# One input shared by index masks (transductive learning: one forward over the whole graph, the loss on
# out[idx_train], evaluation on out[idx_val]): the same input rows are in every forward by design, and
# overlap is a matter of the output rows each side uses (followed.shared_input_masks).

def _masked_verdicts(w) -> dict:
    """Per output row count N: did an evaluation use rows held out of the training loss's rows (a real
    validation mask)? If not, and some evaluated row set reaches beyond the training rows while
    overlapping them (idx_val that starts inside idx_train, or every node), that is overlap. Evaluating
    exactly the training rows (training accuracy) alone is not judged here."""
    from torchwise.diagnose.checks.followed import shared_input_masks
    verdicts = {}
    for n, rec in shared_input_masks(w).items():
        train, held_out, best = rec["train"], False, None
        for sets in rec["eval"].values():
            for rows in sets:
                hit = len(rows & train)
                if hit <= 0.02 * len(rows) or hit < 5:
                    held_out = True
                elif hit < len(rows) and (best is None or hit / len(rows) < best[0] / best[1]):
                    best = (hit, len(rows))
        if not held_out and best is None:
            continue
        verdicts[n] = {"overlap": not held_out, "rows": n, "train_rows": len(train), "where": rec.get("where"),
                       "overlapping": best[0] if best else 0, "evaluated": best[1] if best else 0}
    return verdicts


def _masked_group(masked: dict, hs: list, train_hashes: set) -> bool:
    """Whether an evaluation group whose input rows were all trained on is one input shared by masks,
    with a held-out mask evaluated."""
    for n, verdict in masked.items():
        if not verdict["overlap"] and n and len(hs) % n == 0 and sum(x in train_hashes for x in hs) >= 0.9 * len(hs):
            return True
    return False


def _masks_overlap_finding(v: dict) -> Finding:
    return Finding("train-val-overlap", where=v["where"],
                   message=f"Training and evaluation use rows of one forward over the same {v['rows']} inputs (index "
                           f"masks, as in transductive graph learning), and {v['overlapping']} of the "
                           f"{v['evaluated']} rows evaluated ({v['overlapping'] / v['evaluated']:.0%}) are among "
                           f"the {v['train_rows']} rows the training loss uses: the evaluation and training masks "
                           "overlap.",
                   evidence={"overlapping": v["overlapping"], "evaluated": v["evaluated"], "rows_per_forward": v["rows"],
                             "training_rows": v["train_rows"]})


def _shuffle(w) -> list[Finding]:
    c = w.cls
    n = c.get("batches_multi", 0)
    if n >= 10 and c["counts"] is not None and int((c["counts"] > 0).sum()) >= 2 and c["single"] >= 0.5 * n:
        from torch.utils.data import SequentialSampler
        site = None
        for p in w.passes:
            if p.steps > 0 and isinstance(getattr(p.loader, "sampler", None), SequentialSampler):
                site = p.site
                break
        return [Finding("no-shuffle", where=site or c["where"],
                        message=f"{c['single']} of {n} training batches contain a single class: the data is "
                                f"ordered by label and not shuffled"
                                f"{' (the DataLoader uses shuffle=False)' if site else ''}.",
                        evidence={"single_class_batches": c["single"], "batches": n})]
    return []


def _loader_speed(w) -> list[Finding]:
    for p in w.passes:
        if p.steps < 3 or len(p.waits) < 5:
            continue
        waits, gaps = p.waits[2:], p.gaps[2:]
        if not gaps:
            continue
        med_wait = statistics.median(waits)
        frac = sum(waits) / max(sum(gaps), 1e-9)
        nw = getattr(p.loader, "num_workers", None)
        if nw is not None and nw >= (os.cpu_count() or 1):
            continue  # every core already loads data: more workers cannot help
        if med_wait > 0.020 and frac > 0.6:
            return [Finding("dataloader-bottleneck", where=p.site,
                            message=f"{frac:.0%} of each training step is spent waiting for the next batch "
                                    f"({med_wait * 1000:.1f} ms median per batch; num_workers={nw}).",
                            evidence={"wait_fraction": frac, "median_wait_ms": med_wait * 1000, "num_workers": nw})]
    return []


def _pin_memory(w) -> list[Finding]:
    if not w.roots:
        return []
    on_cpu = all(next(r.module.parameters()).device.type == "cpu" for r in w.roots.values())
    if not on_cpu:
        return []
    pinned = [p for p in w.passes if getattr(p.loader, "pin_memory", False)]
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

    st = w.bench_shapes
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
    for rec in getattr(w, "bn_counts", {}).values():
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
    return [Finding("bn-small-batch", where=_train_loader_site(w) or w.bn_where,
                    message=f"{name} was trained on batches of {int(batch)} samples{per} (median of {n} training "
                            f"forward passes; smallest batch {smallest}): its mean and variance per channel are "
                            "estimated from too few values.",
                    evidence={"median_batch": batch, "values_per_channel": values, "smallest_batch": smallest,
                              "forwards": n, "layer": name})]


# --------------------------------------------------------------------------- loss-average-wrong-count

_NUMBER = _re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])|"
                      r"(?<![\w.])[-+]?\d+[eE][-+]?\d+(?![\w.])")
AVG_MIN_DIGITS = 4       # a printed number must carry this many significant digits to be compared at all
AVG_ONE_EPOCH_DIGITS = 6  # one epoch's evidence is enough only with this many
AVG_MIN_GAP = 0.1        # the wrong formula's value differs from the right one's by at least 10%


def _printed_numbers(text: str) -> list[tuple[float, int, float]]:
    """(value, significant digits, half a unit of its last digit) of each decimal number in `text`."""
    out = []
    for m in _NUMBER.finditer(text):
        tok = m.group(0)
        mant, _, exp = tok.lower().partition("e")
        mant = mant.lstrip("+-")
        digits = mant.replace(".", "").lstrip("0")
        sig = len(digits)
        if sig == 0:
            continue
        decimals = len(mant.split(".", 1)[1]) if "." in mant else 0
        try:
            value = float(tok)
            half = 0.5 * 10.0 ** (int(exp or 0) - decimals)
        except (ValueError, OverflowError):
            continue
        out.append((value, sig, half))
    return out


def _epoch_formulas(w, p, vals: list[float]) -> tuple[dict, dict] | None:
    """The averages a script could print for training pass `p`: right ones and wrong ones, by name."""
    sizes = p.batch_sizes
    if p.n_batches < 2 or len(sizes) != p.n_batches or any(n is None or n <= 0 for n in sizes):
        return None
    if len(p.loss_idx) != p.n_batches or p.steps != p.n_batches:
        return None  # one backward() per batch: otherwise which loss goes with which batch is unknown
    losses = [vals[i] for i in p.loss_idx if i < len(vals)]
    if len(losses) != p.n_batches or not all(math.isfinite(v) for v in losses):
        return None
    seen = sum(sizes)
    batches = p.n_batches
    s_mean = sum(losses)                                   # a sum of per-batch losses
    s_per_sample = sum(v * n for v, n in zip(losses, sizes))  # a sum of loss * batch size
    try:
        dataset = len(p.loader.dataset)
    except Exception:  # an IterableDataset without a length
        dataset = None
    try:
        sampler = len(p.loader.sampler)
    except Exception:
        sampler = None
    try:
        n_loader = len(p.loader)
    except Exception:
        n_loader = None
    right = {"sum(loss*n)/samples": s_per_sample / seen, "sum(loss)/batches": s_mean / batches}
    if sampler:
        right["sum(loss*n)/len(sampler)"] = s_per_sample / sampler
    if n_loader:
        right["sum(loss)/len(loader)"] = s_mean / n_loader
    wrong = {}
    if dataset and sampler and dataset != sampler:
        wrong["sum(loss*n)/len(dataset)"] = s_per_sample / dataset
    wrong["sum(loss*n)/batches"] = s_per_sample / batches
    if n_loader:
        wrong["sum(loss*n)/len(loader)"] = s_per_sample / n_loader
    if p.mean_losses and not p.other_losses:  # every checked loss was a mean: a sum of them is per batch
        wrong["sum(loss)/samples"] = s_mean / seen
        if dataset:
            wrong["sum(loss)/len(dataset)"] = s_mean / dataset
    # a wrong formula counts only where it gives a clearly different number from every right one
    wrong = {k: v for k, v in wrong.items()
             if all(abs(v - r) > AVG_MIN_GAP * max(abs(r), 1e-12) for r in right.values())}
    info = {"samples": seen, "batches": batches, "dataset": dataset, "sampler": sampler,
            "true_mean": s_per_sample / seen}
    return (right, wrong, info) if wrong else None


def _close(value: float, half: float, target: float) -> bool:
    return abs(value - target) <= half + 2e-6 * abs(target)  # printed rounding, and float32 sums in the script


def loss_average_wrong_count(w) -> list[Finding]:
    """The epoch's average loss the script printed is its loss sum divided by the wrong count.

    For each training pass over a loader that ran to its end (one backward() per batch), the averages a
    script can print are computed from the losses backward() saw and the batch sizes the loader returned:
    the right ones (a sum of loss x batch size over the samples drawn, a sum of batch losses over the
    batches) and the wrong ones (over len(loader.dataset) when the sampler draws a different number,
    over the batches, or a sum of mean losses over the samples). Evidence is a number printed after that
    pass (before the next one ended) that equals a wrong formula's value to every printed digit (at least
    4 significant ones), equals no right formula's value, and differs from the right ones by 10% or more:
    in two epochs, or in one with 6 significant digits or more. Any epoch whose printed numbers match a
    right formula instead makes the run undecided (not reported)."""
    if not getattr(w, "printed", None) or w.driven:
        return []
    passes = [p for p in w.passes if p.steps > 0 and p.ended and p.closed]
    if not passes:
        return []
    vals = w.loss_values()
    by_tag: dict[int, list[tuple[str, str | None]]] = {}
    for tag, text, where in w.printed:
        by_tag.setdefault(tag, []).append((text, where))
    hits: dict[str, list[dict]] = {}
    right_seen = False
    for k, p in enumerate(passes, start=1):
        chunks = by_tag.get(k)
        if not chunks:
            continue
        forms = _epoch_formulas(w, p, vals)
        if forms is None:
            continue
        right, wrong, info = forms
        for text, where in chunks:
            for value, sig, half in _printed_numbers(text):
                if sig < AVG_MIN_DIGITS:
                    continue
                if any(_close(value, half, r) for r in right.values()):
                    right_seen = True
                    continue
                for name, target in wrong.items():
                    if _close(value, half, target):
                        hits.setdefault(name, []).append(dict(info, epoch=k, printed=value, digits=sig,
                                                              wrong_value=target, site=where or p.site))
                        break
    if right_seen or len(hits) != 1:
        return []
    (name, evs), = hits.items()
    epochs = sorted({e["epoch"] for e in evs})
    if len(epochs) < 2 and max(e["digits"] for e in evs) < AVG_ONE_EPOCH_DIGITS:
        return []
    e = evs[0]
    what = {
        "sum(loss*n)/len(dataset)": f"the sum of loss x batch size divided by len(loader.dataset) = {e['dataset']}, "
                                    f"while the loader's sampler drew {e['samples']} samples in the epoch",
        "sum(loss*n)/batches": f"the sum of loss x batch size (a per-sample sum) divided by the number of batches "
                               f"({e['batches']})",
        "sum(loss*n)/len(loader)": f"the sum of loss x batch size (a per-sample sum) divided by len(loader) "
                                   f"({e['batches']} batches)",
        "sum(loss)/samples": f"the sum of the batches' mean losses divided by the number of samples "
                             f"({e['samples']}) instead of the number of batches ({e['batches']})",
        "sum(loss)/len(dataset)": f"the sum of the batches' mean losses divided by len(loader.dataset) "
                                  f"({e['dataset']}) instead of the number of batches ({e['batches']})",
    }[name]
    return [Finding("loss-average-wrong-count", where=e["site"],
                    message=f"The epoch loss the script printed ({e['printed']:.6g}, after training pass "
                            f"{e['epoch']} over the loader; {len(epochs)} pass(es) like it) is {what}: the mean "
                            f"loss of that pass was {e['true_mean']:.6g}.",
                    evidence={"formula": name, "printed": e["printed"], "true_mean": e["true_mean"],
                              "epochs": epochs, "samples_drawn": e["samples"], "batches": e["batches"],
                              "dataset_len": e["dataset"], "sampler_len": e["sampler"]})]

