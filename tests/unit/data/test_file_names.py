"""File and folder names that are not UTF-8 (Latin-1 from an old archive): exact as keys, readable when shown."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from torchwise.data import class_folders, stats
from torchwise.errors import TorchwiseError
from torchwise.file_names import READABLE, name_bytes, readable, shown, strict_utf8_path

LATIN1 = os.fsdecode(b"caf\xe9")          # what Python hands over for the bytes b"caf\xe9"
MIXED = os.fsdecode("niño-".encode() + b"\xf1")  # valid UTF-8 and one Latin-1 byte in one name


def test_shown_reads_undecodable_bytes_as_latin1_and_keeps_utf8():
    assert shown(LATIN1) == "café"
    assert shown(MIXED) == "niño-ñ"
    assert shown(b"caf\xe9") == "café"
    assert shown("plain.png") == "plain.png"
    assert shown(Path(LATIN1) / "x.png") == "café/x.png"


def test_name_bytes_are_exact_so_two_names_never_collide():
    assert name_bytes(LATIN1) == b"caf\xe9"
    assert name_bytes("café") == "café".encode()
    assert name_bytes(LATIN1) != name_bytes("café")   # shown alike, different files: keys must differ


def test_readable_goes_through_containers():
    assert readable({LATIN1: [MIXED, (LATIN1,)], "n": 1}) == {"café": ["niño-ñ", ("café",)], "n": 1}


@pytest.mark.parametrize("encoding, expected", [("utf-8", "x café niño"), ("ascii", "x caf\\xe9 ni\\xf1o")])
def test_console_handler_prints_names_readably_on_any_stream(encoding, expected):
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors=READABLE)
    stream.write(f"x {LATIN1} niño")
    stream.flush()
    assert raw.getvalue().decode(encoding) == expected


def test_error_values_show_names_readably():
    text = str(TorchwiseError("Bad file.", values={"path": f"/d/{LATIN1}.png", "names": [LATIN1]}, fix="rename"))
    assert "/d/café.png" in text and "['café']" in text
    text.encode("utf-8")  # printable anywhere


def test_fingerprint_and_class_names_of_latin1_folders(tmp_path):
    folder = tmp_path / os.fsdecode(b"ni\xf1o")
    folder.mkdir()
    (folder / LATIN1).write_bytes(b"x")
    (folder / "café").write_bytes(b"x")
    key = stats.fingerprint([str(folder / LATIN1)], {"side": 8})
    assert key == stats.fingerprint([str(folder / LATIN1)], {"side": 8})
    assert key != stats.fingerprint([str(folder / "café")], {"side": 8})
    assert class_folders.class_name_of(folder) == "niño"


def test_strict_utf8_path_reaches_a_latin1_folder(tmp_path):
    folder = os.fsencode(tmp_path) + b"/r\xe9s"
    os.mkdir(folder)
    path, fd = strict_utf8_path(folder)
    try:
        path.encode("utf-8")  # what TensorBoard does to it
        Path(path, "f.txt").write_text("ok")
        assert (Path(os.fsdecode(folder)) / "f.txt").read_text() == "ok"
    finally:
        if fd is not None:
            os.close(fd)
    assert strict_utf8_path(tmp_path) == (str(tmp_path), None)


def test_utf8_reachable_opens_files_under_latin1_folders_and_names(tmp_path):
    import torch

    from torchwise.file_names import utf8_reachable

    folder = tmp_path / os.fsdecode(b"r\xe9s")
    folder.mkdir()
    for base in ("state.pt", LATIN1 + ".pt"):
        torch.save({"x": torch.arange(3)}, folder / base)
        with utf8_reachable(folder / base) as name:
            name.encode("utf-8")  # what C++ readers do with it
            assert torch.equal(torch.load(name, weights_only=True, mmap=True)["x"], torch.arange(3))
    with utf8_reachable(tmp_path / "plain.pt") as name:
        assert name == str(tmp_path / "plain.pt")
