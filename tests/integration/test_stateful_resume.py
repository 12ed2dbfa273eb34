"""Stateful checkpoints: a callback with state_dict/load_state_dict (an EMA of the weights) is saved in
every checkpoint, so a run killed by SIGKILL and resumed ends bit-identical, weights and EMA alike."""
import random
import subprocess
import sys

import torch
from safetensors.torch import load_file
from conftest import TESTS_DIR


SCRIPT = TESTS_DIR / "programs" / "ema_run.py"
TOTAL_STEPS = 3 * 20  # 3 epochs of 320 samples in batches of 16


def run(out_dir, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), str(out_dir), *extra], capture_output=True, text=True,
                          timeout=300)


def assert_same(a, b, what):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{what}: {key} differs after resume"


def test_a_callback_with_state_resumes_bit_identical_after_sigkill(tmp_path):
    reference = tmp_path / "reference"
    done = run(reference)
    assert done.returncode == 0, done.stderr
    assert f"ema_updates {TOTAL_STEPS}" in done.stdout

    killed_dir = tmp_path / "killed"
    kill_at = random.Random().randint(6, TOTAL_STEPS - 2)  # after the first checkpoint (step 5)
    killed = run(killed_dir, "--kill-at-step", str(kill_at))
    assert killed.returncode == -9, f"expected SIGKILL at step {kill_at}: {killed.stderr}"
    assert not (killed_dir / "final").exists()
    newest = sorted((killed_dir / "checkpoints").glob("step-*"))[-1]
    state = torch.load(newest / "state.pt", weights_only=True)
    assert state["callbacks"]["EMA"]["updates"] == int(newest.name[len("step-"):])

    resumed = run(killed_dir, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed_from None" not in resumed.stdout
    assert f"ema_updates {TOTAL_STEPS}" in resumed.stdout, resumed.stdout
    assert_same(load_file(str(reference / "final" / "model.safetensors")),
                load_file(str(killed_dir / "final" / "model.safetensors")), f"weights (kill at {kill_at})")
    assert_same(load_file(str(reference / "ema.safetensors")), load_file(str(killed_dir / "ema.safetensors")),
                f"EMA weights (kill at {kill_at})")
