"""`torchwise train` end to end, in a subprocess, on real PNG folders and CSV files."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import yaml

from conftest import run_cli
from testkit.report_html import decoded_pngs, parse_report


def read_metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_image_folder_run_writes_every_artifact(image_run):
    run_dir, proc = image_run
    for name in ("config.yaml", "metrics.csv", "split.json", "data_stats.json", "meta.json", "eval.json",
                 "report.html", "final/model.safetensors", "final/meta.json"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tb").iterdir()), "no TensorBoard event files"
    assert [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step-")]
    # the whole resolved config, the Trainer's settings and the CLI's RunConfig, as in every checkpoint
    recorded = json.loads((run_dir / "trainer_config.json").read_text())
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert recorded["trainer"]["loop"]["epochs"] == saved["train"]["epochs"]
    assert recorded["run"] == saved
    newest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    import torch

    assert torch.load(newest / "state.pt", weights_only=True)["config"] == recorded

    rows = read_metrics(run_dir)
    assert len(rows) == 3  # one evaluation per epoch
    assert {"epoch", "step", "train_loss", "val_loss", "val_acc", "lr"} <= set(rows[0])
    assert float(rows[-1]["val_loss"]) < float(rows[0]["val_loss"])
    assert float(rows[-1]["val_acc"]) >= 0.9, rows[-1]  # three colours: easy once trained at all

    meta = json.loads((run_dir / "final" / "meta.json").read_text())
    assert meta["task"] == "image" and meta["problem"] == "classification"
    assert meta["class_names"] == ["blue", "green", "red"]
    assert meta["input_size"] == [3, 16, 16]
    assert meta["model"]["name"] == "smallcnn" and meta["model"]["num_classes"] == 3
    assert len(meta["mean"]) == 3 and len(meta["std"]) == 3

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["train"]["epochs"] == 3 and config["train"]["batch_size"] == 16
    assert config["output"]["worst_examples"] == 8  # from --set


def test_corrupt_images_are_skipped_counted_and_reported(image_run):
    run_dir, proc = image_run
    assert "skipped 2 unreadable image(s)" in proc.stdout
    split = json.loads((run_dir / "split.json").read_text())
    skipped = sorted(Path(p).name for p, _ in split["skipped"])
    assert skipped == ["broken_truncated.png", "empty.jpg"]
    # 24 good images per class: none lost, none of the broken ones used
    assert len(split["train"]) + len(split["val"]) == 72
    page = parse_report(run_dir / "report.html")
    text = " ".join(page.text)
    assert "Skipped files: 2" in text and "broken_truncated.png" in text and "empty.jpg" in text


def test_stats_come_from_the_training_split_only(image_run):
    run_dir, _ = image_run
    stats = json.loads((run_dir / "data_stats.json").read_text())
    assert stats["split"] == "train"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["mean"] == stats["mean"] and meta["std"] == stats["std"]


def test_report_is_one_self_contained_page_with_plots(image_run):
    run_dir, _ = image_run
    page = parse_report(run_dir / "report.html")
    images = decoded_pngs(page)
    # loss, accuracy, lr curves + confusion matrix + per-class chart, at least
    assert len(images) >= 5
    for heading in ("Training curves", "Validation results", "Confusion matrix", "Per-class precision and recall",
                    "Worst-classified validation examples", "Data", "Class counts", "Run time and throughput"):
        assert heading in page.headings, heading
    text = " ".join(page.text)
    assert "samples_per_s" in text and "val accuracy" in text
    html_text = (run_dir / "report.html").read_text()
    assert "http://" not in html_text and "https://" not in html_text  # nothing fetched when opened


def test_resume_continues_an_interrupted_run(image_folder, tmp_path):
    import shutil

    run_dir = tmp_path / "resumable"
    first = run_cli("train", "--data", image_folder, "--out", run_dir, "--epochs", "2", "--batch-size", "32",
                    "--set", "train.threads=1", "--set", "output.report=false")
    assert first.returncode == 0, first.stderr
    full = read_metrics(run_dir)
    # Make it look like the process died during the second epoch: no final weights, and only the
    # checkpoint written at the end of the first epoch.
    shutil.rmtree(run_dir / "final")
    checkpoints = sorted((run_dir / "checkpoints").glob("step-*"))
    assert len(checkpoints) == 2
    shutil.rmtree(checkpoints[-1])

    again = run_cli("train", "--data", image_folder, "--out", run_dir, "--epochs", "2")
    assert again.returncode == 2 and "already holds a run" in again.stderr and "--resume" in again.stderr

    # No --data: --resume takes the run's own config.yaml; --set given now wins.
    resumed = run_cli("train", "--out", run_dir, "--resume", "--set", "output.report=true")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {checkpoints[0]}" in resumed.stdout + resumed.stderr
    rows = read_metrics(run_dir)
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    assert [r["step"] for r in rows] == [r["step"] for r in full]
    assert (run_dir / "final" / "model.safetensors").is_file() and (run_dir / "report.html").is_file()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["resume"] is False

    # A cosine schedule was laid out for 2 epochs: extending the run is refused with the two ways on.
    longer = run_cli("train", "--out", run_dir, "--resume", "--epochs", "4")
    assert longer.returncode == 2, longer.stderr
    assert "laid out for the old length" in longer.stderr and "--extend-schedule keep_end" in longer.stderr


def test_csv_classification_with_missing_values(classification_csv, tmp_path):
    run_dir = tmp_path / "csv-cls"
    proc = run_cli("train", "--data", classification_csv, "--target", "label", "--out", run_dir, "--epochs", "15",
                   "--batch-size", "32", "--lr", "0.01", "--missing", "impute", "--set", "train.threads=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "classification of 'label'" in proc.stdout
    assert "ignored column 'id'" in proc.stdout  # an identifier is not a feature
    meta = json.loads((run_dir / "final" / "meta.json").read_text())
    assert meta["task"] == "tabular" and meta["class_names"] == ["no", "yes"]
    assert meta["model"]["name"] == "mlp"
    encoder = meta["tabular"]["encoder"]
    assert set(encoder["numeric"]) == {"x1", "x2"} and "<missing>" in encoder["categorical"]["color"]
    assert meta["input_size"] == [len(meta["tabular"]["feature_names"])]
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["data"]["imputed_values"] > 0
    assert evaluation["examples"] == 40  # nothing dropped with impute: 20% of 200
    assert evaluation["accuracy"] >= 0.8, evaluation["accuracy"]
    page = parse_report(run_dir / "report.html")
    assert len(decoded_pngs(page)) >= 4


def test_csv_regression_is_detected_and_scored_in_target_units(regression_csv, tmp_path):
    run_dir = tmp_path / "csv-reg"
    proc = run_cli("train", "--data", regression_csv, "--target", "price", "--out", run_dir, "--epochs", "25",
                   "--batch-size", "32", "--lr", "0.01", "--set", "train.threads=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "regression of 'price'" in proc.stdout
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["problem"] == "regression"
    assert evaluation["r2"] > 0.8, evaluation["r2"]
    # price spans ~100..400: an RMSE in standardized units (~0.3) would mean the target was not un-scaled
    assert 2 < evaluation["rmse"] < 60
    page = parse_report(run_dir / "report.html")
    assert len(decoded_pngs(page)) >= 3
    assert "predicted vs actual" in page.alts

    again = run_cli("eval", "--run", run_dir, "--json", tmp_path / "again.json")
    assert again.returncode == 0, again.stderr
    assert "RMSE" in again.stdout
    assert abs(json.loads((tmp_path / "again.json").read_text())["rmse"] - evaluation["rmse"]) < 1e-3


def test_local_pretrained_weights_with_frozen_backbone(image_folder, tmp_path):
    import torch
    from safetensors.torch import load_file

    from torchwise.models import build_model

    source = build_model("resnet18", 1000)  # an ImageNet-shaped state dict, saved locally
    torch.save(source.state_dict(), tmp_path / "resnet18.pth")
    run_dir = tmp_path / "transfer"
    proc = run_cli("train", "--data", image_folder, "--out", run_dir, "--model", "resnet18", "--image-size", "32",
                   "--weights", tmp_path / "resnet18.pth", "--freeze-backbone", "--max-steps", "3",
                   "--batch-size", "16", "--set", "train.threads=1", "--set", "output.report=false")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pretrained (ImageNet) statistics" in proc.stdout
    final = load_file(str(run_dir / "final" / "model.safetensors"))
    assert torch.equal(final["conv1.weight"], source.conv1.weight)          # backbone frozen
    assert torch.equal(final["bn1.running_mean"], source.bn1.running_mean)  # ... statistics included
    assert final["fc.weight"].shape == (3, 512)                             # new head, trained
    meta = json.loads((run_dir / "final" / "meta.json").read_text())
    assert meta["mean"] == [0.485, 0.456, 0.406] and "weights" not in meta["model"]
    assert int(read_metrics(run_dir)[-1]["step"]) == 3


def test_show_config_merges_yaml_flags_and_set_without_training(tmp_path, capsys):
    from torchwise.cli.main import main

    (tmp_path / "run.yaml").write_text("train:\n  lr: 0.5\n  epochs: 3\nmodel:\n  name: resnet18\n")
    argv = ["train", "--config", str(tmp_path / "run.yaml"), "--data", "x", "--out", str(tmp_path / "r"),
            "--lr", "0.1", "--set", "model.freeze_backbone=true", "--show-config"]
    assert main(argv) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["train"]["lr"] == 0.1 and shown["train"]["epochs"] == 3 and shown["data"]["path"] == "x"
    assert shown["model"] == {"name": "resnet18", "weights": None, "freeze_backbone": True}
    assert not (tmp_path / "r").exists()


def test_cli_modules_import_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, torchwise.cli.train_command, torchwise.cli.eval_command, torchwise.cli.demo_command, torchwise.config; "
            "print(sorted(m for m in ('torch', 'torchvision', 'matplotlib', 'numpy', 'PIL') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_same_seed_gives_the_same_run(image_folder, tmp_path):
    # The model is built before the Trainer seeds its loop: without seeding first, the initial
    # weights (and so every number after) would differ between two runs with the same --seed.
    def metrics(name: str, seed: str) -> list[dict[str, str]]:
        proc = run_cli("train", "--data", image_folder, "--out", tmp_path / name, "--max-steps", "4",
                       "--batch-size", "16", "--seed", seed, "--set", "train.threads=1",
                       "--set", "output.report=false")
        assert proc.returncode == 0, proc.stderr
        timing = {"elapsed_s", "data_wait", "samples_per_s"}  # wall-clock measurements
        return [{k: v for k, v in row.items() if k not in timing} for row in read_metrics(tmp_path / name)]

    first = metrics("a", "3")
    assert metrics("b", "3") == first
    assert metrics("c", "4") != first


def test_eval_every_validates_every_n_steps(image_folder, tmp_path):
    proc = run_cli("train", "--data", image_folder, "--out", tmp_path / "run", "--max-steps", "4", "--batch-size", "8",
                   "--set", "train.eval_every=2", "--set", "output.report=false", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert [row["step"] for row in read_metrics(tmp_path / "run")] == ["2", "4"]


def test_profile_flag_writes_the_trace_and_prints_the_top_operators(image_folder, tmp_path):
    proc = run_cli("train", "--data", image_folder, "--out", tmp_path / "run", "--max-steps", "8", "--batch-size", "8",
                   "--profile", "3", "--set", "output.report=false")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "profile" / "trace.json").is_file()
    assert "profile of 3 steps after warm-up" in proc.stderr and "aten::" in proc.stderr


def test_fast_parts_from_the_command_line(image_folder, tmp_path):
    proc = run_cli("train", "--data", image_folder, "--out", tmp_path / "run", "--max-steps", "2", "--batch-size", "8",
                   "--fast", "channels_last,fused_optimizer,sync_free", "--set", "output.report=false")
    assert proc.returncode == 0, proc.stderr
    assert "channels_last on" in proc.stderr and "compile off (not asked)" in proc.stderr
    assert "sync_free on" in proc.stderr and "cuda_graph off (not asked)" in proc.stderr
    bad = run_cli("train", "--data", image_folder, "--out", tmp_path / "bad", "--max-steps", "2",
                  "--set", "train.fast=chanels_last")
    assert bad.returncode == 2 and "did you mean: channels_last" in bad.stderr


def test_augmentation_on_the_device_from_the_command_line(image_folder, tmp_path):
    proc = run_cli("train", "--data", image_folder, "--out", tmp_path / "run", "--epochs", "2", "--batch-size", "16",
                   "--set", "data.augment_on=device", "--set", "output.report=false")
    assert proc.returncode == 0, proc.stderr
    assert "augmentation on the device, per batch" in proc.stderr + proc.stdout
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2  # it learns: both losses go down (2 epochs are too few for accuracy here)
    assert float(rows[1]["train_loss"]) < float(rows[0]["train_loss"])
    assert float(rows[1]["val_loss"]) < float(rows[0]["val_loss"])
    lr = run_cli("lr-find", "--data", image_folder, "--out", tmp_path / "lr", "--batch-size", "8", "--steps", "12",
                 "--set", "data.augment_on=device")
    assert lr.returncode == 0, lr.stderr


def test_a_finding_in_train_names_the_classes_and_no_console_script_line(tmp_path):
    """Issue 16: under `torchwise train` a finding said 'Class 0 ... class 1' and 'at .venv/bin/torchwise:6'."""
    import shutil
    import subprocess
    import sys

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, count, colour in (("cat", 120, (200, 40, 40)), ("dog", 6, (40, 60, 210))):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(count):
            pixels = np.clip(np.array(colour, np.float32) + rng.normal(0, 25, (16, 16, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / "imgs" / name / f"{i}.png")
    script = shutil.which("torchwise", path=str(Path(sys.executable).parent))
    assert script, "the torchwise console script is not installed next to this interpreter"
    proc = subprocess.run([script, "train", "--data", "imgs", "--out", "run", "--epochs", "2", "--quiet",
                           "--set", "train.threads=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "label-imbalance" in text, text  # shown under --quiet
    assert "class 0 ('cat')" in text.lower() and "class 1 ('dog')" in text, text
    assert "bin/torchwise" not in text, text
    assert "hint(s) that may be by design" in text
