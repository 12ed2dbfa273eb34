"""BatchAugment / BatchEval: batched on-device augmentation, checked on real images against
independent references (plain interpolate, torch.flip, slicing, torchvision) and by statistics."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from torchwise.data.device_augment import AugmentParams, BatchAugment, BatchEval
from torchwise.errors import TorchwiseError


@pytest.fixture(scope="module")
def photos() -> torch.Tensor:
    """scikit-learn's two bundled photographs (427 x 640 RGB), as a uint8 batch 2 x 3 x 427 x 640."""
    from sklearn.datasets import load_sample_image

    arrays = [np.array(load_sample_image(name)) for name in ("china.jpg", "flower.jpg")]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


@pytest.fixture(scope="module")
def small_photos(photos) -> torch.Tensor:
    """16 real 32 x 32 RGB crops of the photographs (uint8), different content in each."""
    tiles = [photos[i % 2, :, 40 * (i // 2):40 * (i // 2) + 32, 60 * (i // 2):60 * (i // 2) + 32] for i in range(16)]
    return torch.stack(tiles).contiguous()


@pytest.fixture(scope="module")
def folder_images(image_folder) -> torch.Tensor:
    """The PNG files conftest wrote (16 x 16 RGB), read with PIL: uint8 N x 3 x 16 x 16."""
    from PIL import Image

    files = sorted(p for p in image_folder.rglob("*.png") if not p.name.startswith("broken"))[:24]
    arrays = [np.asarray(Image.open(p).convert("RGB")) for p in files]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def reference_resize(images: torch.Tensor, size) -> torch.Tensor:
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=False)


# ---------------------------------------------------------------------------------------------
# shapes, dtypes, memory format, reproducibility


def test_shapes_dtypes_and_memory_format(small_photos):
    augment = BatchAugment(size=(24, 20), mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
    out = augment(small_photos, gen(0))
    assert out.shape == (16, 3, 24, 20) and out.dtype == torch.float32 and out.device.type == "cpu"
    assert out.is_contiguous()

    as_float = augment(small_photos.float() / 255.0, gen(0))
    assert torch.allclose(as_float, out, atol=1e-5)          # uint8 is read as value / 255

    cl = augment(small_photos.contiguous(memory_format=torch.channels_last), gen(0))
    assert cl.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(cl, out, atol=1e-6)

    half = BatchAugment(size=24, dtype=torch.bfloat16)(small_photos, gen(0))
    assert half.dtype == torch.bfloat16 and half.shape == (16, 3, 24, 24)

    gray = BatchAugment(size=8, mean=[0.5], std=[0.2])(small_photos[:, :1], gen(0))
    assert gray.shape == (16, 1, 8, 8)

    empty = augment(small_photos[:0], gen(0))
    assert empty.shape == (0, 3, 24, 20)


def test_same_seed_is_bit_identical_and_seeds_differ(small_photos):
    augment = BatchAugment(size=24, scale=(0.2, 1.0), brightness=0.4, contrast=0.4, mean=[0.4] * 3, std=[0.2] * 3)
    first = augment(small_photos, gen(123))
    again = augment(small_photos, gen(123))
    assert torch.equal(first, again)
    other = augment(small_photos, gen(124))
    assert not torch.allclose(first, other)
    # a generator used for two batches in a row gives two different batches, reproducibly
    g = gen(5)
    a1, a2 = augment(small_photos, g), augment(small_photos, g)
    g = gen(5)
    assert torch.equal(augment(small_photos, g), a1) and torch.equal(augment(small_photos, g), a2)
    assert not torch.equal(a1, a2)


def test_fixed_number_of_draws_so_options_do_not_shift_the_crops(small_photos):
    n = small_photos.shape[0]
    plain = BatchAugment(size=24, scale=(0.3, 1.0))
    jitter = BatchAugment(size=24, scale=(0.3, 1.0), brightness=0.5, contrast=0.5, vflip=0.5)
    g = gen(9)
    plain(small_photos, g)
    mirror = gen(9)
    torch.rand((n, BatchAugment.DRAWS_PER_SAMPLE), generator=mirror, dtype=torch.float64)
    assert torch.equal(g.get_state(), mirror.get_state())     # consumption depends on the batch size only
    p, q = plain.sample(n, gen(9), height=32, width=32), jitter.sample(n, gen(9), height=32, width=32)
    for name in ("top", "left", "height", "width", "hflip"):
        assert torch.equal(getattr(p, name), getattr(q, name)), name


def test_every_sample_gets_its_own_crop_and_flip(photos):
    one = photos[:1].expand(32, -1, -1, -1).contiguous()      # the same photo 32 times
    augment = BatchAugment(size=32, scale=(0.1, 1.0))
    params = augment.sample(32, gen(1), height=427, width=640)
    assert len(set(params.top.tolist())) == 32 and len(set(params.width.tolist())) == 32
    assert 0 < int(params.hflip.sum()) < 32
    out = augment(one, gen(1))
    flat = out.reshape(32, -1)
    distances = torch.cdist(flat, flat)
    assert (distances + torch.eye(32) * 1e9).min() > 1e-2     # no two samples alike


# ---------------------------------------------------------------------------------------------
# correctness against independent references


@pytest.mark.parametrize("size", [(12, 12), (16, 16), (40, 40)])
def test_full_image_crop_equals_plain_resize(folder_images, size):
    augment = BatchAugment(size=size, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0.0)
    out = augment(folder_images, gen(0))
    assert torch.allclose(out, reference_resize(folder_images, size), atol=2e-5, rtol=0)


def test_scale_none_resizes_the_whole_photo(photos):
    augment = BatchAugment(size=(64, 96), scale=None, hflip=0.0)
    out = augment(photos, gen(0))
    # float32 sampling positions on a 640-pixel-wide image: a few 1e-5 of rounding, on either side
    assert torch.allclose(out, reference_resize(photos, (64, 96)), atol=1e-4, rtol=0)


def test_non_square_full_crop_falls_back_to_the_centre_square(photos):
    # scale=1 with ratio=1 cannot fit a 427 x 640 photo: the largest centred square is used
    augment = BatchAugment(size=(61, 61), scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0.0)
    params = augment.sample(2, gen(0), height=427, width=640)
    assert params.height.tolist() == [427.0, 427.0] and params.width.tolist() == [427.0, 427.0]
    assert params.left.tolist() == [106.5, 106.5] and params.top.tolist() == [0.0, 0.0]
    # 427 / 61 = 7 exactly: output pixel centres fall on source pixel centres 3, 10, 17, ...
    out = augment(photos, gen(0))
    rows = torch.arange(3, 427, 7)
    cols = 106.5 + 3.0 + torch.arange(61) * 7.0               # half-way between two source columns
    lo, hi = cols.floor().long(), cols.ceil().long()
    x = photos.double() / 255.0
    expected = 0.5 * (x[:, :, rows][:, :, :, lo] + x[:, :, rows][:, :, :, hi])
    assert torch.allclose(out.double(), expected, atol=1e-5)


def test_one_to_one_crop_equals_slicing(photos):
    augment = BatchAugment(size=(50, 70), hflip=0.0)
    z = torch.zeros(2, dtype=torch.float64)
    params = AugmentParams(top=torch.tensor([10.0, 300.0], dtype=torch.float64),
                           left=torch.tensor([0.0, 555.0], dtype=torch.float64),
                           height=torch.full((2,), 50.0, dtype=torch.float64),
                           width=torch.full((2,), 70.0, dtype=torch.float64),
                           hflip=z.bool(), vflip=z.bool(), brightness=z + 1, contrast=z + 1)
    out = augment.apply(photos, params)
    expected = torch.stack([photos[0, :, 10:60, 0:70], photos[1, :, 300:350, 555:625]]).float() / 255.0
    assert torch.allclose(out, expected, atol=1e-6)


def test_forced_flips_equal_torch_flip(small_photos):
    base = BatchAugment(size=24, scale=(0.3, 1.0), hflip=0.0)(small_photos, gen(4))
    hflipped = BatchAugment(size=24, scale=(0.3, 1.0), hflip=1.0)(small_photos, gen(4))
    assert torch.allclose(hflipped, torch.flip(base, dims=[-1]), atol=1e-6)
    vflipped = BatchAugment(size=24, scale=(0.3, 1.0), hflip=0.0, vflip=1.0)(small_photos, gen(4))
    assert torch.allclose(vflipped, torch.flip(base, dims=[-2]), atol=1e-6)


def test_normalization_is_x_minus_mean_over_std(small_photos):
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    raw = BatchAugment(size=20)(small_photos, gen(8))
    normalized = BatchAugment(size=20, mean=mean, std=std)(small_photos, gen(8))
    m, s = torch.tensor(mean)[None, :, None, None], torch.tensor(std)[None, :, None, None]
    assert torch.allclose(normalized, (raw - m) / s, atol=1e-5)
    single = BatchAugment(size=20, mean=[0.5], std=[0.5])(small_photos, gen(8))
    assert torch.allclose(single, (raw - 0.5) / 0.5, atol=1e-5)


def test_brightness_and_contrast_follow_their_factors(small_photos):
    geometry = BatchAugment(size=20, scale=(0.5, 1.0))
    base = geometry(small_photos, gen(2))
    bright = BatchAugment(size=20, scale=(0.5, 1.0), brightness=0.6)
    b = bright.sample(16, gen(2), height=32, width=32).brightness.float()
    assert 0.4 <= float(b.min()) and float(b.max()) <= 1.6 and float(b.std()) > 0.1
    assert torch.allclose(bright(small_photos, gen(2)), (base * b[:, None, None, None]).clamp(0, 1), atol=1e-6)

    contrast = BatchAugment(size=20, scale=(0.5, 1.0), contrast=0.5)
    c = contrast.sample(16, gen(2), height=32, width=32).contrast.float()[:, None, None, None]
    gray = (0.299 * base[:, 0] + 0.587 * base[:, 1] + 0.114 * base[:, 2]).mean((1, 2))[:, None, None, None]
    assert torch.allclose(contrast(small_photos, gen(2)), (c * base + (1 - c) * gray).clamp(0, 1), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# statistics over many samples


def coordinate_image(height: int, width: int, n: int) -> torch.Tensor:
    """Channel 0 holds each pixel's column, channel 1 its row: the output tells where it came from."""
    rows = torch.arange(height, dtype=torch.float32)[:, None].expand(height, width)
    cols = torch.arange(width, dtype=torch.float32)[None, :].expand(height, width)
    return torch.stack([cols, rows])[None].expand(n, 2, height, width).contiguous()


def test_crop_area_ratio_and_flip_rate_statistics():
    n, height, width, out = 4000, 48, 64, 16
    scale, ratio, p = (0.25, 0.9), (3 / 4, 4 / 3), 0.3
    augment = BatchAugment(size=out, scale=scale, ratio=ratio, hflip=p, vflip=0.0)
    params = augment.sample(n, gen(77), height=height, width=width)
    result = augment(coordinate_image(height, width, n), gen(77))
    cols, rows = result[:, 0], result[:, 1]
    # the sampled source positions span (out - 1) output steps of crop / out pixels each
    crop_w = (cols.amax((1, 2)) - cols.amin((1, 2))) * out / (out - 1)
    crop_h = (rows.amax((1, 2)) - rows.amin((1, 2))) * out / (out - 1)
    share = (crop_w * crop_h / (height * width)).double()
    assert float(share.min()) >= scale[0] - 1e-4 and float(share.max()) <= scale[1] + 1e-4
    assert float(share.min()) < scale[0] + 0.02 and float(share.max()) > scale[1] - 0.02   # the range is used
    aspect = (crop_w / crop_h).double()
    assert float(aspect.min()) >= ratio[0] - 1e-3 and float(aspect.max()) <= ratio[1] + 1e-3
    assert torch.allclose(crop_w.double(), params.width, atol=2e-3)
    # the crop lies inside the image, its position spread over the whole allowed range
    left = torch.minimum(cols[:, 0, 0], cols[:, 0, -1]).double() - (params.width / out / 2 - 0.5)
    assert torch.allclose(left, params.left, atol=2e-3)
    assert float(left.min()) >= -1e-3 and float((left + params.width).max()) <= width + 1e-3
    # a horizontal flip shows as columns that decrease from left to right
    flipped = cols[:, 0, -1] < cols[:, 0, 0]
    assert torch.equal(flipped, params.hflip)
    rate = float(flipped.double().mean())
    assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert bool((rows[:, -1, 0] > rows[:, 0, 0]).all())       # vflip=0: never flipped vertically


# ---------------------------------------------------------------------------------------------
# evaluation


def test_eval_is_resize_then_centre_crop(photos, folder_images):
    evaluate = BatchEval(size=56, center_crop=0.875)
    rh, rw, top, left = evaluate.geometry(427, 640)
    assert (rh, rw, top, left) == (64, 95, 4, 20)
    out = evaluate(photos)
    assert out.shape == (2, 3, 56, 56)
    expected = reference_resize(photos, (rh, rw))[..., top:top + 56, left:left + 56]
    assert torch.allclose(out, expected, atol=1e-4, rtol=0)
    # torchvision's own resize + centre crop (without antialiasing), as an independent check
    from torchvision.transforms import v2

    tv = v2.Compose([v2.Resize(rh, antialias=False), v2.CenterCrop(56)])(photos.float() / 255.0)
    assert torch.allclose(out, tv, atol=1e-4, rtol=0)
    assert torch.equal(evaluate(photos), out) and torch.equal(evaluate(photos, gen(3)), out)   # no randomness

    mean, std = [0.3, 0.4, 0.5], [0.2, 0.25, 0.3]
    normalized = BatchEval.like_val_transform(size=56, mean=mean, std=std)(photos)
    m, s = torch.tensor(mean)[None, :, None, None], torch.tensor(std)[None, :, None, None]
    assert torch.allclose(normalized, (out - m) / s, atol=1e-5)
    upscaled = BatchEval(size=20, center_crop=1.0)(folder_images)          # 16 x 16 -> 20 x 20
    assert torch.allclose(upscaled, reference_resize(folder_images, (20, 20)), atol=2e-5, rtol=0)


def test_like_train_transform_mirrors_the_transform_options(small_photos):
    cropping = BatchAugment.like_train_transform(size=24, mean=[0.5] * 3, std=[0.2] * 3, crop_scale=0.35)
    assert cropping.scale == (0.35, 1.0) and cropping.hflip == 0.5
    whole = BatchAugment.like_train_transform(size=24, mean=[0.5] * 3, std=[0.2] * 3, crop_scale=1.0, hflip=False)
    assert whole.scale is None and whole.hflip == 0.0
    expected = (reference_resize(small_photos, (24, 24)) - 0.5) / 0.2
    assert torch.allclose(whole(small_photos, gen(0)), expected, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# errors


def error_text(call) -> str:
    with pytest.raises(TorchwiseError) as info:
        call()
    assert info.value.fix
    return str(info.value)


def test_clear_errors_for_bad_input_and_parameters(small_photos):
    augment = BatchAugment(size=8, mean=[0.5] * 3, std=[0.2] * 3)
    text = error_text(lambda: augment(small_photos[0], gen(0)))
    assert "(3, 32, 32)" in text and "unsqueeze(0)" in text
    text = error_text(lambda: augment(small_photos.permute(0, 2, 3, 1)[..., None], gen(0)))
    assert "4-D" in text
    text = error_text(lambda: augment(small_photos.int(), gen(0)))
    assert "torch.int32" in text and "uint8" in text
    text = error_text(lambda: augment([small_photos], gen(0)))
    assert "list" in text
    text = error_text(lambda: augment(small_photos, None))
    assert "torch.Generator" in text and "manual_seed" in text
    text = error_text(lambda: augment(small_photos[:, :2], gen(0)))
    assert "2 channels" in text and "3 values" in text

    text = error_text(lambda: BatchAugment(size=8, scale=(0.5, 1.5)))
    assert "(0.5, 1.5)" in text and "0 < low <= high <= 1" in text
    assert "scale" in error_text(lambda: BatchAugment(size=8, scale=(0.0, 1.0)))
    assert "scale" in error_text(lambda: BatchAugment(size=8, scale=(0.9, 0.5)))
    assert "scale" in error_text(lambda: BatchAugment(size=8, scale=0.5))
    assert "ratio" in error_text(lambda: BatchAugment(size=8, ratio=(-1, 2)))
    assert "1.5" in error_text(lambda: BatchAugment(size=8, hflip=1.5))
    assert "brightness" in error_text(lambda: BatchAugment(size=8, brightness=-0.1))
    assert "size" in error_text(lambda: BatchAugment(size=0))
    assert "size" in error_text(lambda: BatchAugment(size=(8, 8, 3)))
    text = error_text(lambda: BatchAugment(size=8, mean=[0.5, 0.5], std=[0.2]))
    assert "[0.5, 0.5]" in text
    assert "missing" in error_text(lambda: BatchAugment(size=8, mean=[0.5]))
    assert "std must be positive" in error_text(lambda: BatchAugment(size=8, mean=[0.5], std=[0.0]))
    assert "dtype" in error_text(lambda: BatchAugment(size=8, dtype=torch.int64))
    assert "center_crop" in error_text(lambda: BatchEval(size=8, center_crop=1.2))
    assert "size" in error_text(lambda: BatchEval(size=(8, 8)))
    with pytest.raises(TypeError):
        BatchAugment(8)                                        # keyword-only constructor


# ---------------------------------------------------------------------------------------------
# CUDA


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_for_the_same_draws(photos, small_photos):
    augment = BatchAugment(size=24, scale=(0.2, 1.0), hflip=0.5, vflip=0.5, brightness=0.3, contrast=0.3,
                           mean=[0.5, 0.4, 0.3], std=[0.2, 0.2, 0.2])
    # the same CPU generator state: identical draws, moved to the GPU
    on_cpu = augment(small_photos, gen(11))
    on_gpu = augment(small_photos.cuda(), gen(11))
    assert on_gpu.device.type == "cuda"
    assert torch.allclose(on_gpu.cpu(), on_cpu, atol=1e-4)
    cl = augment(small_photos.cuda().contiguous(memory_format=torch.channels_last), gen(11))
    assert cl.is_contiguous(memory_format=torch.channels_last) and torch.allclose(cl.cpu(), on_cpu, atol=1e-4)
    # a CUDA generator: reproducible from its seed on the device
    g1 = torch.Generator(device="cuda").manual_seed(3)
    g2 = torch.Generator(device="cuda").manual_seed(3)
    assert torch.equal(augment(small_photos.cuda(), g1), augment(small_photos.cuda(), g2))
    # the same parameters applied on both devices
    params = augment.sample(2, gen(12), height=427, width=640)
    assert torch.allclose(augment.apply(photos.cuda(), params).cpu(), augment.apply(photos, params), atol=1e-4)
    evaluate = BatchEval(size=56, mean=[0.5] * 3, std=[0.25] * 3)
    assert torch.allclose(evaluate(photos.cuda()).cpu(), evaluate(photos), atol=1e-4)
