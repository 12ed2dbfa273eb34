"""Train and validation transforms for the image task (torchvision.transforms.v2).

Training gets random augmentation (resized crop, optional horizontal flip); validation and
statistics are deterministic (resize, center crop), so a validation number means the same thing
every time it is measured.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


SMALL_IMAGE_SIDE = 32  # below it, ImageNet's crop conventions cut away the object itself


@dataclass(frozen=True)
class Augmentation:
    """The image augmentation of a run, with each "auto" decided from the data, and why."""
    crop_scale: float
    hflip: bool
    center_crop: float
    why: str = ""   # the rule behind each choice, with the key that changes it

    def describe(self) -> str:
        crop = "no random crop" if self.crop_scale >= 1 else f"random crop >= {self.crop_scale:g} of the area"
        flips = "flips" if self.hflip else "no flips"
        val = "val uncropped" if self.center_crop >= 1 else f"val center crop {self.center_crop:g}"
        return f"{crop}, {flips}, {val}" + (f" ({self.why})" if self.why else "")


def _flip_rule(gray: bool, gray_pixels: bool) -> tuple[bool, str]:
    """The documented rule for data.hflip=auto: a mirror image means the same thing in a colour photo of
    an object, not in digits, letters, documents or scans, which are gray far more often than not."""
    if gray_pixels:
        return False, ("no flips, as every image is gray and a mirrored digit, letter or scan is another "
                       "thing: data.hflip=true turns them on")
    if gray:
        return False, "no flips, as the input is gray (data.channels=gray): data.hflip=true turns them on"
    return True, ("flips, as a mirrored colour photo shows the same thing: data.hflip=false turns them off "
                  "for text, signs or digits")


def decide_augmentation(crop_scale: Any, hflip: Any, center_crop: Any, *, gray: bool,
                        median_side: int, gray_pixels: bool | None = None) -> Augmentation:
    """Settings as given, each "auto" chosen for the images at hand: ImageNet's conventions (crops down
    to 35% of the area, flips, a 0.875 center crop) suit photos of objects, not 8x8 digits.
    gray: the model's input is gray; gray_pixels: every image shows only grays, whatever its file
    stored (default: gray)."""
    small = median_side < SMALL_IMAGE_SIDE
    rules, given = [], []
    if "auto" in (crop_scale, center_crop):
        rules.append(f"mild crops, as images of {median_side} pixels frame the object tightly" if small else
                     f"ImageNet's crops for images of {median_side} pixels")
    if crop_scale == "auto":
        crop_scale = 0.8 if small else 0.35
    else:
        given.append(f"data.crop_scale={crop_scale:g}")
    if center_crop == "auto":
        center_crop = 1.0 if small else 0.875
    else:
        given.append(f"data.center_crop={center_crop:g}")
    if hflip == "auto":
        hflip, flip_why = _flip_rule(gray, gray if gray_pixels is None else gray_pixels)
        rules.append(flip_why)
    else:
        given.append(f"data.hflip={str(bool(hflip)).lower()}")
    why = "; ".join(([f"auto: {'; '.join(rules)}"] if rules else []) + ([f"set: {', '.join(given)}"] if given else []))
    return Augmentation(float(crop_scale), bool(hflip), float(center_crop), why=why)


def _to_float():
    import torch
    from torchvision.transforms import v2

    return [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]


POLICIES = ("none", "trivial", "randaugment")


def train_transform(size: int, mean: Sequence[float], std: Sequence[float], *,
                    crop_scale: float = 0.35, hflip: bool = True, policy: str = "none"):
    """Crop (or resize), flip, then an automatic policy (TrivialAugmentWide / RandAugment: on the uint8
    image, where their colour operations are defined), to float and normalized."""
    from torchvision.transforms import v2

    steps = []
    if crop_scale >= 1.0:
        # No crop: keep the whole image (RandomResizedCrop would still change the aspect ratio).
        steps.append(v2.Resize((size, size), antialias=True))
    else:
        steps.append(v2.RandomResizedCrop(size, scale=(crop_scale, 1.0), antialias=True))
    if hflip:
        steps.append(v2.RandomHorizontalFlip())
    if policy == "trivial":
        steps.append(v2.TrivialAugmentWide())
    elif policy == "randaugment":
        steps.append(v2.RandAugment(num_ops=2, magnitude=9))
    return v2.Compose([v2.ToImage(), *steps, *_to_float()[1:], v2.Normalize(list(mean), list(std))])


def eval_resize(size: int, center_crop: float = 0.875):
    """Resize the shorter side to size/center_crop, then take the center size x size square."""
    from torchvision.transforms import v2

    resize_to = max(size, int(round(size / center_crop)))
    return [v2.Resize(resize_to, antialias=True), v2.CenterCrop(size)]


def val_transform(size: int, mean: Sequence[float], std: Sequence[float], *, center_crop: float = 0.875):
    from torchvision.transforms import v2

    return v2.Compose([v2.ToImage(), *eval_resize(size, center_crop), *_to_float()[1:],
                       v2.Normalize(list(mean), list(std))])


def stats_transform(size: int, *, center_crop: float = 0.875):
    """What the model sees at validation, before normalization: the input for mean/std."""
    from torchvision.transforms import v2

    return v2.Compose([v2.ToImage(), *eval_resize(size, center_crop), *_to_float()[1:]])


def fixed_square_uint8(size: int, center_crop: float = 0.875):
    """For data.augment_on=device: the loader only cuts the square of side size/center_crop around the
    center (as validation resizes), kept as uint8; crops, flips and normalization happen per batch on
    the device (torchwise.data.device_augment). Random crops then come from that square rather than
    from the whole image."""
    from torchvision.transforms import v2

    side = max(size, int(round(size / center_crop)))
    return v2.Compose([v2.ToImage(), v2.Resize(side, antialias=True), v2.CenterCrop(side), v2.ToPureTensor()])
