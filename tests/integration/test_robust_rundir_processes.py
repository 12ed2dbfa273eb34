"""Never lose a run, with real processes: a checkpoint write that fails for file size, and Ctrl-C's message
with the command that continues the run."""
from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_clear_cli_error, tree_snapshot

FAST = ("--batch-size", "16", "--set", "train.threads=1", "--set", "output.report=false",
        "--set", "train.scheduler=step")


def tw(*args: object) -> subprocess.CompletedProcess:
    """`torchwise ARGS` in this process: exit status and captured output, shaped like run_cli's."""
    from torchwise.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def write_csv(path: Path, rows: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x1", "x2", "label"])
        for _ in range(rows):
            x1, x2 = rng.normal(), rng.normal()
            writer.writerow([round(x1, 4), round(x2, 4), "yes" if x1 > 0 else "no"])
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rundir-data")
    return {"own": write_csv(root / "own.csv", 80, 0), "other": write_csv(root / "other.csv", 100, 1),
            "same_size": write_csv(root / "same_size.csv", 80, 2)}


@pytest.fixture(scope="module")
def base(data, tmp_path_factory) -> Path:
    """A finished 2-epoch run (4 steps an epoch: checkpoints step 4 and 8), written under umask 022."""
    run = tmp_path_factory.mktemp("rundir-base") / "run"
    old = os.umask(0o022)
    try:
        proc = tw("train", "--data", data["own"], "--target", "label", "--out", run, "--epochs", "2", *FAST)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["step-000000004", "step-000000008"]
    return run


@pytest.fixture
def run(base, tmp_path) -> Path:
    """A copy of the base run, to damage or to resume."""
    copy = tmp_path / "run"
    shutil.copytree(base, copy)
    return copy


def refused(where: Path, *args: object, must_say: tuple[str, ...] = ()) -> str:
    """Run a command that must be refused; prove it changed nothing under `where`."""
    before = tree_snapshot(where)
    proc = tw(*args)
    text = assert_clear_cli_error(proc, *must_say)
    assert tree_snapshot(where) == before, f"a refused command changed the disk:\n{text}"
    return text


# ----------------------------------------------------------------------------- case 2: changed settings


# Values for keys whose type alone does not say what a valid other value is.


# ----------------------------------------------------------------------------- case 4: a wrong run directory


# ----------------------------------------------------------------------------- case 6: refused before any data are read


# ----------------------------------------------------------------------------- case 3: cut-short checkpoints


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
