"""CATALOG: every entry by id, gathered from the family modules, in the order `torchwise check --list` prints.

The order is the catalog's own (the order the entries were written in, which `--list`, reports that sort
findings by it and their readers rely on), not the families': so it is written out here, once.
"""
from __future__ import annotations

from torchwise.diagnose.catalog import data, environment, losses, model, optimization
from torchwise.diagnose.catalog.entry import Entry
from torchwise.errors import TorchwiseError

ORDER: tuple[str, ...] = (
    "missing-zero-grad",
    "eval-mode-missing",
    "train-mode-missing",
    "softmax-before-loss",
    "log-softmax-into-cross-entropy",
    "double-sigmoid",
    "labels-not-zero-based",
    "output-classes-mismatch",
    "wrong-loss-for-task",
    "params-not-in-optimizer",
    "unregistered-submodules",
    "no-gradient-flow",
    "loss-retains-graph",
    "lr-too-high",
    "lr-too-low",
    "exploding-gradients",
    "vanishing-gradients",
    "dead-relu",
    "nonfinite-loss",
    "nonfinite-input",
    "unnormalized-input",
    "loss-not-decreasing",
    "val-augmentation",
    "train-val-overlap",
    "no-shuffle",
    "sampler-epoch-not-set",
    "dataloader-bottleneck",
    "pin-memory-misuse",
    "bn-small-batch",
    "label-imbalance",
    "scheduler-stepped-per-batch",
    "plateau-on-train-loss",
    "clip-scaled-gradients",
    "clip-has-no-effect",
    "ddp-no-distributed-sampler",
    "cannot-overfit-batch",
    "symmetric-init",
    "compare-values-not-indices",
    "eval-without-no-grad",
    "accumulation-unscaled",
    "backward-in-autocast",
    "loss-average-wrong-count",
    "cudnn-benchmark-varying-shapes",
)


def in_order(entries: list[Entry]) -> dict[str, Entry]:
    """The entries by id, in ORDER; an id in a family and not in ORDER (or the reverse) is a catalog bug."""
    by_id = {e.id: e for e in entries}
    repeated = sorted({e.id for e in entries if sum(x.id == e.id for x in entries) > 1}
                      | {i for i in ORDER if ORDER.count(i) > 1})
    if repeated or set(by_id) != set(ORDER):
        raise TorchwiseError("the catalog's family modules and its ORDER do not list the same mistake ids",
                             values={"only in a family module": sorted(set(by_id) - set(ORDER)),
                                     "only in ORDER": sorted(set(ORDER) - set(by_id)), "listed twice": repeated},
                             fix="give each id one entry in one family module of torchwise/diagnose/catalog/ and "
                                 "one line in ORDER (torchwise/diagnose/catalog/entries.py)")
    return {i: by_id[i] for i in ORDER}


CATALOG: dict[str, Entry] = in_order(data.ENTRIES + environment.ENTRIES + losses.ENTRIES + model.ENTRIES
                                     + optimization.ENTRIES)
