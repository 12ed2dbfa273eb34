"""The embedded digits data set, written as an image folder."""
from __future__ import annotations

from PIL import Image

from torchwise.data.digits import DIGITS_COUNT, write_digits


def test_digits_are_written_as_an_image_folder(tmp_path):
    root = write_digits(tmp_path / "digits")
    files = sorted(root.glob("*/*.png"))
    assert len(files) == DIGITS_COUNT == 1797
    assert sorted(p.name for p in root.iterdir()) == [str(d) for d in range(10)]
    image = Image.open(files[0])
    assert image.size == (8, 8) and image.mode == "L"
    assert image.getextrema()[1] > 200  # scaled from 0..16 to 0..255
    mtime = files[0].stat().st_mtime_ns
    write_digits(root)  # a second call keeps the files
    assert files[0].stat().st_mtime_ns == mtime
