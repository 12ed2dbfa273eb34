"""Ctrl-C in the Trainer's Python API, in a real process: the checkpoint at that step, the resumed run exact,
a second Ctrl-C that stops at once and corrupts nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from conftest import REPO_ROOT, TESTS_DIR


pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = REPO_ROOT


# ---------------------------------------------------------------- case 4: Ctrl-C keeps the work
def build(out_dir, **kwargs):
    """12 steps: 4 epochs of 3 steps of 2 accumulated batches, dropout, a cosine schedule, AdamW."""
    x = torch.randn(96, 8, generator=torch.Generator().manual_seed(0))
    y = (x @ torch.randn(8, 3, generator=torch.Generator().manual_seed(99))).argmax(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    return torchwise.Trainer(model, lambda p: torch.optim.AdamW(p, lr=1e-2), train_data=TensorDataset(x, y),
                             val_data=TensorDataset(x[:32], y[:32]), batch_size=16, accumulate=2, max_epochs=4,
                             out_dir=out_dir, scheduler="cosine", progress=False, tensorboard=False, **kwargs)


# One real process, three runs, each sent SIGINT by itself from a step_end callback at step 5 (mid-epoch,
# mid-schedule): once; twice in a row (the second stops at once, inside the step's bookkeeping); and a
# second one that lands inside the checkpoint's write.
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[4]]  # the repo, tests/integration, tests (conftest)
    from test_robust_api_interrupt import build
    from torchwise import files

    real_fsync = files.fsync_file
    for how in ("once", "twice", "during-save"):
        files.fsync_file = real_fsync
        t = build(os.path.join(sys.argv[3], how))

        def on_step(step, how=how, **_):
            if step != 5:
                return
            os.kill(os.getpid(), signal.SIGINT)
            if how == "twice":
                os.kill(os.getpid(), signal.SIGINT)
            if how == "during-save":
                def fsync_then_interrupt(path):
                    real_fsync(path)
                    os.kill(os.getpid(), signal.SIGINT)
                files.fsync_file = fsync_then_interrupt

        t.on("step_end", on_step)
        print(f"=== {how}", file=sys.stderr, flush=True)
        try:
            t.fit()
            print(f"{how}: finished without an interrupt", flush=True)
        except KeyboardInterrupt:
            print(f"{how}: the caller saw KeyboardInterrupt at step {t.pos.step}", flush=True)
""")


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """{how: (out_dir, that run's stderr)} and the process' stdout."""
    root = tmp_path_factory.mktemp("interrupted")
    script = root / "train_and_interrupt.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(ROOT), str(TESTS_DIR / "integration"), str(root),
                           str(TESTS_DIR)],
                          env=dict(os.environ, PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    parts = dict(part.split("\n", 1) for part in proc.stderr.split("=== ")[1:])
    return {how: (root / how, parts[how]) for how in parts}, proc.stdout


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t = build(tmp_path_factory.mktemp("whole"))
        assert t.fit().steps == 12
        return {k: v.clone() for k, v in t.model.state_dict().items()}
    finally:
        torch.set_num_threads(n)


def resumed_weights(out_dir: Path, expect_from: str) -> dict:
    t = build(out_dir, resume=True)
    result = t.fit()
    assert result.steps == 12 and result.resumed_from.name == expect_from
    return t.model.state_dict()


def test_ctrl_c_saves_a_checkpoint_at_that_step_and_the_resumed_run_is_exact(interrupted, uninterrupted):
    runs, stdout = interrupted
    out, err = runs["once"]
    assert "once: the caller saw KeyboardInterrupt at step 5" in stdout, stdout + err
    assert (out / "checkpoints" / "step-000000005" / "COMPLETE").is_file(), err
    assert "interrupted at step 5; checkpoint saved" in err and "resume=True" in err and str(out) in err, err
    weights = resumed_weights(out, "step-000000005")
    for key, value in uninterrupted.items():
        assert torch.equal(weights[key], value), key


@pytest.mark.parametrize("how", ["twice", "during-save"])
def test_a_second_ctrl_c_stops_at_once_and_corrupts_nothing(interrupted, uninterrupted, how):
    runs, stdout = interrupted
    out, err = runs[how]
    assert f"{how}: the caller saw KeyboardInterrupt at step 5" in stdout, stdout + err
    assert "second interrupt: stopping at once" in err, err
    complete = sorted(p.name for p in (out / "checkpoints").iterdir()
                      if p.name.startswith("step-") and (p / "COMPLETE").is_file())
    assert complete == ["step-000000003"], (complete, err)  # the epoch-end one; step 5's was cut short
    assert "latest complete checkpoint is" in err and "step-000000003" in err, err
    weights = resumed_weights(out, "step-000000003")  # the cut-short write is cleaned up, never resumed from
    for key, value in uninterrupted.items():
        assert torch.equal(weights[key], value), key
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
