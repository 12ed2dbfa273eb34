"""MixUp / CutMix of a training batch: the arithmetic by hand on tiny tensors, CutMix's corrected lam, the
generator's reproducibility, torchvision's MixUp / CutMix for the same lam and pairing, and the errors."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from torchwise.errors import TorchwiseError
from torchwise.train.recipes.mixing import (BatchMix, MixedTarget, cutmix_box, cutmix_images, kept_share,
                                            labels_of, mixed_loss, mixup_images)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _constant_images(n: int, height: int = 8, width: int = 6) -> torch.Tensor:
    """Image i is filled with the value i (one channel pair), so every pixel says whose it is."""
    return torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 2, height, width).contiguous()


def test_mixup_by_hand():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = mixup_images(x, 0.25, torch.tensor([2, 0, 1]))
    # row i = 0.25 * x[i] + 0.75 * x[perm[i]]; all values exact in fp32
    assert torch.equal(out, torch.tensor([[4.0, 5.0], [1.5, 2.5], [3.5, 4.5]]))


def test_cutmix_by_hand_and_its_clipped_box():
    x = torch.stack([torch.zeros(1, 4, 4), torch.ones(1, 4, 4)])
    box = cutmix_box(0.75, 4, 4, cy=2, cx=2)  # sides 4 * sqrt(0.25) = 2: rows 1..2, columns 1..2
    assert box == (1, 3, 1, 3) and kept_share(box, 4, 4) == 0.75
    out = cutmix_images(x, box, torch.tensor([1, 0]))
    expected0 = torch.zeros(1, 4, 4)
    expected0[:, 1:3, 1:3] = 1.0
    assert torch.equal(out[0], expected0) and torch.equal(out[1], 1.0 - expected0)
    assert torch.equal(x[0], torch.zeros(1, 4, 4))  # the input is not written
    corner = cutmix_box(0.75, 4, 4, cy=0, cx=0)  # clipped at the border: one pixel of the four
    assert corner == (0, 1, 0, 1) and kept_share(corner, 4, 4) == 15 / 16
    assert cutmix_box(1.0, 4, 4, 2, 2) == (2, 2, 2, 2)  # lam 1: an empty box, nothing pasted
    assert cutmix_box(0.0, 4, 6, 2, 3) == (0, 4, 0, 6)  # lam 0: the whole partner


def test_an_unclipped_box_has_the_papers_area():
    for lam in (0.1, 0.3, 0.5, 0.9):
        y1, y2, x1, x2 = cutmix_box(lam, 200, 300, cy=100, cx=150)
        assert abs((y2 - y1) * (x2 - x1) / (200 * 300) - (1 - lam)) < 0.02


@pytest.mark.parametrize("seed", range(12))
def test_cutmix_lam_is_the_share_of_pixels_each_image_kept(seed):
    x = _constant_images(5)
    mixed, target = BatchMix(cutmix=1.0)(x, torch.arange(5), _gen(seed))
    assert isinstance(target, MixedTarget) and 0.0 <= target.lam <= 1.0
    for i in range(5):
        own = (mixed[i] == i).sum().item() / mixed[i].numel()
        partner = int(target.b[i])
        if partner != i:  # paired with itself, the image is unchanged whatever the box
            assert own == pytest.approx(target.lam, abs=1e-9)
            assert ((mixed[i] == i) | (mixed[i] == partner)).all()
    assert torch.equal(target.a, torch.arange(5))


@pytest.mark.parametrize("seed", range(8))
def test_mixup_lam_is_in_the_unit_interval_and_blends_with_the_partner(seed):
    x = torch.randn(6, 5, generator=_gen(100 + seed))
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    mixed, target = BatchMix(mixup=0.4)(x, labels, _gen(seed))
    assert 0.0 <= target.lam <= 1.0
    for i in range(6):
        partner = [j for j in range(6) if torch.equal(mixed[i], x[i] * target.lam + x[j] * (1 - target.lam))]
        assert partner and all(labels[j] == target.b[i] for j in partner)


def test_the_generator_makes_it_reproducible():
    x, y = torch.rand(8, 3, 10, 10, generator=_gen(0)), torch.randint(0, 4, (8,), generator=_gen(1))
    mix = BatchMix(mixup=0.8, cutmix=1.0, num_classes=4)
    a = mix(x, y, _gen(42))
    b = mix(x, y, _gen(42))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1].b, b[1].b) and a[1].lam == b[1].lam
    c = mix(x, y, _gen(43))
    assert c[1].lam != a[1].lam
    reused = _gen(42)
    first, second = mix(x, y, reused), mix(x, y, reused)  # a generator reused without reseeding moves on
    assert first[1].lam == a[1].lam and second[1].lam != first[1].lam


def test_with_both_on_each_batch_is_one_or_the_other():
    x = _constant_images(4)
    kinds = set()
    for seed in range(40):
        mixed, target = BatchMix(mixup=1.0, cutmix=1.0)(x, torch.arange(4), _gen(seed))
        values = set(mixed.unique().tolist())
        kinds.add("cutmix" if values <= {0.0, 1.0, 2.0, 3.0} else "mixup")
    assert kinds == {"cutmix", "mixup"}


def test_alpha_zero_leaves_the_batch_unchanged():
    x, y = torch.rand(4, 3), torch.tensor([0, 1, 2, 3])
    out_x, out_y = BatchMix(0.0, 0.0)(x, y, _gen(0))
    assert out_x is x and out_y is y
    assert not BatchMix().enabled and BatchMix(mixup=0.2).enabled


def test_cutmix_alone_works_on_integer_images():
    x = torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8, generator=_gen(0))
    mixed, target = BatchMix(cutmix=1.0)(x, torch.tensor([0, 1, 2, 3]), _gen(5))
    assert mixed.dtype == torch.uint8 and mixed.shape == x.shape


def test_the_mixed_loss_is_cross_entropy_with_the_soft_labels():
    logits = torch.randn(6, 4, generator=_gen(3), dtype=torch.float64)
    target = MixedTarget(torch.tensor([0, 1, 2, 3, 0, 1]), torch.tensor([1, 1, 3, 0, 2, 0]), 0.3, num_classes=4)
    soft = target.soft_labels(dtype=torch.float64)
    assert torch.allclose(soft.sum(1), torch.ones(6, dtype=torch.float64))
    assert soft[0].tolist() == pytest.approx([0.3, 0.7, 0.0, 0.0]) and soft[1].tolist() == [0.0, 1.0, 0.0, 0.0]
    by_hand = 0.3 * F.cross_entropy(logits, target.a) + 0.7 * F.cross_entropy(logits, target.b)
    assert torch.allclose(mixed_loss(F.cross_entropy, logits, target), by_hand, rtol=0, atol=1e-15)
    assert torch.allclose(F.cross_entropy(logits, soft), by_hand, rtol=0, atol=1e-12)
    plain = torch.tensor([3, 2, 1, 0, 1, 2])
    assert torch.equal(mixed_loss(F.cross_entropy, logits, plain), F.cross_entropy(logits, plain))
    assert labels_of(target) is target.a and labels_of(plain) is plain


def _torchvision_draws(seed: int, alpha: float, height: int | None = None, width: int | None = None):
    """torchvision's MixUp / CutMix draw from the global generator: lam ~ Beta(alpha, alpha), then (CutMix)
    the box centre x ~ U{0..W-1}, y ~ U{0..H-1}. Replaying them after the same manual_seed gives the same
    numbers, so both sides can be fed one lam and one box."""
    torch.manual_seed(seed)
    lam = float(torch.distributions.Beta(torch.tensor([alpha]), torch.tensor([alpha])).sample(()))
    if height is None:
        return lam
    cx, cy = int(torch.randint(width, (1,))), int(torch.randint(height, (1,)))
    return lam, cy, cx


@pytest.mark.parametrize("seed", range(6))
def test_mixup_equals_torchvisions_for_the_same_lam_and_pairing(seed):
    v2 = pytest.importorskip("torchvision.transforms.v2")
    x, y = torch.rand(8, 3, 5, 5, generator=_gen(seed)), torch.randint(0, 10, (8,), generator=_gen(seed + 50))
    torch.manual_seed(seed)
    their_x, their_y = v2.MixUp(alpha=0.8, num_classes=10)(x, y)
    lam = _torchvision_draws(seed, 0.8)
    perm = torch.arange(8).roll(1)  # torchvision pairs sample i with sample i - 1
    ours = MixedTarget(y, y[perm], lam, num_classes=10)
    assert torch.equal(mixup_images(x, lam, perm), their_x)
    assert torch.equal(ours.soft_labels(), their_y)
    logits = torch.randn(8, 10, generator=_gen(seed + 99))
    assert torch.allclose(ours.loss(F.cross_entropy, logits), F.cross_entropy(logits, their_y), atol=1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_cutmix_equals_torchvisions_for_the_same_lam_and_box(seed):
    v2 = pytest.importorskip("torchvision.transforms.v2")
    x, y = torch.rand(6, 3, 9, 7, generator=_gen(seed)), torch.randint(0, 5, (6,), generator=_gen(seed + 50))
    torch.manual_seed(seed)
    their_x, their_y = v2.CutMix(alpha=1.0, num_classes=5)(x, y)
    lam, cy, cx = _torchvision_draws(seed, 1.0, 9, 7)
    perm = torch.arange(6).roll(1)
    box = cutmix_box(lam, 9, 7, cy, cx)
    ours = MixedTarget(y, y[perm], kept_share(box, 9, 7), num_classes=5)
    assert torch.equal(cutmix_images(x, box, perm), their_x)
    assert torch.equal(ours.soft_labels(), their_y)
    logits = torch.randn(6, 5, generator=_gen(seed + 99))
    assert torch.allclose(mixed_loss(F.cross_entropy, logits, ours), F.cross_entropy(logits, their_y), atol=1e-6)


@pytest.mark.parametrize("target, match", [
    (torch.rand(4), "integer class labels"),              # float (soft / regression) targets
    (torch.zeros(4, 1, dtype=torch.long), "integer class labels"),
    (torch.zeros(3, dtype=torch.long), "integer class labels"),  # one label too few
    (torch.zeros(4, dtype=torch.bool), "integer class labels"),
])
def test_bad_targets_are_refused_with_the_shapes_and_the_fix(target, match):
    with pytest.raises(TorchwiseError, match=match) as info:
        BatchMix(mixup=0.8)(torch.rand(4, 3, 8, 8), target, _gen(0))
    text = str(info.value)
    assert "(4, 3, 8, 8) float32" in text and str(tuple(target.shape)) in text and "fix:" in text


def test_bad_inputs_and_settings_are_refused_with_the_fix():
    labels = torch.tensor([0, 1, 0, 1])
    with pytest.raises(TorchwiseError, match=r"CutMix .* images: .*\(N, C, H, W\)") as info:
        BatchMix(cutmix=1.0)(torch.rand(4, 16), labels, _gen(0))
    assert "(4, 16) float32" in str(info.value) and "cutmix=0" in str(info.value)
    with pytest.raises(TorchwiseError, match="floating-point") as info:
        BatchMix(mixup=0.5)(torch.zeros(4, 3, 8, 8, dtype=torch.uint8), labels, _gen(0))
    assert "uint8" in str(info.value)
    with pytest.raises(TorchwiseError, match="torch.Generator"):
        BatchMix(mixup=0.5)(torch.rand(4, 3), labels, 0)
    with pytest.raises(TorchwiseError, match="one tensor"):
        BatchMix(mixup=0.5)([torch.rand(4, 3)], labels, _gen(0))
    for bad in ({"mixup": -1}, {"cutmix": math.inf}, {"mixup": True}, {"cutmix": "1"}, {"num_classes": 0}):
        with pytest.raises(TorchwiseError):
            BatchMix(**bad)
    with pytest.raises(TorchwiseError, match="number of classes"):
        MixedTarget(labels, labels, 0.5).soft_labels()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_the_gpu_with_a_cuda_generator():
    x = torch.rand(16, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (16,), device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(7)
    mixed, target = BatchMix(mixup=0.8, cutmix=1.0)(x, y, gen)
    again = BatchMix(mixup=0.8, cutmix=1.0)(x, y, torch.Generator(device="cuda").manual_seed(7))
    assert mixed.is_cuda and target.b.is_cuda and torch.equal(mixed, again[0]) and target.lam == again[1].lam
