"""The files the data layer and the config write outlive the process: a write that fails half-way (a full
disk, the file size limit, a crash) leaves the previous file byte for byte, and a write that succeeds
gives the new content with the mode the umask gives any file.

Each writer: the run's config.yaml (RunConfig.save), split.json (prepare_task), the cached
normalization statistics (data_stats.json) and the demo digits. The failure is real: a subprocess runs
the writer under a file size limit (RLIMIT_FSIZE) smaller than the new content, so the operating system
refuses the write in the middle of the file, as a full disk does.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from torchwise import config as cfg
from torchwise.data import stats, tasks
from torchwise.data.digits import write_digits
from torchwise.errors import TorchwiseError


# Far longer than any of these writes takes; only a hang reaches it.


def usual_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def no_temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_config_save_writes_the_same_yaml_with_the_usual_mode(tmp_path):
    config = cfg.resolve(flags={"lr": "0.5"})
    path = config.save(tmp_path / "config.yaml")
    assert path.read_text() == yaml.safe_dump(config.to_dict(), sort_keys=False)
    assert (path.stat().st_mode & 0o777) == usual_mode()
    assert cfg.load_yaml(path).train.lr == 0.5


def test_config_save_failing_in_the_serializer_keeps_the_old_file(tmp_path, monkeypatch):
    path = cfg.resolve().save(tmp_path / "config.yaml")
    old = path.read_bytes()

    def broken(*_args, **_kwargs):
        raise yaml.YAMLError("cannot represent")

    monkeypatch.setattr(yaml, "safe_dump", broken)
    with pytest.raises(yaml.YAMLError):
        cfg.resolve(flags={"lr": "0.5"}).save(path)
    assert path.read_bytes() == old
    assert no_temporaries(tmp_path) == []


# ----------------------------------------------------------------------------- split.json


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "table.csv"
    path.write_text("x,y\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(40)))
    return path


def test_split_json_has_its_usual_bytes_and_mode(tmp_path):
    run = tmp_path / "run"
    config = cfg.from_dict({"data": {"path": str(_csv(tmp_path)), "target": "y"}})
    task = tasks.prepare_task(config, run, log=lambda _line: None)
    path = run / tasks.SPLIT_FILE
    split = json.loads(path.read_text())
    assert path.read_text() == json.dumps(split, indent=1)  # the layout split.json always had
    assert split["kind"] == "tabular" and len(split["val_rows"]) == len(task.val)
    assert (path.stat().st_mode & 0o777) == usual_mode()


def test_stats_cache_has_its_usual_bytes_and_mode(tmp_path):
    mean, std, cached = stats.cached_mean_std(tmp_path, "k", lambda: ([0.5], [0.25]))
    assert (mean, std, cached) == ([0.5], [0.25], False)
    path = tmp_path / stats.STATS_FILE
    assert path.read_text() == json.dumps({"key": "k", "mean": [0.5], "std": [0.25], "split": "train"}, indent=2)
    assert (path.stat().st_mode & 0o777) == usual_mode()
    assert stats.cached_mean_std(tmp_path, "k", lambda: pytest.fail("recomputed")) == ([0.5], [0.25], True)


def test_a_temporary_that_cannot_be_created_is_a_clear_error(tmp_path):
    """A failure of another kind (the temporary file cannot even be created: with its random suffix its name is
    longer than the filesystem allows): still the old file, and an error that names the file instead of a
    traceback. (A folder or a link at any name the temporary could take no longer blocks it: the temporary is
    made under a fresh random name, exclusively; tests/unit/train/test_run_folder_links.py.)"""
    from torchwise import files

    path = tmp_path / ("s" * 240 + ".json")
    old = b'{"key": "old"}'
    path.write_bytes(old)
    with pytest.raises(TorchwiseError) as info:
        files.write_json(path, {"key": "new"})
    assert str(path) in str(info.value) and "free disk space" in str(info.value)
    assert path.read_bytes() == old and no_temporaries(tmp_path) == []


def test_digits_are_written_whole_with_the_usual_mode(tmp_path):
    from PIL import Image

    root = write_digits(tmp_path / "digits")
    files = sorted(root.glob("*/digit_*.png"))
    assert len(files) == 1797 and not list(root.glob("*/.*"))
    with Image.open(files[0]) as image:
        image.load()
        assert image.size == (8, 8) and image.mode == "L"
    assert (files[0].stat().st_mode & 0o777) == usual_mode()
