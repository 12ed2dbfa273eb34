"""MixUp and CutMix of a training batch, on the batch's own device.

    mix = BatchMix(mixup=0.8, cutmix=1.0)                 # Beta(alpha, alpha) of each; 0 turns one off
    gen = torch.Generator(device=x.device).manual_seed(derive_seed(seed, rank, epoch, batch))
    x, y = mix(x, labels, gen)                            # y: a MixedTarget (or the labels, when both are off)
    loss = mixed_loss(loss_fn, model(x), y)               # lam * loss(out, a) + (1 - lam) * loss(out, b)

MixUp (Zhang et al. 2017): every sample i is blended with a partner perm[i], x = lam * x + (1 - lam) *
x[perm], one lam ~ Beta(alpha, alpha) per batch. It works on any floating input (images, tabular rows,
sequences of features). CutMix (Yun et al. 2019): a box of area ratio 1 - lam, centred at a uniform pixel,
is pasted from the partner into each image (N, C, H, W); where the box is clipped at the border, lam is set
to the share of pixels each image really kept, 1 - box area / (H * W). With both on, each batch is one or
the other (even odds), as timm does it.

The target: MixedTarget(a, b, lam) -- the sample's labels, its partner's, and the weight of its own --
rather than soft labels (N, C). Why: the loss the Trainer runs is the user's (loss=), and a loss that
takes class indices (class-weighted or focal losses, NLLLoss, a loss of a detector's head) keeps its exact
meaning as lam * loss(out, a) + (1 - lam) * loss(out, b); soft labels would need num_classes and a loss that
accepts probabilities. For cross entropy, with or without label smoothing, the two are the same number
(the loss is linear in the target): `MixedTarget.soft_labels()` gives the (N, C) form when one wants it,
and tests/unit/train/test_mixing.py checks it against torchvision's MixUp / CutMix.

Mixing is for training only: metrics (accuracy) are computed on validation batches, which are never
mixed, and a check of a batch's labels reads `labels_of(target)` (the unmixed ones).

Randomness: every draw comes from the generator the caller passes, seeded per batch, so a resumed run
mixes each batch exactly as an uninterrupted one would. The partners are a permutation drawn on the
generator's device; the scalars (which of the two, lam, the box centre) are drawn on the host from a
stream seeded by the generator's state, so a CUDA generator is never read back (no device sync). The
permutation is drawn after that state is read, so a generator reused for several batches gives each one
its own draws.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, NamedTuple

import torch

from torchwise.errors import TorchwiseError


class MixedTarget(NamedTuple):
    """The target of a mixed batch: each sample's labels `a`, its partner's `b` (= a[perm]), and `lam`, the
    weight of its own (the kept share of its pixels under CutMix)."""
    a: torch.Tensor
    b: torch.Tensor
    lam: float
    num_classes: int | None = None

    def loss(self, loss_fn: Callable[..., torch.Tensor], output: Any) -> torch.Tensor:
        """lam * loss_fn(output, a) + (1 - lam) * loss_fn(output, b)."""
        return self.lam * loss_fn(output, self.a) + (1.0 - self.lam) * loss_fn(output, self.b)

    def soft_labels(self, num_classes: int | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The same target as probabilities (N, C): lam * one_hot(a) + (1 - lam) * one_hot(b)."""
        classes = num_classes if num_classes is not None else self.num_classes
        if classes is None:
            raise TorchwiseError("Soft labels need the number of classes.", values={"labels shape": tuple(self.a.shape)},
                                 fix="Pass soft_labels(num_classes=C), or BatchMix(..., num_classes=C).")
        one_hot = torch.nn.functional.one_hot
        return (one_hot(self.a, classes).to(dtype).mul(self.lam)
                + one_hot(self.b, classes).to(dtype).mul(1.0 - self.lam))


def mixed_loss(loss_fn: Callable[..., torch.Tensor], output: Any, target: Any) -> torch.Tensor:
    """The loss of a batch whether or not it was mixed: target.loss(...) for a MixedTarget, else loss_fn."""
    if isinstance(target, MixedTarget):
        return target.loss(loss_fn, output)
    return loss_fn(output, target)


def labels_of(target: Any) -> Any:
    """The batch's own labels (what a check of the labels should see): `a` of a MixedTarget, else target."""
    return target.a if isinstance(target, MixedTarget) else target


# ---------------------------------------------------------------------------------------------- the arithmetic


def mixup_images(inputs: torch.Tensor, lam: float, perm: torch.Tensor) -> torch.Tensor:
    """lam * inputs + (1 - lam) * inputs[perm] (any shape (N, ...), floating point)."""
    return inputs.mul(lam) + inputs[perm].mul(1.0 - lam)


def cutmix_box(lam: float, height: int, width: int, cy: int, cx: int) -> tuple[int, int, int, int]:
    """(y1, y2, x1, x2): the CutMix paper's box of sides H * sqrt(1 - lam) and W * sqrt(1 - lam) centred at
    (cy, cx), clipped to the image (so its real area can be smaller)."""
    side = math.sqrt(1.0 - lam)
    half_h, half_w = int(height * side) // 2, int(width * side) // 2
    return max(cy - half_h, 0), min(cy + half_h, height), max(cx - half_w, 0), min(cx + half_w, width)


def kept_share(box: tuple[int, int, int, int], height: int, width: int) -> float:
    """1 - box area / image area: the share of its own pixels each image keeps (CutMix's corrected lam)."""
    y1, y2, x1, x2 = box
    return 1.0 - (y2 - y1) * (x2 - x1) / (height * width)


def cutmix_images(inputs: torch.Tensor, box: tuple[int, int, int, int], perm: torch.Tensor) -> torch.Tensor:
    """inputs with the box pasted from each image's partner inputs[perm] (N, C, H, W; any dtype)."""
    y1, y2, x1, x2 = box
    out = inputs.clone()
    out[:, :, y1:y2, x1:x2] = inputs[perm, :, y1:y2, x1:x2]
    return out


# ---------------------------------------------------------------------------------------------- the batch transform


class BatchMix:
    """BatchMix(mixup=0.0, cutmix=0.0, num_classes=None): mix(inputs, labels, generator) -> (inputs, target).

    mixup / cutmix: the alpha of each's Beta(alpha, alpha); 0 turns it off (with both off the batch comes
    back as it went in). num_classes: only for MixedTarget.soft_labels() without an argument."""

    def __init__(self, mixup: float = 0.0, cutmix: float = 0.0, num_classes: int | None = None):
        for name, alpha in (("mixup", mixup), ("cutmix", cutmix)):
            if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0 or math.isinf(alpha):
                raise TorchwiseError(f"{name} must be a number >= 0 (the alpha of its Beta(alpha, alpha)).",
                                     values={name: alpha}, fix="A usual value is mixup=0.8 or cutmix=1.0; 0 turns it off.")
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                        or num_classes < 1):
            raise TorchwiseError("num_classes must be None or an integer >= 1.", values={"num_classes": num_classes},
                                 fix="Pass the number of classes, e.g. num_classes=10, or leave it out.")
        self.mixup, self.cutmix, self.num_classes = float(mixup), float(cutmix), num_classes

    @property
    def enabled(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    def __call__(self, inputs: torch.Tensor, target: torch.Tensor,
                 generator: torch.Generator) -> tuple[torch.Tensor, Any]:
        if not self.enabled:
            return inputs, target
        self._check(inputs, target, generator)
        host = random.Random(bytes(generator.get_state().tolist()))  # before the permutation moves the state
        n = inputs.shape[0]
        perm = torch.randperm(n, generator=generator, device=generator.device).to(inputs.device)
        use_cutmix = self.cutmix > 0 and (self.mixup == 0 or host.random() < 0.5)
        lam = host.betavariate(self.cutmix, self.cutmix) if use_cutmix else host.betavariate(self.mixup, self.mixup)
        if use_cutmix:
            height, width = inputs.shape[-2:]
            box = cutmix_box(lam, height, width, host.randrange(height), host.randrange(width))
            mixed, lam = cutmix_images(inputs, box, perm), kept_share(box, height, width)
        else:
            mixed = mixup_images(inputs, lam, perm)
        return mixed, MixedTarget(target, target[perm], lam, self.num_classes)

    def _check(self, inputs: Any, target: Any, generator: Any) -> None:
        if not isinstance(generator, torch.Generator):
            raise TorchwiseError("BatchMix needs a torch.Generator (seeded per batch, for exact resume).",
                                 values={"generator": type(generator).__name__},
                                 fix="Call mix(x, y, torch.Generator(device=x.device).manual_seed(seed)).")
        if not isinstance(inputs, torch.Tensor) or inputs.ndim < 1:
            raise TorchwiseError("MixUp / CutMix need the batch's input as one tensor (N, ...).",
                                 values={"input": _shape(inputs)},
                                 fix="Make the data set return (input tensor, label).")
        if (not isinstance(target, torch.Tensor) or target.ndim != 1 or target.shape[0] != inputs.shape[0]
                or target.dtype == torch.bool or target.is_floating_point() or target.is_complex()):
            raise TorchwiseError("MixUp / CutMix need integer class labels, one per sample (shape (N,)).",
                                 values={"input shape": _shape(inputs), "target": _shape(target)},
                                 fix="Give class indices (a LongTensor of shape (N,)); for regression or soft "
                                     "labels turn mixup and cutmix off.")
        if self.cutmix > 0 and inputs.ndim != 4:
            raise TorchwiseError("CutMix pastes boxes of images: it needs image batches (N, C, H, W).",
                                 values={"input shape": _shape(inputs), "cutmix": self.cutmix},
                                 fix="Turn cutmix off (cutmix=0) and use mixup, which works on any input.")
        if self.mixup > 0 and not inputs.is_floating_point():
            raise TorchwiseError("MixUp blends inputs: it needs a floating-point batch.",
                                 values={"input shape": _shape(inputs), "dtype": str(inputs.dtype)},
                                 fix="Convert the batch to float first (BatchAugment returns floats), or use cutmix "
                                     "alone, which works on integer images.")


def _shape(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return type(value).__name__
