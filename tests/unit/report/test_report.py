"""The HTML run report on its own: every plot embedded and decodable, escaping, regression view."""
from __future__ import annotations

import base64
import csv
import io

from PIL import Image

from torchwise.report.html import write_report
from torchwise.report.plots import read_metrics_csv, thumbnail_png
from testkit.report_html import decoded_pngs, parse_report


def _metrics(run_dir, rows):
    with (run_dir / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["epoch", "step", "train_loss", "val_loss", "val_acc", "lr"])
        writer.writeheader()
        writer.writerows(rows)


def _classification():
    return {"problem": "classification", "accuracy": 0.5, "examples": 4,
            "per_class": [{"class": "cat", "precision": 0.5, "recall": 1.0, "f1": 0.67, "support": 2},
                          {"class": "<dog>", "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2}],
            "confusion": [[2, 0], [2, 0]]}


def test_report_embeds_all_plots_and_examples(tmp_path):
    _metrics(tmp_path, [{"epoch": 0, "step": 10, "train_loss": 1.0, "val_loss": 0.9, "val_acc": 0.4, "lr": 1e-3},
                        {"epoch": 1, "step": 20, "train_loss": 0.5, "val_loss": "", "val_acc": 0.5, "lr": 5e-4}])
    assert read_metrics_csv(tmp_path / "metrics.csv")[1].get("val_loss") is None  # empty cells dropped
    thumb = thumbnail_png(Image.new("L", (8, 8), 128))
    worst = [{"id": "/data/dog/7.png", "true": "<dog>", "predicted": "cat", "confidence": 0.9, "png": thumb}]
    summary = {"kind": "image folder", "train_counts": {"cat": 3, "<dog>": 3}, "val_counts": {"cat": 2, "<dog>": 2},
               "skipped": [{"path": "/data/cat/bad.png", "reason": "OSError: truncated"}],
               "warnings": ["class 'cat' has 1 training example"], "column_types": {"price": "numeric (decimal comma)"}}
    path = write_report(tmp_path, title="test run", summary=summary, evaluation=_classification(),
                        class_names=["cat", "<dog>"], worst=worst, timing={"train_time_s": 1.5, "steps": 20},
                        config={"train": {"lr": 0.001}})
    page = parse_report(path)
    images = decoded_pngs(page)
    assert len(images) == 3 + 2 + 1  # loss/acc/lr curves, confusion + per-class, one example
    assert images[-1].size == (96, 96)  # tiny images enlarged for the page
    text = " ".join(page.text)
    assert "bad.png" in text and "OSError: truncated" in text and "Skipped files: 1" in text
    assert "Data warnings: 1" in page.headings and "class 'cat' has 1 training example" in text
    assert "numeric (decimal comma)" in text
    assert "<dog>" in text  # escaped in the source, intact once parsed
    assert "<dog>" not in path.read_text().replace("&lt;dog&gt;", "")


def test_report_without_metrics_and_for_regression(tmp_path):
    evaluation = {"problem": "regression", "mae": 1.0, "rmse": 1.5, "r2": 0.9, "examples": 3,
                  "predicted": [1.0, 2.0, 3.5], "actual": [1.0, 2.5, 3.0]}
    path = write_report(tmp_path, title="reg", summary={"kind": "CSV table", "skipped": []},
                        evaluation=evaluation, class_names=[])
    page = parse_report(path)
    assert len(decoded_pngs(page)) == 1 and "predicted vs actual" in page.alts
    assert "No metrics.csv rows." in " ".join(page.text)
    assert "Worst-classified validation examples" not in page.headings


def test_data_uri_is_png(tmp_path):
    png = thumbnail_png(Image.new("RGB", (300, 100)))
    image = Image.open(io.BytesIO(base64.b64decode(base64.b64encode(png))))
    assert image.format == "PNG" and image.size == (96, 32)


def test_report_shows_the_checkers_findings_from_a_real_run(tmp_path):
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    import torchwise

    torch.manual_seed(0)
    x = torch.randn(96, 8)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    softmaxed = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=1))
    torchwise.Trainer(softmaxed, lambda p: torch.optim.SGD(p, lr=0.1), train_data=TensorDataset(x, y),
                      val_data=TensorDataset(x[:32], y[:32]), max_epochs=2, out_dir=tmp_path, progress=False).fit()
    assert (tmp_path / "checks.json").is_file()
    path = write_report(tmp_path, title="checked run", summary={"kind": "tensors", "skipped": []},
                        evaluation=_classification(), class_names=["cat", "<dog>"])
    page = parse_report(path)
    text = " ".join(page.text)
    assert "Checks: silent training mistakes" in page.headings
    assert "softmax-before-loss" in text and "fix" not in page.headings


def test_report_says_when_the_checks_were_off(tmp_path):
    path = write_report(tmp_path, title="reg", summary={"kind": "CSV table", "skipped": []},
                        evaluation={"problem": "regression", "mae": 1.0, "rmse": 1.5, "r2": 0.9, "examples": 1,
                                    "predicted": [1.0], "actual": [1.0]}, class_names=[])
    assert "the checks were off" in " ".join(parse_report(path).text)


def test_quiet_training_still_prints_the_findings_and_the_report_shows_a_clean_run(tmp_path, capfd):
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    import torchwise

    torch.manual_seed(0)
    x = torch.randn(96, 8)
    y = (x[:, 0] > 0).long()
    softmaxed = nn.Sequential(nn.Linear(8, 2), nn.Softmax(dim=1))
    torchwise.Trainer(softmaxed, lambda p: torch.optim.SGD(p, lr=0.1), train_data=TensorDataset(x, y),
                      max_epochs=1, out_dir=tmp_path / "quiet", progress=False).fit()
    assert "softmax-before-loss" in capfd.readouterr().err  # progress=False is --quiet
    torchwise.Trainer(nn.Linear(8, 2), lambda p: torch.optim.SGD(p, lr=0.1), train_data=TensorDataset(x, y),
                      val_data=TensorDataset(x[:32], y[:32]), max_epochs=2, out_dir=tmp_path / "clean",
                      progress=False).fit()
    path = write_report(tmp_path / "clean", title="clean", summary={"kind": "tensors", "skipped": []},
                        evaluation=_classification(), class_names=["cat", "<dog>"])
    assert "No silent mistakes found" in " ".join(parse_report(path).text)
