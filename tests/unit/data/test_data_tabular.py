"""CSV task: problem detection, train-only preprocessing, missing values, clear errors."""
from __future__ import annotations

import numpy as np
import pytest

from torchwise.data import tabular
from torchwise.errors import TorchwiseError


def _csv(tmp_path, text: str):
    path = tmp_path / "t.csv"
    path.write_text(text)
    return path


def test_problem_detection():
    assert tabular.detect_problem(["a", "b", "a"]) == "classification"
    assert tabular.detect_problem(["0", "1", "1", "2"]) == "classification"
    assert tabular.detect_problem([str(v / 10) for v in range(50)]) == "regression"
    assert tabular.detect_problem([str(v) for v in range(100)]) == "regression"  # many distinct integers


def test_classification_csv(classification_csv):
    data = tabular.load_tabular(classification_csv, "label", missing="impute", seed=0)
    assert data.problem == "classification" and data.class_names == ["no", "yes"]
    assert "id" in data.encoder.ignored
    assert data.encoder.feature_names[:2] == ["x1", "x2"]
    assert len(data.train_rows) == 160 and len(data.val_rows) == 40
    assert not set(data.train_rows) & set(data.val_rows)
    assert data.notes["imputed_values"] > 0
    # standardization statistics come from the training rows only
    np.testing.assert_allclose(data.mean, data.x_train.mean(axis=0), rtol=1e-5, atol=1e-6)
    assert not np.allclose(data.mean[:2], data.x_val.mean(axis=0)[:2], atol=1e-4)


def test_missing_drop_counts_rows(classification_csv):
    data = tabular.load_tabular(classification_csv, "label", missing="drop")
    dropped = data.notes["dropped_missing_features"]
    assert dropped == 13  # 8 rows with a missing x2 + 5 with a missing color (no overlap)
    assert len(data.train_rows) + len(data.val_rows) == 200 - dropped
    assert "<missing>" not in data.encoder.categorical["color"]


def test_regression_target_is_standardized_with_train_stats(regression_csv):
    data = tabular.load_tabular(regression_csv, "price")
    assert data.problem == "regression" and data.class_names == []
    assert abs(data.target_mean - float(data.y_train.mean())) < 1e-3
    assert data.encoder.categorical["city"] == ["north", "south"]


def test_problem_can_be_overridden(tmp_path):
    path = _csv(tmp_path, "x,y\n" + "".join(f"{i},{i % 3}\n" for i in range(30)))
    assert tabular.load_tabular(path, "y").problem == "classification"
    assert tabular.load_tabular(path, "y", problem="regression").problem == "regression"


def test_target_errors(classification_csv, tmp_path):
    with pytest.raises(TorchwiseError) as info:
        tabular.load_tabular(classification_csv, "labels")
    assert info.value.values["did you mean"] == "label" and "x1" in info.value.values["columns"]
    with pytest.raises(TorchwiseError, match="needs --target"):
        tabular.load_tabular(classification_csv, None)
    one_class = _csv(tmp_path, "x,y\n1,a\n2,a\n3,a\n")
    with pytest.raises(TorchwiseError, match="two classes"):
        tabular.load_tabular(one_class, "y")
    ragged = _csv(tmp_path, "x,y\n1,a\n2\n")
    with pytest.raises(TorchwiseError, match="one value per column"):
        tabular.load_tabular(ragged, "y")


def test_encoder_round_trip_and_unseen_category(regression_csv):
    data = tabular.load_tabular(regression_csv, "price")
    encoder = tabular.TabularEncoder.from_dict(data.encoder.to_dict())
    x, imputed = encoder.encode(["area", "rooms", "city", "price"], [["50", "2", "east", "1"]])
    assert imputed == 0
    assert x.tolist() == [[50.0, 2.0, 0.0, 0.0]]  # an unseen city is all zeros, not an error
