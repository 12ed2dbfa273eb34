"""`torchwise predict`: the exported .onnx file alone (onnxruntime + numpy + PIL, no torch) gives
the same top-1 as PyTorch on the whole digits validation split, for image folders and CSV files."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from torchwise.cli.main import main
from torchwise.export.metadata import preprocess_spec
from torchwise.export.preprocess import preprocess_image
from testkit.digits_export_run import _train, make_digits_run


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    return make_digits_run(tmp_path_factory)


def test_export_used_the_runs_validation_images(digits_run):
    report = json.loads((digits_run["run"] / "export" / "export_report.json").read_text())
    onnx_report = report["formats"]["onnx"]
    labels = {c["label"] for c in onnx_report["comparisons"]}
    assert {"real, batch 3", "real, batch 16", "random, batch 1", "random, batch 5"} <= labels
    assert onnx_report["ok"] and onnx_report["max_abs_err"] < 1e-4


def test_preprocessing_matches_the_torchvision_validation_transform(tmp_path):
    from torchwise.data.transforms import val_transform

    rng = np.random.default_rng(0)
    for i, (w, h) in enumerate([(50, 37), (37, 50), (16, 16), (300, 200)]):
        path = tmp_path / f"im{i}.png"
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), mode="RGB").save(path)
        meta = {"task": "image", "input_size": [3, 16, 16], "mean": [0.4, 0.5, 0.6], "std": [0.2, 0.3, 0.25],
                "image": {"mode": "RGB", "size": 16, "center_crop": 0.875}}
        ours = preprocess_image(str(path), preprocess_spec(meta))
        theirs = val_transform(16, meta["mean"], meta["std"], center_crop=0.875)(Image.open(path).convert("RGB"))
        assert ours.shape == (3, 16, 16)
        # The same steps in the same order; PIL and torch round the resized uint8 pixels slightly
        # differently: at most one level (1/255 before normalization), on a few percent of pixels.
        diff = np.abs(ours - theirs.numpy()) * np.array(meta["std"], dtype=np.float32).reshape(3, 1, 1) * 255
        assert diff.max() <= 1.0 + 1e-4
        assert (diff > 0.5).mean() < 0.06


def test_predict_csv_through_onnx_matches_pytorch(tmp_path):
    from sklearn.datasets import load_iris

    from torchwise.data.tabular import TabularEncoder, load_tabular
    from torchwise.export import export_and_verify
    from torchwise.models import build_model
    from torchwise.predict import predict

    iris = load_iris()
    csv = tmp_path / "iris.csv"
    colors = ["red", "green", "blue"]
    lines = ["sepal_length,sepal_width,petal_length,petal_width,color,species"]
    for i, (row, target) in enumerate(zip(iris.data, iris.target)):
        lines.append(",".join(f"{v:.1f}" for v in row) + f",{colors[i % 3]},{iris.target_names[target]}")
    csv.write_text("\n".join(lines) + "\n")
    td = load_tabular(csv, "species")
    x = torch.from_numpy((td.x_train - np.array(td.mean, dtype=np.float32)) / np.array(td.std, dtype=np.float32))
    spec = {"name": "mlp", "num_classes": len(td.class_names), "in_channels": x.shape[1], "input_size": None}
    model = _train(build_model(**spec), x, torch.from_numpy(np.asarray(td.y_train)).long(), steps=200)
    meta = {"task": "tabular", "problem": "classification", "class_names": td.class_names,
            "input_size": [x.shape[1]], "mean": td.mean, "std": td.std, "tabular": td.tabular_meta(), "model": spec}
    summary = export_and_verify(model, x[:4], tmp_path / "export", metadata=meta, real_inputs=x, log=None)
    assert summary.ok

    # New data without the target column.
    no_target = tmp_path / "new.csv"
    no_target.write_text("\n".join(",".join(line.split(",")[:-1]) for line in lines) + "\n")
    results = predict(summary.onnx_path, [str(no_target)], top_k=2)
    assert len(results) == 150
    header = lines[0].split(",")[:-1]
    encoded, _ = TabularEncoder.from_dict(td.tabular_meta()["encoder"]).encode(
        header, [line.split(",")[:-1] for line in lines[1:]])
    standardized = (encoded - np.array(td.mean, dtype=np.float32)) / np.array(td.std, dtype=np.float32)
    with torch.no_grad():
        logits = model(torch.from_numpy(standardized))
    assert [r["predictions"][0]["class"] for r in results] == [td.class_names[i] for i in logits.argmax(1).tolist()]
    accuracy = np.mean([r["predictions"][0]["class"] == iris.target_names[t] for r, t in zip(results, iris.target)])
    assert accuracy > 0.85


def test_predict_user_errors(digits_run, tmp_path, capsys):
    assert main(["predict", str(tmp_path / "missing.onnx"), "x.png"]) == 2
    assert "does not exist" in capsys.readouterr().err
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,2\n")
    assert main(["predict", str(digits_run["onnx"]), str(csv)]) == 2
    assert "trained on images" in capsys.readouterr().err
    assert main(["predict", str(tmp_path), "x.png"]) == 2
    assert "torchwise export" in capsys.readouterr().err


def test_export_verify_predict_for_the_demo(digits_run):
    from torchwise.cli.export_command import export_verify_predict

    lines: list[str] = []
    result = export_verify_predict(digits_run["run"], log=lines.append)
    assert result["ok"] and result["max_abs_err"] < 1e-4
    assert len(result["predictions"]) == 1 and len(result["predictions"][0]["predictions"]) == 3
    assert any("no torch" in line for line in lines)


def test_exif_orientation_is_applied_like_in_training(tmp_path):
    from torchwise.data.imagefolder import ImageDataset

    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    pixels = np.zeros((10, 20, 3), dtype=np.uint8)
    pixels[:, :10] = 255  # left half white
    path = tmp_path / "sideways.png"
    Image.fromarray(pixels, mode="RGB").save(path, exif=exif)
    meta = {"task": "image", "input_size": [3, 20, 10], "mean": [0, 0, 0], "std": [1, 1, 1],
            "image": {"mode": "RGB", "size": 10, "center_crop": 1.0}}
    spec = dict(preprocess_spec(meta), resize_shorter=None, size=[20, 10])
    ours = preprocess_image(str(path), spec)
    assert ours.shape == (3, 20, 10)  # displayed upright: 10 wide, 20 high
    assert ours[0, :10].mean() > 0.9 and ours[0, 10:].mean() < 0.1  # the white half is now on top
    training = ImageDataset([(str(path), 0)], lambda im: im, mode="RGB").load_image(0)
    assert training.size == (10, 20)
