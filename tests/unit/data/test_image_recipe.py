"""The default image recipe: flips only where a mirror image means the same thing, and the data line
says which augmentations are on, which rule chose each and the key that changes it (issue 28, item 9)."""
from __future__ import annotations

import numpy as np
from PIL import Image

from conftest import write_color_images
from torchwise import config as cfg
from torchwise.data import imagefolder, tasks
from torchwise.data.image_decode import has_gray_pixels, open_image
from torchwise.data.transforms import decide_augmentation
from torchwise.run.log_lines import log_data
from testkit.scanned_digits import write_scanned_digits


def test_gray_pixels_are_seen_whatever_the_file_stores(tmp_path):
    gray = (np.arange(64 * 64) % 251).reshape(64, 64).astype(np.uint8)
    Image.fromarray(gray, "L").convert("RGB").save(tmp_path / "gray.jpg", quality=75)
    rgba = np.dstack([gray, gray, gray, np.full_like(gray, 128)])
    Image.fromarray(rgba, "RGBA").save(tmp_path / "gray_rgba.png")
    colour = np.dstack([gray, gray, gray]).copy()
    colour[:8, :8] = (200, 30, 30)  # a red stamp on 1.6% of a gray page is colour
    Image.fromarray(colour, "RGB").save(tmp_path / "stamp.png")
    assert has_gray_pixels(open_image(tmp_path / "gray.jpg"))
    assert has_gray_pixels(open_image(tmp_path / "gray_rgba.png"))
    assert not has_gray_pixels(open_image(tmp_path / "stamp.png"))


def _data_line(folder, **data) -> str:
    config = cfg.from_dict({"data": {"path": str(folder), "cache": "off", **data}})
    task = tasks.prepare_task(config, None, log=lambda _line: None)
    lines: list[str] = []
    log_data(task, lines.append)
    return lines[0]


def test_digits_stored_as_colour_files_get_no_flips_and_the_line_says_why(tmp_path):
    folder = write_scanned_digits(tmp_path / "digits", 12)
    scan = imagefolder.scan_image_folder(folder)
    assert scan.gray_pixels and not scan.grayscale  # RGB JPEGs and RGBA PNGs of gray digits
    line = _data_line(folder)
    assert "no flips, as every image is gray" in line and "data.hflip=true turns them on" in line, line
    on = _data_line(folder, hflip=True)
    assert ", flips," in on and "set: data.hflip=true" in on, on


def test_colour_photos_keep_flips_and_the_line_says_how_to_turn_them_off(tmp_path):
    write_color_images(tmp_path / "colours", 6, seed=0, size=40)
    line = _data_line(tmp_path / "colours")
    assert "random crop >= 0.35 of the area, flips, val center crop 0.875" in line, line
    assert "ImageNet's crops for images of 40 pixels" in line and "data.hflip=false turns them off" in line, line


def test_auto_augmentation_suits_the_images():
    digits = decide_augmentation("auto", "auto", "auto", gray=True, median_side=8)
    assert (digits.crop_scale, digits.hflip, digits.center_crop) == (0.8, False, 1.0)
    assert "8 pixels" in digits.describe() and "every image is gray" in digits.describe()
    photos = decide_augmentation("auto", "auto", "auto", gray=False, median_side=375)
    assert (photos.crop_scale, photos.hflip, photos.center_crop) == (0.35, True, 0.875)
    assert "data.hflip=false turns them off" in photos.describe()
    scans = decide_augmentation("auto", "auto", "auto", gray=False, gray_pixels=True, median_side=375)
    assert not scans.hflip
    chosen = decide_augmentation(0.5, True, 0.9, gray=True, median_side=8)  # what the user set is kept
    assert (chosen.crop_scale, chosen.hflip, chosen.center_crop) == (0.5, True, 0.9)
    assert chosen.why == "set: data.crop_scale=0.5, data.center_crop=0.9, data.hflip=true"
