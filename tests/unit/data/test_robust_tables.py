"""Robustness: numbers read from text as a person means them, CSV files read right or refused clearly,
configuration values accepted as meant, class splits said, unknown flags answered with the real one.

Every case writes a real file (CSV, YAML, a zip workbook) and reads it with the real reader: a correct
result (the column kept numeric with the right values, the right rows) or a clear error (what, values,
fix; no traceback)."""
from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_clear_api_error, write_color_images
from torchwise import config as cfg
from torchwise.cli.main import SUBCOMMANDS, build_parser, main
from torchwise import numbers
from torchwise.data import tabular, tasks
from torchwise.errors import ConfigError, TorchwiseError


# ----------------------------------------------------------------------------- one cell


@pytest.mark.parametrize("text, value", [
    ("1234.5", 1234.5), ("+1234.5", 1234.5), ("  42 ", 42.0), ("1e-3", 1e-3), ("1E+05", 1e5), (".5", 0.5),
    ("-7", -7.0), ("\u22127.5", -7.5), ("(12.5)", -12.5), ("20,618.57", 20618.57), ("1'234.50", 1234.5),
    ("1\u00a0234.5", 1234.5), ("1_000", 1000.0), ("12%", 0.12), ("-3.5%", -0.035), ("$1,200.50", 1200.5),
    ("($12.50)", -12.5), ("$-12", -12.0), ("-$12", -12.0), ("£7", 7.0), ("12 €", 12.0), ("1,234,567.25", 1234567.25),
    ("3,14", 3.14), ("1 234,5", 1234.5), ("1.234.567,8", 1234567.8), ("€3,50", 3.5), ("0,5", 0.5),
])
def test_a_cell_reads_as_the_number_meant(text, value):
    cell = numbers.read_cell(text)
    assert cell.kind == "number" and not cell.ambiguous
    got = cell.point if cell.point is not None else cell.comma
    assert math.isclose(got, value, rel_tol=1e-12)


@pytest.mark.parametrize("text, kind", [
    ("", "missing"), ("NA", "missing"), ("n/a", "missing"), ("N/A", "missing"), ("nan", "missing"),
    ("NaN", "missing"), ("null", "missing"), ("-", "missing"), ("#N/A", "missing"),
    ("inf", "non-finite"), ("-inf", "non-finite"), ("Infinity", "non-finite"), ("\u2212inf", "non-finite"),
    ("1e400", "non-finite"), ("#DIV/0!", "non-finite"),
    ("abc", "text"), ("id0042", "text"), ("2020-01-05", "text"), ("1.5.2", "text"), ("12:30", "text"),
    ("1,2,3", "text"), ("12 34", "text"), ("0x1A", "text"), ("1e", "text"), ("--5", "text"),
])
def test_a_cell_that_is_not_a_number_says_what_it_is(text, kind):
    assert numbers.read_cell(text).kind == kind


def test_a_cell_that_two_decimal_marks_read_differently_has_both_readings():
    cell = numbers.read_cell("1,234")
    assert cell.ambiguous and cell.point == 1234.0 and cell.comma == 1.234
    assert not numbers.read_cell("1,234.5").ambiguous  # the point proves the comma groups thousands


# ----------------------------------------------------------------------------- CSV columns


def _write(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


def _table(tmp_path, cells: list[str], *, sep: str = ",", quote: bool = False, n: int = 40, **kw):
    """A file with a column x (the cells, repeated to n rows), a numeric helper column and a target y."""
    lines = [sep.join(["x", "z", "y"])]
    for i in range(n):
        x = cells[i % len(cells)]
        x = f'"{x}"' if quote else x
        lines.append(sep.join([x, str(i % 7), "a" if i % 2 else "b"]))
    return tabular.load_tabular(_write(tmp_path, "\n".join(lines) + "\n"), "y", **kw)


def _x_values(data) -> list[float]:
    column = data.encoder.feature_names.index("x")
    return sorted({round(float(v), 6) for v in np.concatenate([data.x_train[:, column], data.x_val[:, column]])})


NUMERIC_COLUMNS = [
    # (cells, separator, quoted, expected distinct values)
    (["20,618.57", "1,200.5", "3.25"], ",", True, [3.25, 1200.5, 20618.57]),
    (["3,14", "2,5", "10"], ";", False, [2.5, 3.14, 10.0]),
    (["1 234,5", "12,25", "7"], ";", False, [7.0, 12.25, 1234.5]),
    (["1.234.567,8", "2,5", "1.000"], ";", False, [2.5, 1000.0, 1234567.8]),
    (["1'234.50", "2'000", "3.5"], ",", False, [3.5, 1234.5, 2000.0]),
    (["+1.5", "-2", "+3"], ",", False, [-2.0, 1.5, 3.0]),
    (["12%", "50%", "7.5%"], ",", False, [0.075, 0.12, 0.5]),
    (["$1,200.50", "$3", "$-4.25"], ",", True, [-4.25, 3.0, 1200.5]),
    (["€3,50", "€12", "€1.000,25"], ";", False, [3.5, 12.0, 1000.25]),
    (["£7", "£8.5", "(£2)"], ",", False, [-2.0, 7.0, 8.5]),
    (["(12.5)", "3", "(1)"], ",", False, [-12.5, -1.0, 3.0]),
    (["1e-3", "1E+05", "2.5e2"], ",", False, [0.001, 250.0, 100000.0]),
    (["\u22121.5", "2", "\u22123"], ",", False, [-3.0, -1.5, 2.0]),
    (["1\u00a0234.5", "5", "6.25"], ",", False, [5.0, 6.25, 1234.5]),
    (["  4.5 ", " 6", "7  "], ",", False, [4.5, 6.0, 7.0]),
    (["1,234", "1,234.5", "7"], ",", True, [7.0, 1234.0, 1234.5]),     # a point proves thousands
    (["1,234", "3,14", "7"], ";", False, [1.234, 3.14, 7.0]),           # a decimal comma proves it
]


@pytest.mark.parametrize("cells, sep, quote, expected", NUMERIC_COLUMNS)
def test_a_column_written_the_ways_people_write_numbers_stays_numeric(tmp_path, cells, sep, quote, expected):
    data = _table(tmp_path, cells, sep=sep, quote=quote)
    assert "x" in data.encoder.numeric, data.encoder.ignored
    assert "x" not in data.encoder.ignored and "x" not in data.encoder.categorical
    np.testing.assert_allclose(_x_values(data), expected, rtol=1e-6)


def test_missing_tokens_in_a_numeric_column_are_missing_not_categories(tmp_path):
    data = _table(tmp_path, ["1.5", "N/A", "2.5", "NaN", "", "-", "3.5"], missing="impute")
    assert "x" in data.encoder.numeric
    assert data.notes["imputed_values"] > 0 and np.isfinite(data.x_train).all()


@pytest.mark.parametrize("missing", ["drop", "impute"])
def test_one_inf_cell_is_missing_and_said_never_poisoning_the_statistics(tmp_path, missing):
    cells = [str(v / 10) for v in range(39)] + ["inf"]  # a strong numeric column with one inf
    data = _table(tmp_path, cells, n=40, missing=missing)
    assert "x" in data.encoder.numeric and "x" not in data.encoder.ignored
    assert all(math.isfinite(v) for v in data.mean + data.std)
    assert any("non-finite" in w and "'inf'" in w and "'x'" in w for w in data.warnings)
    rows = len(data.train_rows) + len(data.val_rows)
    assert rows == (39 if missing == "drop" else 40)


def test_an_ambiguous_column_is_read_one_way_and_said(tmp_path):
    data = _table(tmp_path, ["1,234", "2,500", "7"], quote=True)
    assert _x_values(data) == [7.0, 1234.0, 2500.0]
    assert any("'x'" in w and "1,234" in w and "data.decimal" in w for w in data.warnings)
    data = _table(tmp_path, ["1,234", "2,500", "7"], sep=";")  # a semicolon file writes decimal commas
    assert _x_values(data) == [1.234, 2.5, 7.0]
    assert any("'x'" in w and "decimal mark" in w for w in data.warnings)
    data = _table(tmp_path, ["1,234", "2,500", "7"], quote=True, decimal="comma")  # said by the user
    assert _x_values(data) == [1.234, 2.5, 7.0] and not data.warnings


def test_another_column_of_the_file_proves_the_decimal_mark(tmp_path):
    lines = ["x;w;y"] + [f"{'1,234' if i % 2 else '2,500'};{i},5;{'a' if i % 3 else 'b'}" for i in range(30)]
    data = tabular.load_tabular(_write(tmp_path, "\n".join(lines)), "y")
    assert _x_values(data) == [1.234, 2.5] and not any("'x'" in w for w in data.warnings)


@pytest.mark.parametrize("cells, reason", [
    (["1,234.5", "3,14", "7"], "numbers written two ways"),
    ([f"{i}" for i in range(30)] + ["oops"], "not numbers (e.g. 'oops')"),
    ([f"c{i}" for i in range(80)], "looks like an identifier"),
    (["", "NA", "n/a"], "no values"),
    (["inf", "-inf"], "no numbers"),
])
def test_a_column_dropped_or_made_categories_is_said_with_the_true_reason(tmp_path, cells, reason):
    data = _table(tmp_path, cells, quote=True, n=max(40, len(cells)), missing="impute")
    said = {**data.encoder.ignored, **data.encoder.why}.get("x", "")
    assert reason in said, said
    assert "x" not in data.encoder.numeric


def test_a_mostly_numeric_column_with_a_few_words_is_categories_with_a_warning(tmp_path):
    data = _table(tmp_path, ["1", "2", "3", "oops"], n=40)
    assert "x" in data.encoder.categorical
    assert any("'x'" in w and "'oops'" in w for w in data.warnings)


# ----------------------------------------------------------------------------- CSV files


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_the_delimiter_is_detected(tmp_path, sep):
    lines = [sep.join(["a", "b", "y"])] + [sep.join([f"{i}.5", f"{i % 4}", "p" if i % 2 else "q"]) for i in range(20)]
    data = tabular.load_tabular(_write(tmp_path, "\r\n".join(lines) + "\r\n"), "y")
    assert set(data.encoder.numeric) == {"a", "b"}
    assert len(data.train_rows) + len(data.val_rows) == 20


def test_excel_sep_line_bom_utf16_and_latin1(tmp_path):
    body = ["name;size;y"] + [f"caf\u00e9 {i % 3};{i},5;{'a' if i % 2 else 'b'}" for i in range(20)]
    for name, raw in [("sepline.csv", ("sep=;\n" + "\n".join(body)).encode("utf-8")),
                      ("bom.csv", "\ufeff".encode("utf-8") + "\n".join(body).encode("utf-8")),
                      ("utf16.csv", "\n".join(body).encode("utf-16")),
                      ("latin1.csv", "\n".join(body).encode("latin-1"))]:
        data = tabular.load_tabular(_write(tmp_path, raw, name), "y")
        assert data.encoder.categorical["name"][0].startswith("caf\u00e9"), name
        assert _values(data, "size") == [float(i) + 0.5 for i in range(20)], name
        assert (name == "latin1.csv") == any("not UTF-8" in w for w in data.warnings), name


def _values(data, column) -> list[float]:
    j = data.encoder.feature_names.index(column)
    return sorted(float(v) for v in np.concatenate([data.x_train[:, j], data.x_val[:, j]]))


def _xlsx(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
    return path


@pytest.mark.parametrize("make, must_say", [
    (lambda p: _xlsx(p), "Excel"),
    (lambda p: p.write_bytes(bytes(range(256)) * 4), "NUL"),
    (lambda p: p.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20), "gzip"),
])
def test_a_file_that_is_not_csv_is_refused(tmp_path, make, must_say):
    path = tmp_path / "data.csv"
    make(path)
    with pytest.raises(TorchwiseError) as info:
        tabular.load_tabular(path, "y")
    assert_clear_api_error(info, "not a CSV text file", must_say, "Save As")


@pytest.mark.parametrize("text, must_say", [
    ("", "no data rows"),
    ("x,y\n", "no data rows"),
    ("x,y\n1,a\n", "Too few usable rows"),
    ("x,y,x\n1,a,2\n3,b,4\n", "columns 1 and 3"),
    ("x,y\n1,a\n2\n", "one value per column"),
    ("x,y\n" + "".join(f"{i},\n" for i in range(10)), "no values"),
    ("x,y\n" + "".join(f"{i},a\n" for i in range(10)), "two classes"),
    ("x,y\n" + "".join(f"{i},{i}\n" for i in range(10)).replace("3,3", "3,x"), "non-numeric"),
])
def test_small_or_broken_files_are_refused_clearly(tmp_path, text, must_say):
    with pytest.raises(TorchwiseError) as info:
        tabular.load_tabular(_write(tmp_path, text), "y", problem="regression" if must_say == "non-numeric" else "auto")
    assert_clear_api_error(info, must_say)


def test_a_blank_header_name_is_named_and_said(tmp_path):
    text = ",x,y\n" + "".join(f"{i},{i % 5}.5,{'a' if i % 2 else 'b'}\n" for i in range(20))
    data = tabular.load_tabular(_write(tmp_path, text), "y")
    assert "column 1" in data.encoder.columns and any("no name" in w for w in data.warnings)


def test_a_target_with_missing_and_non_finite_values(tmp_path):
    rows = [f"{i},{i * 1000 + 0.5:,.1f}" for i in range(30)]
    rows[3], rows[4], rows[5] = "3,", "4,NA", "5,inf"
    text = "x,y\n" + "\n".join(f'{r.split(",", 1)[0]},"{r.split(",", 1)[1]}"' for r in rows) + "\n"
    data = tabular.load_tabular(_write(tmp_path, text), "y")
    assert data.problem == "regression"
    assert data.notes["dropped_missing_target"] == 2 and data.notes["dropped_non_finite_target"] == 1
    y = sorted(np.concatenate([data.y_train, data.y_val]).tolist())
    assert len(y) == 27 and y[-1] == pytest.approx(29000.5)


# ----------------------------------------------------------------------------- class splits


def _csv_config(path: Path, **data) -> cfg.RunConfig:
    return cfg.from_dict({"data": {"path": str(path), "target": "y", **data}})


def test_a_class_with_one_example_is_said(tmp_path):
    labels = ["a", "b"] * 15 + ["rare"]
    text = "x,y\n" + "".join(f"{i},{label}\n" for i, label in enumerate(labels))
    lines: list[str] = []
    task = tasks.prepare_task(_csv_config(_write(tmp_path, text)), None, log=lines.append)
    assert any("single example" in line and "'rare' (train 1, val 0)" in line for line in lines), lines
    assert task.summary["warnings"]


def test_a_class_whose_rows_all_miss_a_value_is_refused_with_the_way_out(tmp_path):
    rows = [f"{i},{'a' if i % 2 else 'b'}" for i in range(30)] + ["NA,c", ",c", "?,c"]
    path = _write(tmp_path, "x,y\n" + "\n".join(rows) + "\n")
    with pytest.raises(TorchwiseError) as info:
        tasks.prepare_task(_csv_config(path), None, log=lambda _line: None)
    assert_clear_api_error(info, "no training examples", "'c'", "data.missing=impute")
    task = tasks.prepare_task(_csv_config(path, missing="impute"), None, log=lambda _line: None)
    assert "c" in task.class_names


def test_class_split_check_names_classes_and_counts():
    with pytest.raises(TorchwiseError) as info:
        tasks.check_class_split(["a", "b"], {"a": 5}, {"a": 1, "b": 2}, source="d")
    assert_clear_api_error(info, "'b' (train 0, val 2)")
    warnings = tasks.check_class_split(["a", "b"], {"a": 5, "b": 4}, {"a": 1}, source="d")
    assert len(warnings) == 1 and "'b' (train 4, val 0)" in warnings[0]


def test_an_image_class_missing_from_validation_is_said(tmp_path):
    write_color_images(tmp_path / "train", 3, seed=0, size=8)
    write_color_images(tmp_path / "val", 1, seed=1, size=8)
    for f in (tmp_path / "val" / "blue").iterdir():
        f.unlink()
    (tmp_path / "val" / "blue").rmdir()
    lines: list[str] = []
    config = cfg.from_dict({"data": {"path": str(tmp_path), "cache": "off"}})
    tasks.prepare_task(config, None, log=lines.append)
    assert any("not in validation" in line and "'blue' (train 3, val 0)" in line for line in lines), lines


# ----------------------------------------------------------------------------- configuration values


@pytest.mark.parametrize("yaml_text, key, value", [
    ("train:\n  lr: 1e-3\n", "train.lr", 1e-3),
    ("train:\n  lr: 3e-4\n", "train.lr", 3e-4),
    ("train:\n  lr: '1E-2'\n", "train.lr", 1e-2),
    ("train:\n  lr: .5e-3\n", "train.lr", 5e-4),
    ("train:\n  batch_size: ' 64 '\n", "train.batch_size", 64),
    ("train:\n  max_steps: '1_000'\n", "train.max_steps", 1000),
    ("train:\n  max_steps: 1e4\n", "train.max_steps", 10000),
    ("train:\n  epochs: 3.0\n", "train.epochs", 3),
    ("data:\n  val_fraction: 20%\n", "data.val_fraction", 0.2),
    ("data:\n  val_fraction: '0.25'\n", "data.val_fraction", 0.25),
    ("train:\n  deterministic: 'yes'\n", "train.deterministic", True),
    ("train:\n  deterministic: on\n", "train.deterministic", True),
    ("data:\n  hflip: 'False'\n", "data.hflip", False),
    ("data:\n  hflip: 0\n", "data.hflip", False),
    ("data:\n  image_size: none\n", "data.image_size", None),
    ("data:\n  image_size: '~'\n", "data.image_size", None),
    ("train:\n  precision: FP32\n", "train.precision", "fp32"),
    ("data:\n  decimal: Comma\n", "data.decimal", "comma"),
    ("data:\n  num_workers: '2'\n", "data.num_workers", 2),
])
def test_config_values_are_read_as_meant(tmp_path, yaml_text, key, value):
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    config = cfg.load_yaml(path)
    section, name = key.split(".")
    got = getattr(getattr(config, section), name)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("yaml_text, must_say", [
    ("train:\n  lr: fast\n", "'fast' is not a number"),
    ("train:\n  lr: .inf\n", "not a finite number"),
    ("train:\n  lr: 'nan'\n", "'nan' is not a number"),
    ("train:\n  lr: -1e-3\n", "out of range"),
    ("train:\n  epochs: 1.5\n", "not a whole number"),
    ("train:\n  epochs: '2.5'\n", "not a whole number"),
    ("train:\n  epochs: yes\n", "allowed: int"),
    ("train:\n  batch_size: '1,000'\n", "ambiguous"),
    ("train:\n  deterministic: maybe\n", "yes/no"),
    ("data:\n  num_workers: autoo\n", "did you mean: auto"),
    ("data:\n  decimal: kommas\n", "allowed"),
])
def test_config_nonsense_is_refused_clearly(tmp_path, yaml_text, must_say):
    path = tmp_path / "run.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        cfg.load_yaml(path)
    assert_clear_api_error(info, must_say, "value:")


def test_set_and_yaml_agree():
    for text in ("1e-3", " 0.001 ", "1E-3"):
        assert cfg.apply_overrides(cfg.RunConfig(), sets=[f"train.lr={text}"]).train.lr == 1e-3
    assert cfg.from_dict({"train": {"lr": "1e-3"}}).train.lr == 1e-3


# ----------------------------------------------------------------------------- CLI flags


def _subcommand_flags() -> dict[str, list[str]]:
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: sorted(o for o in sp._option_string_actions if o.startswith("--") and o != "--help")
            for name, sp in sub.choices.items()}


def _exit_status(argv: list[str]) -> int:
    """main()'s exit status: its return value, or argparse's SystemExit (a missing required flag)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_an_unknown_flag_names_the_closest_real_one_for_every_subcommand(command, capsys):
    flags = _subcommand_flags().get(command)
    if not flags:
        pytest.skip(f"{command} is not installed or has no flags")
    real = max(flags, key=len)
    typo = real[:-1] + real[-1] * 2  # --max-steps -> --max-stepss
    assert _exit_status([command, typo, "3"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"torchwise {command}: error: unknown flag: {typo}" in err
    assert f"did you mean {real}" in err and "fix:" in err


@pytest.mark.parametrize("argv, must_say", [
    (["train", "--epoch", "3"], "did you mean --epochs?"),
    (["train", "--learning-rate", "0.1"], "did you mean --lr?"),
    (["train", "--batchsize", "8"], "did you mean --batch-size?"),
    (["train", "--target-column", "y"], "did you mean --target?"),
    (["train", "--val-frac=0.1"], "did you mean --val-fraction?"),
    (["train", "data.csv"], "unexpected argument: data.csv"),
])
def test_mistyped_train_flags(argv, must_say, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert must_say in err and "Traceback" not in err


def test_a_mistyped_subcommand_names_the_real_one(capsys):
    with pytest.raises(SystemExit) as info:
        main(["trian"])
    assert info.value.code == 2 and "did you mean: train" in capsys.readouterr().err


def test_train_refuses_an_excel_workbook_named_csv(tmp_path, capsys):
    path = _xlsx(tmp_path / "table.csv")
    assert main(["train", "--data", str(path), "--target", "y", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "torchwise train: error: The data file is not a CSV text file." in err
    assert "Excel" in err and "fix:" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- neighbours


def test_eval_data_is_read_with_the_decimal_mark_the_run_was_trained_with(tmp_path):
    train = "x;y\n" + "".join(f"{i},25;{'a' if i % 2 else 'b'}\n" for i in range(30))
    data = tabular.load_tabular(_write(tmp_path, train, "train.csv"), "y")
    assert data.encoder.decimals == {"x": ","}
    # the new file alone cannot tell (1,234 only): the run's decimal comma decides
    new = _write(tmp_path, "x;y\n1,234;a\n2,500;b\n", "new.csv")
    meta = json.loads(json.dumps(data.tabular_meta()))  # as saved in meta.json
    x, y, _ = tabular.encode_for_eval(new, meta, data.class_names, "classification")
    assert x[:, 0].tolist() == pytest.approx([1.234, 2.5]) and y.tolist() == [0, 1]


def test_a_regression_target_with_decimal_commas(tmp_path):
    text = "x;price\n" + "".join(f"{i};{i * 1000 + 250:,}".replace(",", ".") + ",5\n" for i in range(1, 31))
    data = tabular.load_tabular(_write(tmp_path, text), "price")
    assert data.problem == "regression" and data.target_decimal == ","
    y = sorted(np.concatenate([data.y_train, data.y_val]).tolist())
    assert y[0] == pytest.approx(1250.5) and y[-1] == pytest.approx(30250.5)


def test_quoted_cells_with_the_delimiter_and_newlines_and_mixed_thousands_marks(tmp_path):
    lines = ['note,x,y'] + [f'"a, b\nline {i % 3}","{"1,234.5" if i % 2 else "1 234.5"}",{"p" if i % 3 else "q"}'
                            for i in range(24)]
    data = tabular.load_tabular(_write(tmp_path, "\n".join(lines) + "\n"), "y")
    assert len(data.encoder.categorical["note"]) == 3 and _values(data, "x") == [1234.5] * 24


def test_show_config_reads_a_yaml_written_by_a_person(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 3e-4\n  batch_size: ' 32 '\n  deterministic: yes\ndata:\n  val_fraction: 25%\n")
    assert main(["train", "--config", str(path), "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.0003" in out and "batch_size: 32" in out and "val_fraction: 0.25" in out
