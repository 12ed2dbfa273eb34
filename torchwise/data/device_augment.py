"""Batched image augmentation that runs on the batch's own device (CPU or CUDA).

Instead of cropping and flipping image by image in DataLoader workers, the collated batch (uint8 or
float, N x C x H x W) is moved to the device and augmented there: every sample gets its own random
resized crop, flips and colour jitter, all of them applied in one resampling (`grid_sample`) plus a
few elementwise ops, with no Python loop over the samples.

    from torchwise.data.device_augment import BatchAugment, BatchEval
    augment = BatchAugment(size=224, scale=(0.35, 1.0), mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    gen = torch.Generator(device="cuda").manual_seed(derive_seed(seed, epoch, step))
    x = augment(images_uint8.cuda(non_blocking=True), gen)      # float32 [N, 3, 224, 224], normalized
    x_val = BatchEval(size=224, mean=augment.mean, std=augment.std)(val_images.cuda())

Why the caller owns the generator: the random draws of a batch must be a pure function of
(seed, epoch, step), so that a run resumed from a checkpoint augments each batch exactly as the
uninterrupted run would have. A generator hidden inside this object (or the global RNG) would
carry state across batches that a checkpoint would have to capture; a generator seeded by the
caller per batch (`torchwise.train.state.reproducibility.derive_seed(seed, epoch, step)`) needs nothing
saved. Each call draws a fixed number of values per sample (`BatchAugment.DRAWS_PER_SAMPLE`), whatever
options are on, so switching jitter on does not change which crops and flips a seed gives.

Arithmetic: bilinear sampling at pixel centres (`align_corners=False`, border pixels repeated), the
same as `torch.nn.functional.interpolate(mode="bilinear", antialias=False)` on the crop. There is no
antialiasing, so keep stored images near the training resolution (shrink a folder of large photos
once, ahead of training); downscaling a crop by much more than 2x aliases. `BatchEval` uses the
same resampling, so validation images go through the same arithmetic as training ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from torchwise.errors import TorchwiseError

_CROP_ATTEMPTS = 10
_GRAY = (0.299, 0.587, 0.114)


# ----------------------------------------------------------------------------------------------
# argument checks


def _size_pair(size, *, name: str = "size") -> tuple[int, int]:
    if isinstance(size, bool):
        size = None
    if isinstance(size, int):
        pair = (size, size)
    elif isinstance(size, (tuple, list)) and len(size) == 2 and all(isinstance(s, int) and not isinstance(s, bool) for s in size):
        pair = (int(size[0]), int(size[1]))
    else:
        raise TorchwiseError(f"{name} must be an int or a pair of ints (height, width)", values={name: size},
                             fix=f"pass e.g. {name}=224 or {name}=(224, 224)")
    if min(pair) < 1:
        raise TorchwiseError(f"{name} must be at least 1 pixel", values={name: size}, fix=f"pass e.g. {name}=224")
    return pair


def _range(value, *, name: str, low_ok, fix: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TorchwiseError(f"{name} must be a pair (low, high)", values={name: value}, fix=fix) from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or not low_ok(lo, hi):
        raise TorchwiseError(f"{name} is out of range", values={name: value}, fix=fix)
    return lo, hi


def _probability(value, *, name: str) -> float:
    try:
        p = float(value)
    except (TypeError, ValueError):
        p = float("nan")
    if not 0.0 <= p <= 1.0:
        raise TorchwiseError(f"{name} is a probability and must lie in [0, 1]", values={name: value},
                             fix=f"pass e.g. {name}=0.5 (0 switches it off)")
    return p


def _strength(value, *, name: str, upper: float | None = None) -> float:
    try:
        s = float(value)
    except (TypeError, ValueError):
        s = float("nan")
    if not (s >= 0.0 and math.isfinite(s)) or (upper is not None and s > upper):
        limit = f"[0, {upper}]" if upper is not None else ">= 0"
        raise TorchwiseError(f"{name} must be {limit}: the factor is drawn from [max(0, 1-{name}), 1+{name}]",
                             values={name: value}, fix=f"pass e.g. {name}=0.2 (0 switches it off)")
    return s


def _mean_std(mean, std) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    if mean is None and std is None:
        return None, None
    if mean is None or std is None:
        raise TorchwiseError("mean and std go together: one of them is missing", values={"mean": mean, "std": std},
                             fix="pass both (e.g. the values `torchwise` stored in final/meta.json) or neither")
    try:
        m = tuple(float(v) for v in mean)
        s = tuple(float(v) for v in std)
    except (TypeError, ValueError):
        raise TorchwiseError("mean and std must be sequences of numbers, one per channel",
                             values={"mean": mean, "std": std}, fix="pass e.g. mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25]") from None
    if len(m) != len(s) or not m:
        raise TorchwiseError("mean and std need the same number of values (one per channel)",
                             values={"mean": mean, "std": std}, fix="give one mean and one std per image channel")
    if not all(math.isfinite(v) for v in m) or not all(v > 0 and math.isfinite(v) for v in s):
        raise TorchwiseError("std must be positive and finite (and mean finite): normalization divides by std",
                             values={"mean": mean, "std": std}, fix="recompute the statistics; a constant channel needs std=1")
    return m, s


def _out_dtype(dtype) -> "torch.dtype":
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TorchwiseError("dtype (of the output) must be a floating torch dtype", values={"dtype": dtype},
                             fix="pass dtype=torch.float32 (or torch.bfloat16 / torch.float16 for mixed precision)")
    return dtype


def _check_images(images, *, who: str) -> None:
    if not isinstance(images, torch.Tensor):
        raise TorchwiseError(f"{who} takes a batch of images as one tensor", values={"images": type(images).__name__},
                             fix="collate the batch first (torch.stack) into an N x C x H x W tensor")
    if images.ndim != 4:
        fix = ("add the batch dimension: images.unsqueeze(0)" if images.ndim == 3 else
               "pass a batch shaped N x C x H x W (channels first; permute(0, 3, 1, 2) converts N x H x W x C)")
        raise TorchwiseError(f"{who} expects a 4-D batch N x C x H x W", values={"shape": tuple(images.shape)}, fix=fix)
    if images.dtype != torch.uint8 and not images.dtype.is_floating_point:
        raise TorchwiseError(f"{who} takes uint8 images (0..255) or float images (0..1)", values={"dtype": images.dtype},
                             fix="convert with images.to(torch.uint8) for 0..255 data, or images.float() / max for others")
    if images.shape[-1] < 1 or images.shape[-2] < 1:
        raise TorchwiseError(f"{who} got images without pixels", values={"shape": tuple(images.shape)},
                             fix="check the loader: every image needs height and width of at least 1")


def _check_channels(mean, channels: int, shape, *, who: str) -> None:
    if mean is not None and len(mean) not in (1, channels):
        raise TorchwiseError(f"{who}: mean/std have {len(mean)} values but the images have {channels} channels",
                             values={"mean": list(mean), "shape": tuple(shape)},
                             fix="give one mean/std value per channel (or a single value for all channels)")


# ----------------------------------------------------------------------------------------------
# the shared arithmetic


def _work_dtype(images: "torch.Tensor") -> "torch.dtype":
    return torch.float64 if images.dtype == torch.float64 else torch.float32


def _resample(images, y0, dy, x0, dx, out_h: int, out_w: int):
    """Bilinear sample of every image n at source pixel coordinates (y0[n] + i*dy[n], x0[n] + j*dx[n]).

    Coordinates are in source pixels with pixel centres at integers (0..H-1). A negative dy/dx is a
    flip. Positions outside the image repeat the border pixel. Returns float (work dtype).
    """
    n, _, h, w = images.shape
    work = _work_dtype(images)
    x = images.to(work)
    dev = images.device
    rows = torch.arange(out_h, device=dev, dtype=torch.float64)
    cols = torch.arange(out_w, device=dev, dtype=torch.float64)
    py = y0[:, None] + rows[None, :] * dy[:, None]                    # N x out_h, source pixel rows
    px = x0[:, None] + cols[None, :] * dx[:, None]                    # N x out_w
    gy = ((2.0 * py + 1.0) / h - 1.0).to(work)                         # grid_sample's [-1, 1] (align_corners=False)
    gx = ((2.0 * px + 1.0) / w - 1.0).to(work)
    grid = torch.stack((gx[:, None, :].expand(n, out_h, out_w), gy[:, :, None].expand(n, out_h, out_w)), dim=-1)
    return torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _finish(y, *, unit: float, mean, std, brightness=None, contrast=None, out_dtype, channels_last: bool):
    """Scale to [0, 1], jitter brightness/contrast per sample, normalize, cast, restore memory format.

    `y` is the fresh tensor from the resampling: it is updated in place (on the CPU an out-of-place
    op on a batch of 224 x 224 images costs more in page faults than in arithmetic).
    """
    c = y.shape[1]
    if brightness is not None or contrast is not None:
        if unit != 1.0:
            y.mul_(unit)
            unit = 1.0
        if brightness is not None:
            y.mul_(brightness.to(y.dtype)[:, None, None, None]).clamp_(0.0, 1.0)
        if contrast is not None:
            # mean grey level = the grey weights applied to the channel means (no N x 1 x H x W image)
            channel_means = y.mean((2, 3))
            if c == 3:
                gray_mean = channel_means @ torch.tensor(_GRAY, dtype=y.dtype, device=y.device)
            else:
                gray_mean = channel_means.mean(1)
            gray_mean = gray_mean[:, None, None, None]
            f = contrast.to(y.dtype)[:, None, None, None]
            y.mul_(f).add_(gray_mean * (1.0 - f)).clamp_(0.0, 1.0)
    if mean is not None:
        m = torch.tensor(mean, dtype=y.dtype, device=y.device).reshape(1, -1, 1, 1)
        s = torch.tensor(std, dtype=y.dtype, device=y.device).reshape(1, -1, 1, 1)
        y.mul_(unit / s).sub_(m / s)                              # (y * unit - mean) / std
    elif unit != 1.0:
        y.mul_(unit)
    y = y.to(out_dtype)
    if channels_last:
        y = y.contiguous(memory_format=torch.channels_last)
    return y


def _is_channels_last(images) -> bool:
    return images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()


# ----------------------------------------------------------------------------------------------
# training augmentation


@dataclass
class AugmentParams:
    """The per-sample draws of one batch, in source pixels (float64, N values each).

    `top`/`left` are the crop's upper-left corner and `height`/`width` its size (fractional: the
    crop need not sit on pixel boundaries); `hflip`/`vflip` are bool; `brightness`/`contrast` are
    the multiplicative factors (1 = unchanged).
    """

    top: "torch.Tensor"
    left: "torch.Tensor"
    height: "torch.Tensor"
    width: "torch.Tensor"
    hflip: "torch.Tensor"
    vflip: "torch.Tensor"
    brightness: "torch.Tensor"
    contrast: "torch.Tensor"

    def to(self, device) -> "AugmentParams":
        # non_blocking only towards CUDA: a non-blocking copy to the CPU may be read before it lands
        non_blocking = torch.device(device).type == "cuda"
        return AugmentParams(**{k: getattr(self, k).to(device, non_blocking=non_blocking)
                                for k in self.__dataclass_fields__})


class BatchAugment:
    """Per-sample random resized crop + flips (+ optional brightness/contrast jitter) + normalize.

    BatchAugment(*, size, scale=(0.08, 1.0), ratio=(3/4, 4/3), hflip=0.5, vflip=0.0,
                 brightness=0.0, contrast=0.0, mean=None, std=None, dtype=torch.float32)

    size:        output (height, width), or an int for a square.
    scale:       range of the crop's area as a share of the image's area, 0 < low <= high <= 1;
                 None: no crop, the whole image is resized to `size` (aspect ratio not kept).
    ratio:       range of the crop's aspect ratio (width / height), drawn log-uniformly. A drawn
                 crop that does not fit is redrawn (10 tries); then the largest centred crop
                 whose ratio is in range is used.
    hflip/vflip: probability of a horizontal / vertical flip of each sample.
    brightness:  each sample's values are multiplied by a factor in [max(0, 1-b), 1+b] (0 = off).
    contrast:    each sample is blended with its mean grey level by a factor in [max(0, 1-c), 1+c]
                 (0 = off). Jitter works on [0, 1] values (brightness first) and clips to [0, 1].
    mean, std:   per-channel normalization after the jitter: (x - mean) / std; None: none.
    dtype:       output dtype (computation is float32, float64 for float64 input).

    Call: augment(images, generator) with images uint8 (0..255) or float (0..1), N x C x H x W on
    any device, and a torch.Generator on the images' device or on the CPU (the draws are made on the
    generator's device and moved). Returns N x C x size[0] x size[1] on the images' device, in
    channels_last when the input was channels_last. The same generator state gives bit-identical
    output on the CPU (on CUDA: the same draws; the kernels are deterministic in the forward pass).
    """

    #: uniforms drawn per sample on every call: 2 per crop try, crop position (2), hflip, vflip,
    #: brightness, contrast.
    DRAWS_PER_SAMPLE = 2 * _CROP_ATTEMPTS + 6

    def __init__(self, *, size, scale: Sequence[float] | None = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0), hflip: float = 0.5, vflip: float = 0.0,
                 brightness: float = 0.0, contrast: float = 0.0,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 dtype: "torch.dtype" = torch.float32):
        self.size = _size_pair(size)
        self.scale = None if scale is None else _range(
            scale, name="scale", low_ok=lambda lo, hi: 0.0 < lo and hi <= 1.0,
            fix="pass a share of the image area with 0 < low <= high <= 1, e.g. scale=(0.08, 1.0); "
                "scale=None keeps the whole image")
        self.ratio = _range(ratio, name="ratio", low_ok=lambda lo, hi: lo > 0.0,
                            fix="pass width/height bounds with 0 < low <= high, e.g. ratio=(3/4, 4/3)")
        self.hflip = _probability(hflip, name="hflip")
        self.vflip = _probability(vflip, name="vflip")
        self.brightness = _strength(brightness, name="brightness")
        self.contrast = _strength(contrast, name="contrast")
        self.mean, self.std = _mean_std(mean, std)
        self.dtype = _out_dtype(dtype)

    @classmethod
    def like_train_transform(cls, *, size: int, mean: Sequence[float], std: Sequence[float],
                             crop_scale: float = 0.35, hflip: bool = True) -> "BatchAugment":
        """The batched twin of `torchwise.data.transforms.train_transform(size, mean, std, crop_scale=, hflip=)`."""
        scale = None if crop_scale >= 1.0 else (crop_scale, 1.0)
        return cls(size=size, scale=scale, hflip=0.5 if hflip else 0.0, mean=mean, std=std)

    def __repr__(self) -> str:
        return (f"BatchAugment(size={self.size}, scale={self.scale}, ratio={self.ratio}, hflip={self.hflip}, "
                f"vflip={self.vflip}, brightness={self.brightness}, contrast={self.contrast}, mean={self.mean}, "
                f"std={self.std}, dtype={self.dtype})")

    # -- randomness ----------------------------------------------------------------------------

    def sample(self, n: int, generator: "torch.Generator", *, height: int, width: int) -> AugmentParams:
        """Draw the parameters for n samples of height x width images (on the generator's device)."""
        if not isinstance(generator, torch.Generator):
            raise TorchwiseError("BatchAugment needs a torch.Generator for its random draws",
                                 values={"generator": type(generator).__name__},
                                 fix="pass torch.Generator(device=images.device).manual_seed(seed) (the Trainer "
                                     "seeds one per batch from (seed, epoch, step))")
        u = torch.rand((n, self.DRAWS_PER_SAMPLE), generator=generator, device=generator.device,
                       dtype=torch.float64)
        k = _CROP_ATTEMPTS
        H, W = float(height), float(width)
        if self.scale is None:
            ch = torch.full((n,), H, dtype=torch.float64, device=u.device)
            cw = torch.full((n,), W, dtype=torch.float64, device=u.device)
            top, left = torch.zeros_like(ch), torch.zeros_like(cw)
        else:
            lo, hi = self.scale
            area = (lo + (hi - lo) * u[:, :k]) * (H * W)
            log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
            r = torch.exp(log_lo + (log_hi - log_lo) * u[:, k:2 * k])
            tw = torch.sqrt(area * r)
            th = torch.sqrt(area / r)
            fits = (tw <= W * (1 + 1e-12)) & (th <= H * (1 + 1e-12))
            first = fits.to(torch.int8).argmax(1, keepdim=True)                # first try that fits (0 if none)
            any_fit = fits.any(1)
            # fallback: the largest centred crop with an aspect ratio in range
            image_ratio = W / H
            if image_ratio < self.ratio[0]:
                fw, fh = W, W / self.ratio[0]
            elif image_ratio > self.ratio[1]:
                fw, fh = H * self.ratio[1], H
            else:
                fw, fh = W, H
            cw = torch.where(any_fit, tw.gather(1, first)[:, 0], fw).clamp(max=W)
            ch = torch.where(any_fit, th.gather(1, first)[:, 0], fh).clamp(max=H)
            # position: uniform over the places the crop fits; the fallback crop sits in the centre
            u_pos = torch.where(any_fit[:, None], u[:, 2 * k:2 * k + 2], 0.5)
            top = u_pos[:, 0] * (H - ch)
            left = u_pos[:, 1] * (W - cw)
        j = 2 * k + 2
        b_lo, c_lo = max(0.0, 1.0 - self.brightness), max(0.0, 1.0 - self.contrast)
        return AugmentParams(
            top=top, left=left, height=ch, width=cw,
            hflip=u[:, j] < self.hflip, vflip=u[:, j + 1] < self.vflip,
            brightness=b_lo + (1.0 + self.brightness - b_lo) * u[:, j + 2],
            contrast=c_lo + (1.0 + self.contrast - c_lo) * u[:, j + 3],
        )

    # -- arithmetic ----------------------------------------------------------------------------

    def apply(self, images: "torch.Tensor", params: AugmentParams) -> "torch.Tensor":
        """Augment with given parameters (deterministic): the crop, flips and jitter of `params`."""
        _check_images(images, who="BatchAugment")
        n, c = images.shape[:2]
        _check_channels(self.mean, c, images.shape, who="BatchAugment")
        if params.top.shape[0] != n:
            raise TorchwiseError("the parameters were drawn for another batch size",
                                 values={"params": int(params.top.shape[0]), "images": n},
                                 fix="draw them with sample(len(images), ...) for this batch")
        p = params.to(images.device)
        out_h, out_w = self.size
        dy = p.height / out_h
        dx = p.width / out_w
        # sample centres of output pixel i: top + (i + 0.5) * dy - 0.5; a flip walks the crop backwards
        y0 = torch.where(p.vflip, p.top + p.height - 0.5 * dy, p.top + 0.5 * dy) - 0.5
        x0 = torch.where(p.hflip, p.left + p.width - 0.5 * dx, p.left + 0.5 * dx) - 0.5
        y = _resample(images, y0, torch.where(p.vflip, -dy, dy), x0, torch.where(p.hflip, -dx, dx), out_h, out_w)
        return _finish(y, unit=1.0 / 255.0 if images.dtype == torch.uint8 else 1.0, mean=self.mean, std=self.std,
                       brightness=p.brightness if self.brightness > 0 else None,
                       contrast=p.contrast if self.contrast > 0 else None,
                       out_dtype=self.dtype, channels_last=_is_channels_last(images))

    def __call__(self, images: "torch.Tensor", generator: "torch.Generator") -> "torch.Tensor":
        _check_images(images, who="BatchAugment")
        params = self.sample(images.shape[0], generator, height=images.shape[-2], width=images.shape[-1])
        return self.apply(images, params)


# ----------------------------------------------------------------------------------------------
# evaluation


class BatchEval:
    """Deterministic twin of BatchAugment for validation: resize + centre crop + normalize.

    BatchEval(*, size, center_crop=0.875, mean=None, std=None, dtype=torch.float32)

    The shorter side is resized to max(size, round(size / center_crop)) (the longer side keeps the
    aspect ratio, truncated to whole pixels), then the centre size x size square is taken, as
    `torchwise.data.transforms.eval_resize` does; both steps are one bilinear resampling with the
    same arithmetic as BatchAugment (no antialiasing). center_crop=1.0: resize the shorter side to
    `size` and crop the centre square.

    Call: evaluate(images) or evaluate(images, generator) (the generator is accepted and unused, so
    both classes can be called alike). Returns N x C x size x size on the images' device.
    """

    def __init__(self, *, size: int, center_crop: float = 0.875, mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None, dtype: "torch.dtype" = torch.float32):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise TorchwiseError("size must be a positive int (the side of the square output)", values={"size": size},
                                 fix="pass e.g. size=224")
        try:
            cc = float(center_crop)
        except (TypeError, ValueError):
            cc = float("nan")
        if not 0.0 < cc <= 1.0:
            raise TorchwiseError("center_crop is the share of the resized image kept and must be in (0, 1]",
                                 values={"center_crop": center_crop}, fix="pass e.g. center_crop=0.875 (1.0: no margin)")
        self.size = size
        self.center_crop = cc
        self.mean, self.std = _mean_std(mean, std)
        self.dtype = _out_dtype(dtype)

    @classmethod
    def like_val_transform(cls, *, size: int, mean: Sequence[float], std: Sequence[float],
                           center_crop: float = 0.875) -> "BatchEval":
        """The batched twin of `torchwise.data.transforms.val_transform(size, mean, std, center_crop=)`."""
        return cls(size=size, center_crop=center_crop, mean=mean, std=std)

    def __repr__(self) -> str:
        return (f"BatchEval(size={self.size}, center_crop={self.center_crop}, mean={self.mean}, std={self.std}, "
                f"dtype={self.dtype})")

    def geometry(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(resized height, resized width, crop top, crop left) in resized pixels."""
        resize_to = max(self.size, int(round(self.size / self.center_crop)))
        if height <= width:
            rh, rw = resize_to, int(resize_to * width / height)
        else:
            rh, rw = int(resize_to * height / width), resize_to
        return rh, rw, int(round((rh - self.size) / 2.0)), int(round((rw - self.size) / 2.0))

    def __call__(self, images: "torch.Tensor", generator: "torch.Generator | None" = None) -> "torch.Tensor":
        _check_images(images, who="BatchEval")
        n, c, h, w = images.shape
        _check_channels(self.mean, c, images.shape, who="BatchEval")
        rh, rw, top, left = self.geometry(h, w)
        dy, dx = h / rh, w / rw
        full = lambda v: torch.full((n,), v, dtype=torch.float64, device=images.device)  # noqa: E731
        # output pixel i is resized pixel top + i, whose centre sits at (top + i + 0.5) * dy - 0.5 in the source
        y = _resample(images, full((top + 0.5) * dy - 0.5), full(dy), full((left + 0.5) * dx - 0.5), full(dx),
                      self.size, self.size)
        return _finish(y, unit=1.0 / 255.0 if images.dtype == torch.uint8 else 1.0, mean=self.mean, std=self.std,
                       out_dtype=self.dtype, channels_last=_is_channels_last(images))


__all__ = ["AugmentParams", "BatchAugment", "BatchEval"]
