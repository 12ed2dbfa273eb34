"""The examples under examples/ run for real: each trains, passes the Trainer's checks without a
finding, and (where its data allows it) resumes bit-identically after a SIGKILL at a random step."""
import json
import random
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from conftest import REPO_ROOT, TESTS_DIR


ROOT = REPO_ROOT
RUNNER = TESTS_DIR / "programs" / "example_run.py"
EXAMPLES = ROOT / "examples"


def run(example, out_dir, *extra, timeout=600):
    done = subprocess.run([sys.executable, str(RUNNER), str(EXAMPLES / example), str(out_dir), *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return done


def result_of(done, what):
    assert done.returncode == 0, f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_same_weights(a_dir, b_dir, what):
    a, b = load_file(str(a_dir / "final" / "model.safetensors")), load_file(str(b_dir / "final" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{what}: {key} differs after resume"


KILL_AND_RESUME = [
    pytest.param("hf_text_classifier.py", 1, id="hugging-face-classifier"),
    pytest.param("two_input_compute_loss.py", 1, id="two-inputs-compute-loss"),
    pytest.param("stream_iterable.py", 1, id="iterable-stream"),
]


@pytest.mark.parametrize("example,epochs", KILL_AND_RESUME)
def test_an_example_resumes_bit_identical_after_sigkill(tmp_path, example, epochs):
    pytest.importorskip("transformers") if example.startswith("hf_") else None
    reference = result_of(run(example, tmp_path / "reference", "--epochs", str(epochs)), "the reference run")
    total = reference["steps"]
    kill_at = random.Random().randint(6, total - 2)  # after the first checkpoint (step 5), before the end
    killed = run(example, tmp_path / "killed", "--epochs", str(epochs), "--kill-at-step", str(kill_at))
    assert killed.returncode == -9, f"expected SIGKILL at step {kill_at}: {killed.stderr[-3000:]}"
    resumed = result_of(run(example, tmp_path / "killed", "--epochs", str(epochs), "--resume"), "the resumed run")
    assert resumed["resumed_from"] != "None" and resumed["steps"] == total
    timing = ("elapsed_s", "samples_per_s", "data_wait")
    same = {k: v for k, v in resumed["last"].items() if k not in timing}
    assert same == {k: v for k, v in reference["last"].items() if k not in timing}, \
        f"kill at {kill_at}: the metrics differ after resume"
    assert_same_weights(tmp_path / "reference", tmp_path / "killed", f"{example}, kill at {kill_at}")


@pytest.mark.parametrize("example", ["hf_text_classifier.py", "two_input_compute_loss.py", "stream_iterable.py"])
def test_an_example_learns_and_passes_the_checks_without_findings(tmp_path, example):
    if example.startswith("hf_"):
        pytest.importorskip("transformers")
    result = result_of(run(example, tmp_path / "run", "--epochs", "2", "--checks"), example)
    assert result["findings"] == [], f"{example}: the Trainer's checks found {result['findings']} on a correct run"
    assert result["last"]["val_acc"] > 0.7, result["last"]


def test_the_logging_example_writes_an_mlflow_file_store_and_an_offline_wandb_run(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    import os

    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}
    env.pop("WANDB_API_KEY", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run([sys.executable, str(EXAMPLES / "log_mlflow_wandb.py"), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlflow run FINISHED, 3 val_acc points; wandb offline files: 1" in done.stdout, done.stdout
