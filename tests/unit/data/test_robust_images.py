"""Robustness of the image path (issue 16): every image Pillow opens is read on the right scale, or
refused with the reason; every folder layout gives the right classes and counts, or a clear error.

Everything here writes real files with Pillow (or by hand, for formats Pillow does not write) and
reads them back through torchwise's own paths: the folder scan, the per-file dataset path and the
image cache, which must all decode alike."""
from __future__ import annotations

import os
import struct
import unicodedata
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import assert_clear_api_error, tree_snapshot
from torchwise.data import image_cache, imagefolder
from testkit.image_folders import _classes, _img


RAMP16 = (np.arange(64, dtype=np.uint32).reshape(8, 8) * 65535 // 63).astype(np.uint16)  # 0 .. 65535
RAMP8 = (np.arange(64).reshape(8, 8) * 4).astype(np.uint8)                                   # 0 .. 252


# ----------------------------------------------------------------------------- writers


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png16(path: Path, pixels: np.ndarray) -> None:
    """A 16-bit-per-channel PNG (gray: H x W, RGB: H x W x 3), written by hand (Pillow does not write RGB 48-bit)."""
    height, width = pixels.shape[:2]
    color_type = 2 if pixels.ndim == 3 else 0
    rows = b"".join(b"\0" + pixels[y].astype(">u2").tobytes() for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(rows))
                     + _png_chunk(b"IEND", b""))


def write_pgm16(path: Path, pixels: np.ndarray, maxval: int = 65535) -> None:
    path.write_bytes(f"P5\n{pixels.shape[1]} {pixels.shape[0]}\n{maxval}\n".encode() + pixels.astype(">u2").tobytes())


def palette_image(transparent: bool, gray: bool = False) -> Image.Image:
    image = Image.new("P", (8, 8), 0)
    colors = [(0, 0, 0), (90, 90, 90), (200, 200, 200)] if gray else [(255, 0, 0), (0, 0, 255), (0, 200, 0)]
    image.putpalette([v for c in colors for v in c] + [0] * (256 - len(colors)) * 3)
    pixels = np.zeros((8, 8), np.uint8)
    pixels[:, 4:] = 1
    pixels[4:, :] = 2
    image.putdata(pixels.ravel().tolist())
    if transparent:
        image.info["transparency"] = 0
    return image


def rgba(alpha: int) -> Image.Image:
    pixels = np.zeros((8, 8, 4), np.uint8)
    pixels[..., 0] = 200            # red under the alpha
    pixels[..., 3] = alpha
    pixels[:, :4, 3] = 255          # the left half is opaque
    return Image.fromarray(pixels, "RGBA")


# Each case: (file name, writer(path), expected mode, check(decoded uint8 array)).
def _ramp_kept(array: np.ndarray) -> None:
    flat = array.astype(int).ravel()
    assert flat.min() == 0 and flat.max() == 255, (flat.min(), flat.max())   # spans [0, 1], not all white
    assert (np.diff(flat) >= 0).all()                                       # the order is kept
    assert np.array_equal(array, np.rint(RAMP16 / 257).astype(np.uint8))    # 16-bit v*257 reads as 8-bit v


def _expect_value(value):
    def check(array):
        assert np.all(array == value), np.unique(array)
    return check


def _alpha_composited(array):
    assert np.all(array[:, :4] == (200, 0, 0))              # opaque: the colour
    assert np.all(array[:, 4:] == (255, 255, 255))          # transparent: the white background, not the red under it


def _half_alpha(array):
    assert np.all(array[:, 4:] == (227, 127, 127))          # 50 % red over white: 200 a + 255 (1 - a)


def _palette_colors(array):
    assert tuple(array[0, 0]) == (255, 0, 0) and tuple(array[0, 7]) == (0, 0, 255) and tuple(array[7, 0]) == (0, 200, 0)


def _palette_transparent(array):
    assert tuple(array[0, 0]) == (255, 255, 255) and tuple(array[0, 7]) == (0, 0, 255)


def _palette_gray(array):
    assert array.ndim == 2 and array[0, 0] == 0 and array[0, 7] == 90 and array[7, 0] == 200


def _cmyk(array):
    assert tuple(array[0, 0]) == (0, 255, 255)               # full cyan
    assert tuple(array[0, 7]) == (255, 255, 255)             # no ink: white


def _cmyk_writer(path):
    pixels = np.zeros((8, 8, 4), np.uint8)
    pixels[:, :4, 0] = 255
    Image.fromarray(pixels, "CMYK").save(path, **({"quality": 100} if path.suffix == ".jpg" else {}))


def _cmyk_near(array):                                        # JPEG is lossy: within a few levels
    assert np.abs(array[1:3, 1:3].astype(int) - (0, 255, 255)).max() <= 8, array[1, 1]
    assert np.abs(array[1:3, 5:7].astype(int) - 255).max() <= 8, array[1, 6]


def _rgb_ramp_kept(array):
    for channel in range(3):                                  # Pillow keeps each 16-bit channel's high byte
        flat = array[..., channel].astype(int).ravel()
        assert flat.min() == 0 and flat.max() == 255 and (np.diff(flat) >= 0).all(), np.unique(flat)


def _exif_writer(orientation):
    def write(path):
        pixels = np.zeros((10, 20, 3), np.uint8)
        pixels[:, :10] = (255, 0, 0)                          # left half red, as stored
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(pixels).save(path, exif=exif, quality=95)
    return write


def _exif_rotated(array):
    assert array.shape[:2] == (20, 10)                       # displayed upright: 10 wide, 20 high
    assert array[2, 5, 0] > 200 and array[17, 5, 0] < 60     # orientation 6 (rotate 90 cw): red at the top


def _exif_upside_down(array):
    assert array.shape[:2] == (10, 20) and array[5, 17, 0] > 200 and array[5, 2, 0] < 60   # 3: rotated 180


DECODE_CASES = {
    "16-bit gray PNG (I;16)": ("g16.png", lambda p: Image.fromarray(RAMP16).save(p), "L", _ramp_kept),
    "16-bit big-endian (I;16B)": ("g16b.png", lambda p: Image.frombytes("I;16B", (8, 8), RAMP16.astype(">u2").tobytes())
                                  .save(p), "L", _ramp_kept),
    "16-bit gray TIFF": ("g16.tif", lambda p: Image.fromarray(RAMP16).save(p), "L", _ramp_kept),
    "16-bit PGM (I)": ("g16.pgm", lambda p: write_pgm16(p, RAMP16), "L", _ramp_kept),
    "16-bit PNG by hand": ("h16.png", lambda p: write_png16(p, RAMP16), "L", _ramp_kept),
    "48-bit RGB PNG": ("rgb48.png", lambda p: write_png16(p, np.stack([RAMP16] * 3, -1)), "RGB", _rgb_ramp_kept),
    "32-bit float TIFF in [0, 1] (F)": ("f.tif", lambda p: Image.fromarray((RAMP16 / 65535).astype(np.float32)).save(p),
                                        "L", _ramp_kept),
    "1-bit (1)": ("bits.png", lambda p: Image.new("1", (8, 8), 1).save(p), "L", _expect_value(255)),
    "8-bit gray (L)": ("g8.png", lambda p: Image.fromarray(RAMP8).save(p), "L",
                       lambda a: np.testing.assert_array_equal(a, RAMP8)),
    "palette (P)": ("pal.png", lambda p: palette_image(False).save(p), "RGB", _palette_colors),
    "palette, transparent colour (P)": ("palt.png", lambda p: palette_image(True).save(p), "RGB", _palette_transparent),
    "palette GIF with transparency": ("palt.gif", lambda p: palette_image(True).save(p), "RGB", _palette_transparent),
    "gray palette (P)": ("palg.png", lambda p: palette_image(False, gray=True).save(p), "L", _palette_gray),
    "gray + alpha (LA)": ("la.png", lambda p: Image.fromarray(np.dstack([np.full((8, 8), 30, np.uint8),
                                                                         np.zeros((8, 8), np.uint8)]), "LA").save(p),
                          "L", _expect_value(255)),
    "RGBA, transparent half": ("rgba.png", lambda p: rgba(0).save(p), "RGB", _alpha_composited),
    "RGBA, half-transparent half": ("rgba_half.png", lambda p: rgba(128).save(p), "RGB", _half_alpha),
    "RGBA WebP": ("rgba.webp", lambda p: rgba(0).save(p, lossless=True), "RGB", _alpha_composited),
    "CMYK TIFF": ("cmyk.tif", _cmyk_writer, "RGB", _cmyk),
    "CMYK JPEG": ("cmyk.jpg", _cmyk_writer, "RGB", _cmyk_near),
    "EXIF orientation 6 JPEG": ("rot6.jpg", _exif_writer(6), "RGB", _exif_rotated),
    "EXIF orientation 3 JPEG": ("rot3.jpg", _exif_writer(3), "RGB", _exif_upside_down),
    "BMP": ("x.bmp", lambda p: Image.new("RGB", (8, 8), (10, 20, 30)).save(p), "RGB", _expect_value((10, 20, 30))),
}


@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_every_pixel_format_decodes_on_its_real_scale_alike_on_every_path(case, tmp_path):
    name, write, mode, check = DECODE_CASES[case]
    path = tmp_path / name
    write(path)
    image = imagefolder.open_image(path)
    assert image.mode == mode
    array = np.asarray(image)
    check(array)
    # The per-file dataset path and the image cache decode the same way (in the model's mode).
    for model_mode in ("L", "RGB"):
        expected = np.asarray(imagefolder.to_mode(image, model_mode))
        dataset = imagefolder.ImageDataset([(str(path), 0)], lambda x: x, mode=model_mode)
        np.testing.assert_array_equal(np.asarray(dataset.load_image(0)), expected)
        for decoded in (None, {str(path): image}):
            cache = image_cache.build_memory([str(path)], {str(path): image.size}, mode=model_mode, side=64,
                                             decoded=decoded, threads=1)
            pixels = cache.get(str(path)).permute(1, 2, 0).numpy()
            np.testing.assert_array_equal(pixels.squeeze(-1) if model_mode == "L" else pixels, expected)


def test_in_memory_modes_without_a_file_format(tmp_path):
    ycbcr = Image.new("RGB", (4, 4), (30, 140, 220)).convert("YCbCr")
    assert np.abs(np.asarray(imagefolder.to_standard(ycbcr)).astype(int) - (30, 140, 220)).max() <= 3
    rgba_pre = rgba(0).convert("RGBa")
    assert np.all(np.asarray(imagefolder.to_standard(rgba_pre))[:, 4:] == 255)
    i32 = Image.fromarray(RAMP16.astype(np.int32))          # mode I, no recorded depth: 16-bit values
    _ramp_kept(np.asarray(imagefolder.to_standard(i32)))


@pytest.mark.parametrize("case", ["float outside [0, 1]", "float NaN", "32-bit integer TIFF", "negative integers"])
def test_pixels_of_unknown_scale_are_refused_with_the_reason(case, tmp_path):
    path = tmp_path / "x.tif"
    if case == "float outside [0, 1]":
        Image.fromarray(np.full((4, 4), 300.0, np.float32)).save(path)
        said = "not [0, 1]"
    elif case == "float NaN":
        Image.fromarray(np.full((4, 4), np.nan, np.float32)).save(path)
        said = "NaN"
    elif case == "32-bit integer TIFF":
        Image.fromarray(RAMP16.astype(np.int32)).save(path)
        said = "32-bit integer"
    else:
        Image.fromarray(RAMP16.astype(np.int32) - 5).save(path)
        said = "below zero"
    image, reason = imagefolder.decode_image(str(path))
    assert image is None and said in reason, reason


def _two_classes(root: Path, write, n: int = 4) -> None:
    for c, name in enumerate(("dark", "light")):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            write(root / name / f"{name}_{i}", c, i)


def test_a_mixed_8_and_16_bit_folder_is_on_one_scale(tmp_path):
    def write(stem, c, i):
        base = (RAMP8 // 2 + 100 * c).astype(np.uint8)
        if i % 2:
            Image.fromarray(base.astype(np.uint16) * 257).save(f"{stem}.png")   # the same picture in 16 bits
        else:
            Image.fromarray(base).save(f"{stem}.png")
    _two_classes(tmp_path / "d", write)
    scan = imagefolder.scan_image_folder(tmp_path / "d", val_fraction=0.25)
    assert scan.grayscale and not scan.skipped
    assert scan.source_modes == {"L": 4, "I;16": 4} and "16-bit gray" in scan.summary()["pixels"]
    by_class: dict[int, list[np.ndarray]] = {}
    for path, label in scan.train + scan.val:
        by_class.setdefault(label, []).append(np.asarray(scan.cache[path]))
        np.testing.assert_array_equal(np.asarray(imagefolder.read_image(path, "L")), np.asarray(scan.cache[path]))
    for arrays in by_class.values():
        assert all(np.array_equal(arrays[0], a) for a in arrays)


# ----------------------------------------------------------------------------- folders


def _counts(scan) -> dict[str, int]:
    total = {name: 0 for name in scan.class_names}
    for samples in (scan.train, scan.val):
        for name, n in scan.class_counts(samples).items():
            total[name] += n
    return total


def _link(link: Path, target: Path | str) -> None:
    os.symlink(target, link)


def _refused(root: Path, *must_say: str) -> None:
    from torchwise.errors import TorchwiseError

    before = tree_snapshot(root)
    with pytest.raises(TorchwiseError) as excinfo:
        imagefolder.scan_image_folder(root)
    assert_clear_api_error(excinfo, *must_say)
    assert tree_snapshot(root) == before


def test_a_link_back_to_the_data_folder_is_refused_not_a_class(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "all", ".")
    _refused(root, "link back", str(root / "all"))


def test_a_link_to_a_parent_folder_is_refused(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "up", "..")
    _refused(root, "link back", "up")


def test_a_link_in_train_back_to_the_data_folder_is_refused(tmp_path):
    root = tmp_path / "d"
    _classes(root / "train")
    _classes(root / "val", 1)
    _link(root / "train" / "again", "..")
    _refused(root, "link back", "again")


def test_class_folders_linked_from_elsewhere_are_kept(tmp_path):
    elsewhere = _classes(tmp_path / "store", 3, names=("a", "b"))
    root = tmp_path / "d"
    root.mkdir()
    _link(root / "cat", elsewhere / "a")
    _link(root / "dog", elsewhere / "b")
    scan = imagefolder.scan_image_folder(root)
    assert scan.class_names == ["cat", "dog"] and _counts(scan) == {"cat": 3, "dog": 3} and not scan.skipped
    assert all(p.startswith(str(root)) for p, _ in scan.train + scan.val)   # paths as the user sees them


def test_two_class_links_to_one_folder_are_refused(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "kitten", root / "cat")
    _refused(root, "same folder", "kitten")


def test_a_link_to_one_image_of_another_class_is_refused_with_both_paths(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "dog" / "stray.png", root / "cat" / "0.png")
    _refused(root, "two classes", str(root / "cat" / "0.png"), str(root / "dog" / "stray.png"))


def test_a_hard_link_between_train_and_val_is_refused(tmp_path):
    root = tmp_path / "d"
    _classes(root / "train")
    _classes(root / "val", 1)
    os.link(root / "train" / "cat" / "1.png", root / "val" / "cat" / "copy.png")
    _refused(root, "training and the validation", "copy.png")


def test_a_second_path_to_a_file_of_the_same_class_counts_once(tmp_path):
    root = _classes(tmp_path / "d", 4)
    _link(root / "cat" / "again.png", root / "cat" / "0.png")
    scan = imagefolder.scan_image_folder(root)
    assert _counts(scan) == {"cat": 4, "dog": 4}
    assert [(Path(p).name, "counted once" in r) for p, r in scan.skipped] == [("again.png", True)]


def test_an_image_linked_from_outside_the_folder_is_used(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "cat" / "outside.png", _img(tmp_path / "elsewhere" / "x.png"))
    assert _counts(imagefolder.scan_image_folder(root)) == {"cat": 4, "dog": 3}


def test_a_loop_inside_a_class_is_not_followed_and_is_reported(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "cat" / "loop", "..")
    _link(root / "cat" / "self", ".")
    scan = imagefolder.scan_image_folder(root)
    assert _counts(scan) == {"cat": 3, "dog": 3}
    assert sorted(Path(p).name for p, r in scan.skipped if "loop" in r) == ["loop", "self"]


def test_a_broken_image_link_is_reported_and_a_broken_class_link_refused(tmp_path):
    root = _classes(tmp_path / "d")
    _link(root / "cat" / "gone.png", tmp_path / "nowhere.png")
    scan = imagefolder.scan_image_folder(root)
    assert _counts(scan) == {"cat": 3, "dog": 3}
    assert [(Path(p).name, "broken link" in r) for p, r in scan.skipped] == [("gone.png", True)]
    _link(root / "bird", tmp_path / "unmounted")
    _refused(root, "broken link", "bird")


def test_hidden_and_tool_folders_are_never_classes_nor_images(tmp_path):
    root = _classes(tmp_path / "d")
    _img(root / ".ipynb_checkpoints" / "x.png")
    _img(root / "cat" / ".ipynb_checkpoints" / "0-checkpoint.png")
    _img(root / "__MACOSX" / "cat" / "._0.png")
    _img(root / "dog" / "__MACOSX" / "x.png")
    (root / "cat" / "._1.png").write_bytes(b"\0\5\26\7 AppleDouble")
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "dog" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    scan = imagefolder.scan_image_folder(root)
    assert scan.class_names == ["cat", "dog"] and _counts(scan) == {"cat": 3, "dog": 3} and not scan.skipped


def test_an_empty_class_folder_is_refused_by_name(tmp_path):
    root = _classes(tmp_path / "d")
    (root / "bird").mkdir()
    _refused(root, "no readable training images", "bird")


def test_a_class_of_unreadable_formats_says_which_formats(tmp_path):
    root = _classes(tmp_path / "d")
    (root / "bird").mkdir()
    (root / "bird" / "IMG_0001.HEIC").write_bytes(b"\0\0\0\x18ftypheic")
    _refused(root, "bird", ".heic", "convert them")


def test_nested_folders_inside_a_class_belong_to_it(tmp_path):
    root = _classes(tmp_path / "d")
    _img(root / "cat" / "2024" / "june" / "a.png")
    _img(root / "cat" / "2024" / "b.png")
    assert _counts(imagefolder.scan_image_folder(root)) == {"cat": 5, "dog": 3}


def test_train_and_val_with_different_class_sets(tmp_path):
    root = tmp_path / "d"
    _classes(root / "train", 3, names=("cat", "dog", "fox"))
    _classes(root / "val", 1, names=("cat", "dog"))
    scan = imagefolder.scan_image_folder(root)                    # a class without val images is allowed
    assert scan.class_counts(scan.val) == {"cat": 1, "dog": 1, "fox": 0}
    _img(root / "val" / "owl" / "0.png")
    _refused(root, "only in val", "owl")


def test_class_names_in_two_unicode_forms_are_one_class(tmp_path):
    root = tmp_path / "d"
    for split, form, n in (("train", "NFC", 3), ("val", "NFD", 1)):
        _classes(root / split, n, names=(unicodedata.normalize(form, "café"), "thé"))
    scan = imagefolder.scan_image_folder(root)
    assert scan.class_names == [unicodedata.normalize("NFC", "café"), "thé"]
    assert scan.class_counts(scan.val) == {unicodedata.normalize("NFC", "café"): 1, "thé": 1}


ODD_NAMES = ["UPPER.JPG", "Shot.PNG", "photo.jpeg", "a.webp", "b.bmp", "c.tif", "d.TIFF", "e.jfif",
             "with space.png", "#hash%20(1).png", "-leading-dash.png", "ünïcödé 猫.png", "two.dots.png",
             "'quote\".png"]


def test_odd_file_names_and_upper_case_extensions_are_all_read(tmp_path):
    root = _classes(tmp_path / "d", 2)
    for name in ODD_NAMES:
        _img(root / "cat" / name)
    (root / "cat" / "readme.txt").write_text("not an image")
    (root / "cat" / "x.png.txt").write_text("not an image either")
    scan = imagefolder.scan_image_folder(root)
    assert _counts(scan) == {"cat": 2 + len(ODD_NAMES), "dog": 2} and not scan.skipped
    found = {Path(p).name for p, label in scan.train + scan.val if label == 0}
    assert set(ODD_NAMES) <= found
