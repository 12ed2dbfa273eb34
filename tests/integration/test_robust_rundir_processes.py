"""Never lose a run, with real processes: a checkpoint write that fails for file size, and Ctrl-C's message
with the command that continues the run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_clear_cli_error, tree_snapshot
from testkit.rundir_runs import base, data, FAST, run, tw  # noqa: F401  (fixtures)


# ----------------------------------------------------------------------------- case 2: changed settings


# Values for keys whose type alone does not say what a valid other value is.


# ----------------------------------------------------------------------------- case 4: writes that fail midway

def _fsize_limited(limit: int, *args: object, timeout: float = 240) -> subprocess.CompletedProcess:
    """`torchwise ARGS` in a process whose files may not grow past `limit` bytes: writes fail with EFBIG."""
    code = ("import resource, runpy, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            "sys.argv = ['torchwise', *sys.argv[1:]]\n"
            "runpy.run_module('torchwise', run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_a_checkpoint_write_that_fails_for_file_size_leaves_the_previous_one_resumable(run):
    from torchwise.train.state import checkpoint as ckpt

    state = run / "checkpoints" / "step-000000008" / "state.pt"
    weights = state.with_name("model.safetensors")
    limit = (weights.stat().st_size + state.stat().st_size) // 2  # the weights fit, the optimizer state does not
    assert weights.stat().st_size < limit < state.stat().st_size
    before = tree_snapshot(run / "checkpoints")
    proc = _fsize_limited(limit, "train", "--out", run, "--resume", "--epochs", "3", "--checkpoint-every", "1")
    assert_clear_cli_error(proc, "Could not write checkpoint step-000000009", "while writing: state.pt",
                           f"file size limit: {limit} bytes",
                           "latest good checkpoint: step-000000008", "--resume")
    assert tree_snapshot(run / "checkpoints") == before  # no half checkpoint, no leftovers
    again = tw("train", "--out", run, "--resume")
    assert again.returncode == 0, again.stderr
    assert ckpt.list_checkpoints(run / "checkpoints")[-1].name == "step-000000012"


def test_ctrl_c_prints_the_command_that_continues_the_run(data, tmp_path):
    import signal
    import time

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "torchwise", "train", "--data", data["own"], "--target", "label",
                             "--out", run, "--epochs", "100000", "--checkpoint-every", "1", *FAST],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        for _ in range(1200):  # at most 4 minutes for the first checkpoint: a limit, not a measurement
            if proc.poll() is not None or list(run.glob("checkpoints/step-*/COMPLETE")):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    assert f"torchwise train --out {run} --resume" in err, err[-3000:]
    assert "Traceback" not in err
    from torchwise.train.state import checkpoint as ckpt

    assert ckpt.find_resume_checkpoint(True, run) is not None
    assert not list((run / "checkpoints").glob(".tmp-*"))  # an interrupted write leaves nothing half done
