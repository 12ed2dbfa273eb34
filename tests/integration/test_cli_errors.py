"""Bad input ends with exit code 2 and a message that names the values and the fix, no traceback."""
from __future__ import annotations

import shutil

import pytest

from conftest import run_cli, write_color_images
from torchwise.cli.main import main


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_missing_target_column_lists_columns_with_did_you_mean(classification_csv, tmp_path):
    # the one error test in a subprocess: exit status and stderr exactly as a user sees them
    proc = run_cli("train", "--data", classification_csv, "--target", "lable", "--out", tmp_path / "r")
    assert proc.returncode == 2
    assert "not in the CSV file" in proc.stderr
    assert "id, x1, x2, color, label" in proc.stderr and "did you mean: label" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_csv_without_target(classification_csv, tmp_path, capsys):
    err = _error(capsys, ["train", "--data", str(classification_csv), "--out", str(tmp_path / "r")])
    assert "--target" in err and "label" in err


def test_unknown_set_key_and_bad_value(image_folder, tmp_path, capsys):
    err = _error(capsys, ["train", "--data", str(image_folder), "--out", str(tmp_path / "r"),
                          "--set", "train.learning_rate=0.1"])
    assert "train.learning_rate" in err and "allowed" in err
    err = _error(capsys, ["train", "--data", str(image_folder), "--out", str(tmp_path / "r"),
                          "--set", "train.scheduler=cosin"])
    assert "did you mean: cosine" in err
    err = _error(capsys, ["train", "--data", str(image_folder), "--out", str(tmp_path / "r"), "--lr", "fast"])
    assert "train.lr" in err and "fast" in err


def test_empty_folder_and_single_class(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    err = _error(capsys, ["train", "--data", str(tmp_path / "empty"), "--out", str(tmp_path / "r")])
    assert "No class folders" in err
    write_color_images(tmp_path / "one", 3, seed=0)
    for name in ("green", "blue"):
        shutil.rmtree(tmp_path / "one" / name)
    err = _error(capsys, ["train", "--data", str(tmp_path / "one"), "--out", str(tmp_path / "r")])
    assert "at least two classes" in err and "red" in err


def test_missing_data_path_and_unknown_model(image_folder, tmp_path, capsys):
    err = _error(capsys, ["train", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")])
    assert "does not exist" in err
    err = _error(capsys, ["train", "--data", str(image_folder), "--out", str(tmp_path / "r2"), "--model", "resnet19"])
    assert "did you mean: resnet18" in err


def test_no_out_dir(image_folder, capsys):
    err = _error(capsys, ["train", "--data", str(image_folder)])
    assert "--out" in err


@pytest.mark.parametrize("argv", [["eval", "--run", "/nonexistent/run"]])
def test_eval_of_missing_run(argv, capsys):
    assert "does not exist" in _error(capsys, argv)
