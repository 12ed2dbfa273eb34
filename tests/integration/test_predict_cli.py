"""`torchwise predict` through the command line: the exported .onnx file alone agrees with PyTorch."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from torchwise.cli.main import main
from torchwise.export.metadata import preprocess_spec
from torchwise.export.preprocess import preprocess_images
from testkit.digits_export_run import make_digits_run


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    return make_digits_run(tmp_path_factory)


NO_TORCH_PREDICT = """
import json, sys
from torchwise.cli.main import main
rc = main(sys.argv[1:])
assert rc == 0, rc
assert "torch" not in sys.modules, "predict imported torch"
"""


def _predict_without_torch(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", NO_TORCH_PREDICT, "predict", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_predict_agrees_with_pytorch_top1_on_the_whole_validation_split(digits_run):
    from torchwise.data.transforms import val_transform

    out = _predict_without_torch(str(digits_run["onnx"]), str(digits_run["val_dir"]), "--json", "-k", "3")
    results = json.loads(out)
    assert len(results) == len(digits_run["val"]) == 360
    by_file = {str(Path(r["input"]).relative_to(digits_run["val_dir"])): r for r in results}

    # PyTorch side: the training pipeline's own torchvision transform, not predict's numpy copy of it.
    meta = digits_run["meta"]
    transform = val_transform(8, meta["mean"], meta["std"], center_crop=0.875)
    files = [f for f, _ in digits_run["val"]]
    x = torch.stack([transform(Image.open(digits_run["val_dir"] / f).convert("L")) for f in files])
    with torch.no_grad():
        logits = digits_run["model"](x)
    torch_top1 = logits.argmax(1).tolist()
    onnx_top1 = [by_file[f]["predictions"][0]["index"] for f in files]
    assert onnx_top1 == torch_top1  # every one of the 360 validation images
    probs = torch.softmax(logits, 1)
    onnx_p = torch.tensor([by_file[f]["predictions"][0]["probability"] for f in files])
    # predict resizes with PIL, the training pipeline with torch: pixels may differ by one uint8 level
    # (rounding), which moves probabilities slightly; on identical inputs they agree to float precision.
    assert (onnx_p - probs.max(1).values).abs().mean() < 2e-3
    same_input = torch.from_numpy(preprocess_images([str(digits_run["val_dir"] / f) for f in files],
                                                    preprocess_spec(meta)))
    with torch.no_grad():
        same_probs = torch.softmax(digits_run["model"](same_input), 1).max(1).values
    assert torch.allclose(onnx_p, same_probs, atol=1e-5)
    accuracy = np.mean([t == label for t, (_, label) in zip(onnx_top1, digits_run["val"])])
    assert accuracy > 0.85
    first = results[0]["predictions"]
    assert len(first) == 3 and first[0]["class"] == meta["class_names"][first[0]["index"]]


def test_predict_from_run_dir_prints_a_table(digits_run):
    files = [str(digits_run["val_dir"] / f) for f, _ in digits_run["val"][:4]]
    out = _predict_without_torch(str(digits_run["run"]), *files)
    lines = out.strip().splitlines()
    assert lines[0].split()[:3] == ["input", "top-1", "prob"]
    assert len(lines) == 5 and all("%" in line for line in lines[1:])


def _write_csvs(folder: Path) -> tuple[Path, Path]:
    from sklearn.datasets import load_diabetes, load_iris

    iris = load_iris()
    iris_csv = folder / "iris.csv"
    iris_csv.write_text("sl,sw,pl,pw,species\n" + "".join(
        ",".join(f"{v:.1f}" for v in row) + f",{iris.target_names[t]}\n" for row, t in zip(iris.data, iris.target)))
    diabetes = load_diabetes()
    diab_csv = folder / "diabetes.csv"
    diab_csv.write_text(",".join(diabetes.feature_names) + ",target\n" + "".join(
        ",".join(f"{v:.5f}" for v in row) + f",{t}\n" for row, t in zip(diabetes.data, diabetes.target)))
    return iris_csv, diab_csv


def test_cli_train_export_predict_for_csv_runs(tmp_path):
    """The real chain: `torchwise train` on a CSV, `export`, then torch-free `predict` on the CSV."""
    from torchwise.data.tabular import TabularEncoder, read_csv
    from torchwise.models import model_from_run

    iris_csv, diab_csv = _write_csvs(tmp_path)
    for csv, target, problem in ((iris_csv, "species", "classification"), (diab_csv, "target", "regression")):
        run = tmp_path / f"run_{problem}"
        assert main(["train", "--data", str(csv), "--target", target, "--out", str(run), "--epochs", "2"]) == 0
        assert main(["export", str(run), "--format", "onnx"]) == 0
        report = json.loads((run / "export" / "export_report.json").read_text())["formats"]["onnx"]
        assert report["ok"] and any(c["label"].startswith("real") for c in report["comparisons"])
        results = json.loads(_predict_without_torch(str(run), str(csv), "--json"))

        model, meta = model_from_run(run)
        header, rows = read_csv(csv)
        x, _ = TabularEncoder.from_dict(meta["tabular"]["encoder"]).encode(header, rows)
        x = (x - np.array(meta["mean"], dtype=np.float32)) / np.array(meta["std"], dtype=np.float32)
        with torch.no_grad():
            out = model(torch.from_numpy(x.astype(np.float32)))
        assert len(results) == len(rows)
        if problem == "classification":
            expected = [meta["class_names"][i] for i in out.argmax(1).tolist()]
            assert [r["predictions"][0]["class"] for r in results] == expected
        else:
            tab = meta["tabular"]
            expected = (out[:, 0] * tab["target_std"] + tab["target_mean"]).numpy()
            np.testing.assert_allclose([r["value"] for r in results], expected, rtol=1e-4, atol=1e-3)
