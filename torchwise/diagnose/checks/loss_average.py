"""loss-average-wrong-count: the epoch loss a script prints, divided by the wrong count.

Its own module because it is a family of its own among the data checks: it reads what the script printed
(OutputTap), the losses backward() saw and the batch sizes each pass returned, and needs a number reader
and a table of formulas that no other check uses.
"""
from __future__ import annotations

import math
import re as _re
from dataclasses import dataclass
from typing import Any

from torchwise.diagnose.catalog import Finding

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
    if batches >= 3:  # `for i, batch in enumerate(...)` and then `/ i`: the last index, one less than the count
        wrong["sum(loss)/(batches-1)"] = s_mean / (batches - 1)
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
    if w.driven or not (w.loaders.printed or w.loaders.printed_by_step):
        return []
    candidates = _loader_epochs(w) + _hand_made_epochs(w)
    if not candidates:
        return []
    hits, right_seen = _printed_averages(w, candidates)
    if right_seen or len(hits) != 1:
        return []
    (name, evs), = hits.items()
    epochs = sorted({e["epoch"] for e in evs})
    if len(epochs) < 2 and max(e["digits"] for e in evs) < AVG_ONE_EPOCH_DIGITS:
        return []
    e = evs[0]
    what = _formula_words(name, e)
    return [Finding("loss-average-wrong-count", where=e["site"],
                    message=f"The epoch loss the script printed ({e['printed']:.6g}, after training pass "
                            f"{e['epoch']} {e['over']}; {len(epochs)} pass(es) like it) is {what}: the mean "
                            f"loss of that pass was {e['true_mean']:.6g}.",
                    evidence={"formula": name, "printed": e["printed"], "true_mean": e["true_mean"],
                              "epochs": epochs, "samples_drawn": e["samples"], "batches": e["batches"],
                              "dataset_len": e["dataset"], "sampler_len": e["sampler"]})]


def _loader_epochs(w) -> list[tuple[Any, list[tuple[str, str | None]]]]:
    """Each training pass over a loader that ran to its end, with what was printed after it (before the next
    one ended)."""
    passes = [p for p in w.loaders.passes if p.steps > 0 and p.ended and p.closed]
    by_tag: dict[int, list[tuple[str, str | None]]] = {}
    for tag, text, where in w.loaders.printed:
        by_tag.setdefault(tag, []).append((text, where))
    return [(p, by_tag[k]) for k, p in enumerate(passes, start=1) if by_tag.get(k)]


@dataclass
class _HandMadeEpoch:
    """The steps of a loop that makes its batches by hand (`X[perm[i:i + bs]]`), between two prints of the same
    line: what a loader pass is to _epoch_formulas (no loader, so no dataset or sampler length)."""
    batch_sizes: list
    loss_idx: list
    mean_losses: int
    other_losses: int
    site: str | None
    loader: Any = None

    @property
    def n_batches(self) -> int:
        return len(self.loss_idx)

    @property
    def steps(self) -> int:
        return len(self.loss_idx)


_ANY_NUMBER = _re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _hand_made_epochs(w) -> list[tuple[Any, list[tuple[str, str | None]]]]:
    """In a loop with no loader pass: the steps between two prints of one line (the same text but its numbers,
    printed from the same place) are its epoch, when each of those steps made one backward(). The first print's
    epoch starts at the first step."""
    ls = w.loss_watch
    last: dict[tuple, tuple[int, int]] = {}
    out = []
    for steps, n_losses, text, where in w.loaders.printed_by_step:
        line = (_ANY_NUMBER.sub("#", text.strip()), where)
        s0, l0 = last.get(line, (0, 0))
        last[line] = (steps, n_losses)
        idx = list(range(l0, min(n_losses, len(ls.losses))))
        if len(idx) < 2 or len(idx) != steps - s0 or any(i >= len(ls.loss_rows) for i in idx):
            continue
        rows = [ls.loss_rows[i] for i in idx]
        means = [ls.loss_is_mean[i] for i in idx]
        out.append((_HandMadeEpoch(batch_sizes=rows, loss_idx=idx, mean_losses=sum(m is True for m in means),
                                   other_losses=sum(m is False for m in means), site=where), [(text, where)]))
    return out


def _printed_averages(w, epochs: list) -> tuple[dict[str, list[dict]], bool]:
    """The numbers printed after each training epoch that equal a wrong formula's value (by the formula's
    name, with what the epoch was), and whether any printed number equals a right formula's value."""
    vals = w.loss_values()
    hits: dict[str, list[dict]] = {}
    right_seen = False
    for k, (p, chunks) in enumerate(epochs, start=1):
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
                        over = "of the hand-made batches" if isinstance(p, _HandMadeEpoch) else "over the loader"
                        hits.setdefault(name, []).append(dict(info, epoch=k, printed=value, digits=sig, over=over,
                                                              wrong_value=target, site=where or p.site))
                        break
    return hits, right_seen


def _formula_words(name: str, e: dict) -> str:
    """How the finding's message names wrong formula `name`, with the counts of the pass `e` it matched."""
    return {
        "sum(loss*n)/len(dataset)": f"the sum of loss x batch size divided by len(loader.dataset) = {e['dataset']}, "
                                    f"while the loader's sampler drew {e['samples']} samples in the epoch",
        "sum(loss*n)/batches": f"the sum of loss x batch size (a per-sample sum) divided by the number of batches "
                               f"({e['batches']})",
        "sum(loss*n)/len(loader)": f"the sum of loss x batch size (a per-sample sum) divided by len(loader) "
                                   f"({e['batches']} batches)",
        "sum(loss)/samples": f"the sum of the batches' mean losses divided by the number of samples "
                             f"({e['samples']}) instead of the number of batches ({e['batches']})",
        "sum(loss)/(batches-1)": f"the sum of the batches' losses divided by {e['batches'] - 1}, one less than the "
                                 f"number of batches ({e['batches']}: the last index of enumerate(), not the count)",
        "sum(loss)/len(dataset)": f"the sum of the batches' mean losses divided by len(loader.dataset) "
                                  f"({e['dataset']}) instead of the number of batches ({e['batches']})",
    }[name]
