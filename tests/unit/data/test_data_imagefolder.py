"""Image folder scanning, splitting, corrupt files, transforms and train-split statistics."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import write_color_images, write_corrupt_files
from torchwise import config as cfg
from torchwise.data import imagefolder, stats, transforms
from torchwise.data.tasks import prepare_task
from torchwise.errors import TorchwiseError


def test_split_is_seeded_stratified_and_complete(image_folder):
    a = imagefolder.scan_image_folder(image_folder, val_fraction=0.25, seed=0)
    b = imagefolder.scan_image_folder(image_folder, val_fraction=0.25, seed=0)
    c = imagefolder.scan_image_folder(image_folder, val_fraction=0.25, seed=1)
    assert a.train == b.train and a.val == b.val
    assert a.val != c.val
    assert Counter(label for _, label in a.val) == {0: 6, 1: 6, 2: 6}  # 25% of 24 in every class
    assert not {p for p, _ in a.train} & {p for p, _ in a.val}
    assert a.layout == "split by val_fraction" and a.class_names == ["blue", "green", "red"]


def test_corrupt_files_are_found_before_training(image_folder):
    scan = imagefolder.scan_image_folder(image_folder)
    assert sorted(p.split("/")[-1] for p, _ in scan.skipped) == ["broken_truncated.png", "empty.jpg"]
    used = {p for p, _ in scan.train + scan.val}
    assert not any("broken" in p or p.endswith(".jpg") or p.endswith(".txt") for p in used)
    assert scan.summary()["skipped"][0]["reason"]


def test_train_val_layout_is_respected(trainval_folder):
    scan = imagefolder.scan_image_folder(trainval_folder)
    assert scan.layout == "train/val folders"
    assert len(scan.train) == 48 and len(scan.val) == 18
    assert all("/val/" in p for p, _ in scan.val)


def test_errors_for_bad_folders(tmp_path):
    with pytest.raises(TorchwiseError, match="does not exist"):
        imagefolder.scan_image_folder(tmp_path / "missing")
    (tmp_path / "loose").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "loose" / "a.png")
    with pytest.raises(TorchwiseError, match="No class folders") as info:
        imagefolder.scan_image_folder(tmp_path / "loose")
    assert "a.png" in str(info.value)
    write_color_images(tmp_path / "bad", 3, seed=0)
    for path in (tmp_path / "bad" / "green").iterdir():
        path.write_bytes(b"garbage")
    with pytest.raises(TorchwiseError, match="no readable training images") as info:
        imagefolder.scan_image_folder(tmp_path / "bad")
    assert "green" in str(info.value)


def test_grayscale_detected_and_median_side(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(3):
            Image.new("L", (10 + i, 12), color=i * 40).save(tmp_path / name / f"{i}.png")
    scan = imagefolder.scan_image_folder(tmp_path)
    assert scan.grayscale and scan.median_side == 11


def test_transforms_train_random_val_deterministic():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8))
    train = transforms.train_transform(16, [0.5] * 3, [0.25] * 3, crop_scale=0.3, hflip=True)
    val = transforms.val_transform(16, [0.5] * 3, [0.25] * 3)
    torch.manual_seed(0)
    outs = [train(image) for _ in range(4)]
    assert outs[0].shape == (3, 16, 16) and outs[0].dtype == torch.float32
    assert any(not torch.equal(outs[0], o) for o in outs[1:])
    assert torch.equal(val(image), val(image)) and val(image).shape == (3, 16, 16)


def test_stats_are_computed_on_the_training_split_only_and_cached(tmp_path):
    # train images are dark, val images bright: train-only statistics must not see the bright ones
    for split, value in (("train", 20), ("val", 230)):
        for name in ("a", "b"):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (8, 8), color=(value + i, value, value)).save(tmp_path / "data" / split / name / f"{i}.png")
    config = cfg.resolve(flags={"data": str(tmp_path / "data")})
    task = prepare_task(config, tmp_path / "run")
    assert all(abs(m - 21.5 / 255) < 0.01 for m in task.mean[:1])
    assert all(m < 0.1 for m in task.mean)
    cached = json.loads((tmp_path / "run" / stats.STATS_FILE).read_text())
    assert cached["mean"] == task.mean and cached["split"] == "train"
    # a second preparation uses the cache (same key), a changed file set recomputes
    assert "cached" in prepare_task(config, tmp_path / "run").summary["normalization"]
    Image.new("RGB", (8, 8), color=(90, 90, 90)).save(tmp_path / "data" / "train" / "a" / "new.png")
    assert "cached" not in prepare_task(config, tmp_path / "run").summary["normalization"]


def test_statistics_with_pretrained_weights(image_folder, tmp_path):
    from torchwise.models import build_model

    # torchvision architecture + a plain weights file: the ImageNet statistics it was trained with
    weights = tmp_path / "w.pt"
    torch.save(build_model("resnet18", 1000).state_dict(), weights)
    config = cfg.resolve(flags={"data": str(image_folder), "weights": str(weights), "model": "resnet18"})
    task = prepare_task(config, tmp_path / "run")
    assert task.mean == list(stats.IMAGENET_MEAN) and task.std == list(stats.IMAGENET_STD)
    assert not (tmp_path / "run" / stats.STATS_FILE).exists()

    # weights from an earlier torchwise run: that run's statistics
    (tmp_path / "old" / "final").mkdir(parents=True)
    weights = tmp_path / "old" / "final" / "model.pt"
    torch.save(build_model("smallcnn", 3).state_dict(), weights)
    (tmp_path / "old" / "final" / "meta.json").write_text(
        json.dumps({"task": "image", "mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6]}))
    config = cfg.resolve(flags={"data": str(image_folder), "weights": str(weights), "model": "smallcnn"})
    task = prepare_task(config, tmp_path / "run2")
    assert task.mean == [0.1, 0.2, 0.3] and task.std == [0.4, 0.5, 0.6]

    # a small model with weights of unknown origin: statistics of this training split
    weights = tmp_path / "w_small.pt"
    torch.save(build_model("smallcnn", 3).state_dict(), weights)
    config = cfg.resolve(flags={"data": str(image_folder), "weights": str(weights), "model": "smallcnn"})
    assert prepare_task(config, tmp_path / "run3").summary["normalization"] == "training split"


def test_task_dataset_yields_normalized_tensors(image_folder, tmp_path):
    task = prepare_task(cfg.resolve(flags={"data": str(image_folder)}), tmp_path / "run")
    x, y = task.val[0]
    assert x.shape == (3, 16, 16) and isinstance(y, int)
    batch = torch.stack([task.train[i][0] for i in range(len(task.train))])
    assert abs(float(batch.mean())) < 0.5  # roughly centered by the train statistics
    assert task.model_kwargs == {"name": "smallcnn", "num_classes": 3, "in_channels": 3,
                                 "input_size": [16, 16], "freeze_backbone": False}


def test_torchvision_models_default_to_224(image_folder, tmp_path):
    config = cfg.resolve(flags={"data": str(image_folder), "model": "resnet18"})
    assert prepare_task(config, None).input_size == [3, 224, 224]


def test_corrupt_files_in_a_train_val_layout(tmp_path):
    write_color_images(tmp_path / "d" / "train", 3, seed=0)
    write_color_images(tmp_path / "d" / "val", 2, seed=1)
    write_corrupt_files(tmp_path / "d" / "val" / "blue")
    scan = imagefolder.scan_image_folder(tmp_path / "d")
    assert len(scan.skipped) == 2 and len(scan.val) == 6


def test_exif_orientation_is_applied(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(2):
            exif = Image.Exif()
            exif[0x0112] = 6  # "rotate 90° clockwise to display": how phones store portrait photos
            Image.new("RGB", (20, 10), (200, 0, 0)).save(tmp_path / name / f"{i}.jpg", exif=exif)
    scan = imagefolder.scan_image_folder(tmp_path)
    path = scan.train[0][0]
    assert scan.cache[path].size == (10, 20)
    dataset = imagefolder.ImageDataset(scan.train, lambda image: image, mode="RGB")  # from disk, no cache
    assert dataset[0][0].size == (10, 20)
