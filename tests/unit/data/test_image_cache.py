"""data.cache: decoded, shrunk images in memory or on disk (torchwise/data/image_cache.py), on real
JPEG/PNG files, with real DataLoader worker processes (fork and spawn) and real CLI runs."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
from PIL import Image

from conftest import write_color_images
from torchwise import config as cfg
from torchwise.data import cache_budget, image_cache
from torchwise.data.tasks import prepare_task
from torchwise.errors import ConfigError, TorchwiseError
from testkit.image_cache_data import task_for, val_batch, write_mixed_images


# Some bigger than the cache side of a 32-pixel input (37), some smaller, both orientations.


def train_batch(task, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.stack([task.train[i][0] for i in range(len(task.train))])


def test_cached_shape_is_torchvisions_resize_and_never_enlarges():
    from torchvision.transforms import v2

    for w, h in [(500, 375), (375, 500), (257, 256), (256, 257), (1000, 3), (3, 1000), (999, 1001), (256, 256),
                 (100, 80), (80, 100)]:
        for side in (256, 73, 37):
            expected = tuple(v2.Resize(side, antialias=True)(torch.zeros(1, h, w, dtype=torch.uint8)).shape[-2:])
            got = cache_budget.resized_shape(w, h, side)
            if min(w, h) <= side:
                assert got == (h, w)
            else:
                assert got == expected, (w, h, side)
    assert cache_budget.cache_side(224, 0.875) == 256 and cache_budget.cache_side(32, 1.0) == 32


def test_memory_and_disk_give_the_same_validation_tensors_and_statistics(tmp_path):
    data = write_mixed_images(tmp_path / "data")
    off, _ = task_for(data, "off", tmp_path / "c")
    memory, lines = task_for(data, "memory", tmp_path / "c")
    disk, _ = task_for(data, "disk", tmp_path / "c")
    assert lines and lines[0].startswith("data: image cache: memory (data.cache=memory): 12 images")
    assert off.summary["cache"].startswith("off")
    assert memory.val.cache.kind == "memory" and disk.val.cache.kind == "disk"
    # The promise: validation (resize + center crop) and the normalization statistics are bit-for-bit equal.
    reference = val_batch(off)
    assert reference.shape == (len(off.val), 3, 32, 32)
    assert torch.equal(val_batch(memory), reference) and torch.equal(val_batch(disk), reference)
    assert memory.mean == off.mean == disk.mean and memory.std == off.std == disk.std
    # Training crops: the right size and still random; the cached copies are at most 37 on the shorter side.
    for task in (memory, disk):
        train = train_batch(task)
        assert train.shape == (len(task.train), 3, 32, 32) and train.dtype == torch.float32
        assert not torch.equal(train, train_batch(task, seed=1))
        shapes = task.train.cache.shapes
        assert max(min(h, w) for _, h, w in shapes) == 37 and (3, 20, 30) in shapes  # small ones untouched
    # Grayscale: one channel in the cache, equal validation tensors again.
    gray_off, _ = task_for(data, "off", tmp_path / "c", "data.channels=gray")
    gray_disk, _ = task_for(data, "disk", tmp_path / "c", "data.channels=gray")
    assert gray_disk.val.cache.shapes[0][0] == 1
    assert torch.equal(val_batch(gray_disk), val_batch(gray_off))


def test_training_crops_are_identical_when_no_image_is_shrunk(tmp_path):
    write_color_images(tmp_path / "data", 4, seed=0, size=16)   # 16x16, below the cache side
    config = cfg.resolve(flags={"data": str(tmp_path / "data")}, sets=["data.cache=off"])
    off = prepare_task(config, None, log=lambda _line: None)
    memory = prepare_task(cfg.apply_overrides(config, {"data.cache": "memory"}), None, log=lambda _line: None)
    assert torch.equal(train_batch(memory, seed=3), train_batch(off, seed=3))


def test_disk_cache_is_reused_and_rebuilt_when_files_or_settings_change(tmp_path):
    data = write_mixed_images(tmp_path / "data")
    first, _ = task_for(data, "disk", tmp_path / "c")
    folder = Path(first.train.cache.file).parent
    assert "(built)" in first.summary["cache"] and folder.parent == tmp_path / "c"
    again, _ = task_for(data, "disk", tmp_path / "c")
    assert "(reused)" in again.summary["cache"] and Path(again.train.cache.file).parent == folder
    assert not [p for p in (tmp_path / "c").iterdir() if ".tmp-" in p.name]   # no temporary left behind

    # Touching a file (same bytes, new modification time) makes a new cache.
    victim = sorted((data / "cat").iterdir())[1]
    stat = victim.stat()
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    touched, _ = task_for(data, "disk", tmp_path / "c")
    assert "(built)" in touched.summary["cache"] and Path(touched.train.cache.file).parent != folder

    # Replacing a file's content: a new cache, and it serves the new pixels.
    Image.new("RGB", (50, 40), (255, 0, 0)).save(victim, format="JPEG")
    replaced, _ = task_for(data, "disk", tmp_path / "c")
    assert "(built)" in replaced.summary["cache"]
    pixels = replaced.train.cache.get(str(victim))   # train and val share one cache of every file
    assert pixels.shape == (3, 37, 46) and int(pixels[0].float().mean()) > 240

    # Another input size (so another cache side) or mode: another cache.
    other, _ = task_for(data, "disk", tmp_path / "c", "data.image_size=24")
    assert "(built)" in other.summary["cache"]
    keys = {image_cache.cache_key(["a.png"], mode="RGB", side=37), image_cache.cache_key(["a.png"], mode="L", side=37),
            image_cache.cache_key(["a.png"], mode="RGB", side=28)}
    assert len(keys) == 3


def _damage_truncate(folder: Path) -> None:
    path = folder / image_cache.PIXELS_FILE
    path.write_bytes(path.read_bytes()[:-100])


def _damage_flip(folder: Path) -> None:
    path = folder / image_cache.PIXELS_FILE
    raw = bytearray(path.read_bytes())
    raw[-7] ^= 0xFF
    path.write_bytes(bytes(raw))


def _damage_index(folder: Path) -> None:
    (folder / image_cache.INDEX_FILE).write_text('{"version": 1, "key": ')


@pytest.mark.parametrize("damage, reason", [(_damage_truncate, "truncated"), (_damage_flip, "checksum"),
                                            (_damage_index, "unreadable")])
def test_damaged_disk_cache_is_reported_and_rebuilt(tmp_path, damage, reason):
    data = write_mixed_images(tmp_path / "data")
    first, _ = task_for(data, "disk", tmp_path / "c")
    folder = Path(first.train.cache.file).parent
    expected = val_batch(first)
    damage(folder)
    lines: list[str] = []
    again, _ = task_for(data, "disk", tmp_path / "c", log=lines.append)
    assert any("damaged" in line and reason in line and "rebuilding" in line and str(folder) in line
               for line in lines), lines
    assert "rebuilt" in again.summary["cache"] and Path(again.train.cache.file).parent == folder
    assert torch.equal(val_batch(again), expected)
    third, _ = task_for(data, "disk", tmp_path / "c")
    assert "(reused)" in third.summary["cache"]


def test_an_interrupted_build_leaves_no_cache_behind(tmp_path):
    data = write_mixed_images(tmp_path / "data")
    paths = sorted(str(p) for p in data.rglob("*") if p.is_file())
    sizes = {p: Image.open(p).size for p in paths}
    (data / "dog" / "0.png").write_bytes(b"not an image any more")  # fails half-way through the build
    with pytest.raises(TorchwiseError, match="unreadable after the data was scanned"):
        image_cache.open_or_build_disk(paths, sizes, mode="RGB", side=37, root=tmp_path / "c")
    assert list((tmp_path / "c").iterdir()) == []          # neither a cache nor a temporary folder
    Image.new("RGB", (50, 40)).save(data / "dog" / "0.png")
    sizes[str(data / "dog" / "0.png")] = (50, 40)
    # A temporary folder of a build whose process died (pid 2**22 + 1 cannot exist) is cleaned up.
    key = image_cache.cache_key(paths, mode="RGB", side=37)
    (tmp_path / "c" / f".{key}.tmp-{socket.gethostname()}-{2**22 + 1}-abcd").mkdir()
    cache = image_cache.open_or_build_disk(paths, sizes, mode="RGB", side=37, root=tmp_path / "c")
    assert cache.status == "built"
    assert [p.name for p in (tmp_path / "c").iterdir()] == [key]


def test_unwritable_cache_folder_is_a_clear_error(tmp_path):
    data = write_mixed_images(tmp_path / "data")
    blocker = tmp_path / "a_file"
    blocker.write_text("a file where the cache folder should go")
    with pytest.raises(TorchwiseError, match="cannot be written") as info:
        task_for(data, "disk", blocker / "cache")
    text = str(info.value)
    assert str(blocker / "cache") in text and "data.cache_dir" in text and "data.cache=memory" in text
    # auto never fails on it: a small set goes to memory anyway.
    task, lines = task_for(data, "auto", blocker / "cache")
    assert lines[0].startswith("data: image cache: memory (auto: ")


def test_auto_chooses_by_budget(tmp_path, monkeypatch):
    assert cache_budget.choose_mode("auto", 10_000, tmp_path)[0] == "memory"
    assert cache_budget.choose_mode("off", 10_000, tmp_path) == ("off", "data.cache=off")
    monkeypatch.setattr(cache_budget, "MEMORY_BUDGET", 1000)  # the budgets live in cache_budget
    mode, why = cache_budget.choose_mode("auto", 10_000, tmp_path)
    assert mode == "disk" and "memory budget" in why
    mode, why = cache_budget.choose_mode("auto", 10**15, tmp_path)
    assert mode == "off" and "data.cache_dir" in why


def test_config_key_is_validated():
    assert cfg.resolve().data.cache == "auto" and cfg.resolve().data.cache_dir is None
    assert cfg.resolve(sets=["data.cache=DISK"]).data.cache == "disk"
    with pytest.raises(ConfigError, match="data.cache") as info:
        cfg.resolve(sets=["data.cache=memroy"])
    assert "memory" in str(info.value) and "did you mean" in str(info.value)
    assert "data.cache" in cfg.describe() and "data.cache_dir" in cfg.describe()
