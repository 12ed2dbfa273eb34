"""A CSV exported from a spreadsheet (`;` separators, decimal commas, an ID column, text labels): the
data line says how it was read, the ID columns are recorded, and predict keeps them with the row number."""
from __future__ import annotations

import csv
import json

import pytest

from torchwise import config as cfg
from torchwise.data import tabular, tasks
from torchwise.data.tabular_encoder import TabularEncoder
from torchwise.export.preprocess import read_csv_rows
from torchwise.predict import format_table, write_results
from torchwise.run.log_lines import log_data
from testkit.spreadsheet_csv import spreadsheet_rows, write_spreadsheet


def test_train_data_line_names_separator_decimal_mark_and_id_column(tmp_path):
    path = write_spreadsheet(tmp_path / "wine.csv", spreadsheet_rows(120))
    config = cfg.from_dict({"data": {"path": str(path), "target": "cultivar"}})
    task = tasks.prepare_task(config, None, log=lambda _line: None)
    lines: list[str] = []
    log_data(task, lines.append)
    assert task.summary["id_columns"] == ["wine_id"]
    first = lines[0]
    assert "read as: separator ';' (semicolon), decimal comma (detected), ID column 'wine_id'" in first, first
    assert task.meta()["tabular"]["encoder"]["ids"] == ["wine_id"]  # recorded in the run for predict


def test_a_plain_file_says_it_was_read_with_commas_and_points(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text("x,y\n" + "".join(f"{i / 10:.1f},{'ab'[i % 2]}\n" for i in range(40)))
    data = tabular.load_tabular(path, "y")
    assert data.notes["read_as"] == "separator ',', decimal point (detected), no ID column"
    comma = tabular.load_tabular(path, "y", decimal="point")
    assert "decimal point (data.decimal=point)" in comma.notes["read_as"]


@pytest.mark.parametrize("name", ["id", "ID", "Nr.", "wine_id", "WineID", "customerId"])
def test_a_column_named_as_an_identifier_with_a_value_per_row_is_an_id_even_when_numeric(tmp_path, name):
    # Numbers that only count the rows of a file sorted by class would otherwise be its best feature.
    rows = spreadsheet_rows(30, ids="number")
    data = tabular.load_tabular(write_spreadsheet(tmp_path / "w.csv", rows, (name, "alcohol", "acid", "cultivar")),
                                "cultivar")
    assert data.encoder.ids == [name] and name not in data.encoder.numeric
    assert data.encoder.ignored[name].startswith("looks like an identifier (named")
    assert data.encoder.feature_names == ["alcohol", "acid"]


def test_a_repeated_or_ordinary_column_is_not_an_id(tmp_path):
    rows = [[str(i % 7), a, b, c] for i, (_, a, b, c) in enumerate(spreadsheet_rows(30))]
    data = tabular.load_tabular(write_spreadsheet(tmp_path / "w.csv", rows), "cultivar")
    assert data.encoder.ids == [] and "wine_id" in data.encoder.numeric  # repeats: not one value per row
    acid = [[a, b, str(i), c] for i, (_, a, b, c) in enumerate(spreadsheet_rows(30))]
    data = tabular.load_tabular(write_spreadsheet(tmp_path / "a.csv", acid, ("x", "y", "acid", "cultivar")),
                                "cultivar")
    assert data.encoder.ids == [] and "acid" in data.encoder.numeric  # "acid" merely ends in "id"


def test_a_run_saved_before_ids_were_recorded_still_names_them():
    old = {"columns": ["code", "x"], "numeric": {"x": 0.0}, "categorical": {},
           "ignored": {"code": "looks like an identifier (60 distinct values in 60 training rows)",
                       "empty": "no values (every cell is empty or missing)"}}
    assert TabularEncoder.from_dict(old).ids == ["code"]


def _trained(tmp_path) -> tuple[dict, dict]:
    data = tabular.load_tabular(write_spreadsheet(tmp_path / "wine.csv", spreadsheet_rows(120)), "cultivar")
    meta = json.loads(json.dumps({"tabular": data.tabular_meta()}))  # as the run stores it
    return meta, {"mean": data.mean, "std": data.std}


def test_predict_rows_keep_their_number_and_id(tmp_path):
    meta, spec = _trained(tmp_path)
    new = write_spreadsheet(tmp_path / "new.csv", [r[:3] for r in spreadsheet_rows(5, seed=1)][::-1],
                            ("wine_id", "alcohol", "acid"))
    read = read_csv_rows(str(new), meta, spec)
    assert [r["row"] for r in read.rows] == [1, 2, 3, 4, 5]
    assert [r["ids"]["wine_id"] for r in read.rows] == ["W-0005", "W-0004", "W-0003", "W-0002", "W-0001"]
    assert read.read_as == "separator ';' (semicolon), decimal comma (as in training), ID column 'wine_id'"
    assert read.x.shape == (5, 2)


def test_predict_reads_a_file_written_with_the_other_decimal_mark_by_its_own_mark(tmp_path):
    meta, spec = _trained(tmp_path)
    rows = [r[:3] for r in spreadsheet_rows(5, seed=1)]
    comma = read_csv_rows(str(write_spreadsheet(tmp_path / "c.csv", rows, ("wine_id", "alcohol", "acid"))),
                          meta, spec)
    point_rows = [[a, b.replace(",", "."), c.replace(",", ".")] for a, b, c in rows]
    point = read_csv_rows(str(write_spreadsheet(tmp_path / "p.csv", point_rows, ("wine_id", "alcohol", "acid"))),
                          meta, spec)
    assert point.x.tolist() == comma.x.tolist()  # 12.35 is what 12,35 meant, not a missing value
    assert "decimal point (this file's own in 2 column(s)" in point.read_as


def test_predict_says_when_the_id_column_is_absent(tmp_path):
    meta, spec = _trained(tmp_path)
    rows = [r[1:3] for r in spreadsheet_rows(3, seed=1)]
    read = read_csv_rows(str(write_spreadsheet(tmp_path / "n.csv", rows, ("alcohol", "acid"))), meta, spec)
    assert read.missing_ids == ["wine_id"] and all(r["ids"] == {} for r in read.rows)


def test_results_written_and_shown_with_row_and_id(tmp_path):
    results = [{"input": "new.csv:row 1", "row": 1, "ids": {"wine_id": "W-0007"},
                "predictions": [{"class": "barolo", "index": 0, "probability": 0.9},
                                {"class": "barbera", "index": 2, "probability": 0.1}]},
               {"input": "new.csv:row 2", "row": 2, "ids": {"wine_id": "W-0002"},
                "predictions": [{"class": "barbera", "index": 2, "probability": 0.6}]}]
    out = write_results(results, tmp_path / "pred.csv")
    with out.open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [(r["row"], r["wine_id"], r["class"]) for r in table] == [("1", "W-0007", "barolo"),
                                                                      ("2", "W-0002", "barbera")]
    shown = format_table(results).splitlines()
    assert shown[0].split()[:3] == ["input", "wine_id", "top-1"]
    assert shown[1].split()[:3] == ["new.csv:row", "1", "W-0007"]
