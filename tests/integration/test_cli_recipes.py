"""The recipes and loggers as CLI settings: one name per setting, train.X in the CLI is the Trainer's X."""
import json

from conftest import run_cli


def test_the_recipes_are_cli_settings_recorded_with_the_run(image_folder, tmp_path):
    run = tmp_path / "run"
    proc = run_cli("train", "--data", image_folder, "--out", run, "--epochs", "1", "--seed", "0",
                   "--set", "train.ema_decay=0.99", "--set", "train.mixup=0.2", "--set", "train.cutmix=1.0",
                   "--set", "train.label_smoothing=0.1", "--set", "data.augment_policy=trivial",
                   "--set", "train.loggers=csv", "--set", "train.threads=1", "--set", "output.report=false")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recorded = json.loads((run / "trainer_config.json").read_text())["trainer"]
    assert recorded["optim"]["ema_decay"] == 0.99 and recorded["optim"]["label_smoothing"] == 0.1
    assert recorded["data"]["mixup"] == 0.2 and recorded["data"]["cutmix"] == 1.0
    assert recorded["logging"]["loggers"] == "csv"
    assert (run / "metrics.csv").exists() and not list(run.glob("tb/*"))  # csv only: no TensorBoard files
    assert (run / "final" / "model.safetensors").exists()


def test_a_policy_with_device_augmentation_is_refused_before_training(image_folder, tmp_path):
    proc = run_cli("train", "--data", image_folder, "--out", tmp_path / "run", "--epochs", "1",
                   "--set", "data.augment_policy=randaugment", "--set", "data.augment_on=device")
    assert proc.returncode == 2 and "augment_on=cpu" in proc.stderr, proc.stderr
