"""A spreadsheet's CSV end to end through the command line: `train` says how the file was read,
`predict --out` keeps each row's number and ID, so predictions are matched by ID, not by position."""
from __future__ import annotations

import csv
from pathlib import Path

from conftest import run_cli
from testkit.spreadsheet_csv import spreadsheet_rows, write_spreadsheet


def _ok(proc, what: str) -> None:
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def test_train_export_predict_keeps_the_id_column_and_row_number(tmp_path: Path):
    wine = write_spreadsheet(tmp_path / "wine.csv", spreadsheet_rows(150))
    run = tmp_path / "runs" / "wine"
    train = run_cli("train", "--data", wine, "--target", "cultivar", "--out", run, "--epochs", "2",
                    "--set", "train.threads=1", "--set", "output.report=false", timeout=300)
    _ok(train, "torchwise train")
    data_line = next(line for line in train.stdout.splitlines() if line.startswith("data: "))
    assert "read as: separator ';' (semicolon), decimal comma (detected), ID column 'wine_id'" in data_line, data_line
    _ok(run_cli("export", run, "--format", "onnx", timeout=300), "torchwise export")

    # New rows, in another order than their IDs: only the ID column says which is which.
    new_rows = [r[:3] for r in spreadsheet_rows(6, seed=7)][::-1]
    new = write_spreadsheet(tmp_path / "new.csv", new_rows, ("wine_id", "alcohol", "acid"))
    pred = tmp_path / "pred.csv"
    proc = run_cli("predict", run, new, "--out", pred, timeout=300)
    _ok(proc, "torchwise predict")
    assert "data: " in proc.stderr and "ID column 'wine_id'" in proc.stderr, proc.stderr
    assert "separator ';' (semicolon), decimal comma" in proc.stderr, proc.stderr
    table = proc.stdout.strip().splitlines()
    assert table[0].split()[:3] == ["input", "wine_id", "top-1"], table[0]
    with pred.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["wine_id"] for r in rows] == [r[0] for r in new_rows]
    assert [r["row"] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert all(r["class"] in ("barolo", "grignolino", "barbera") and not r["error"] for r in rows)
