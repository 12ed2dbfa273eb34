"""Robustness of CSV reading through `torchwise train`: thousands separators and decimal commas."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import run_cli


# ----------------------------------------------------------------------------- CSV columns


def _write(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", newline="")
    return path


# ----------------------------------------------------------------------------- CLI flags


def test_train_on_a_csv_with_thousands_separators_and_decimal_commas(tmp_path):
    rng = np.random.default_rng(0)
    lines = ["income;rate;city;y"]
    for i in range(120):
        income = float(rng.uniform(1000, 90000))
        rate = float(rng.normal(0, 1))
        city = ["Köln", "Zürich"][i % 2]
        label = "high" if income > 45000 else "low"
        lines.append(f"{income:,.2f}".replace(",", " ").replace(".", ",") + f";{rate:.3f}".replace(".", ",")
                     + f";{city};{label}")
    path = _write(tmp_path, "\n".join(lines) + "\n", "incomes.csv")
    proc = run_cli("train", "--data", path, "--target", "y", "--epochs", "1", "--out", tmp_path / "run",
                   "--set", "train.threads=1", "--set", "output.report=false", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    meta = json.loads((tmp_path / "run" / "final" / "meta.json").read_text())
    encoder = meta["tabular"]["encoder"]
    assert encoder["decimals"] == {"income": ",", "rate": ","}
    assert {"income", "rate"} <= set(meta["tabular"]["feature_names"]) and not encoder["ignored"]
    assert "ignored column" not in proc.stdout + proc.stderr
