"""The exact-resume promise: a run killed by SIGKILL and resumed ends bit-identical to an uninterrupted one."""
import csv
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from conftest import TESTS_DIR


SCRIPT = TESTS_DIR / "programs" / "resume_run.py"
TOTAL_STEPS = 3 * 75  # 3 epochs of 1200 samples in batches of 16


def run(out_dir, mode, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), str(out_dir), mode, *extra],
                          capture_output=True, text=True, timeout=300)


def final_weights(out_dir):
    return load_file(str(Path(out_dir) / "final" / "model.safetensors"))


def metrics_rows(out_dir):
    with open(Path(out_dir) / "metrics.csv") as fh:
        timing = {"elapsed_s", "data_wait", "samples_per_s"}  # wall-clock measurements differ, of course
        return [{k: v for k, v in row.items() if k not in timing} for row in csv.DictReader(fh)]


def assert_identical(a_dir, b_dir):
    a, b = final_weights(a_dir), final_weights(b_dir)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after resume"
    assert metrics_rows(a_dir) == metrics_rows(b_dir)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs, one per data mode."""
    refs = {}
    for mode in ("dataset", "loader", "loader-workers"):
        out = tmp_path_factory.mktemp(f"ref-{mode}")
        proc = run(out, mode)
        assert proc.returncode == 0, proc.stderr
        refs[mode] = out
    return refs


@pytest.mark.parametrize("mode", ["dataset", "loader", "loader-workers"])
def test_sigkill_at_random_step_then_resume_is_bit_identical(tmp_path, reference, mode):
    # from step 8 on: the first checkpoint is written after step 7 (checkpoint_every=7), and a run killed
    # before it has nothing to resume from (it would start over, which is not what this test is about)
    kill_at = random.Random().randint(8, TOTAL_STEPS - 2)
    killed = run(tmp_path, mode, "--kill-at-step", str(kill_at))
    assert killed.returncode == -9, f"expected SIGKILL at step {kill_at}: {killed.stderr}"
    assert not (tmp_path / "final").exists()
    resumed = run(tmp_path, mode, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed_from None" not in resumed.stdout, resumed.stdout
    assert_identical(reference[mode], tmp_path), f"kill at step {kill_at}"


def test_kill_while_writing_a_checkpoint_resumes_from_the_previous_one(tmp_path, reference):
    killed = run(tmp_path, "dataset", "--kill-in-checkpoint", "70")
    assert killed.returncode == -9
    ckpts = tmp_path / "checkpoints"
    assert (ckpts / "step-000000063" / "COMPLETE").is_file()
    assert not (ckpts / "step-000000070").exists()            # never renamed into place
    assert any(p.name.startswith(".tmp-") for p in ckpts.iterdir())  # the half-written one
    resumed = run(tmp_path, "dataset", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "step-000000063" in resumed.stdout
    assert not any(p.name.startswith(".tmp-") for p in ckpts.iterdir())
    assert_identical(reference["dataset"], tmp_path)
