"""A finished CSV run and the in-process command runner the run-directory tests damage, resume and refuse."""
from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import subprocess
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


def make_data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rundir-data")
    return {"own": write_csv(root / "own.csv", 80, 0), "other": write_csv(root / "other.csv", 100, 1),
            "same_size": write_csv(root / "same_size.csv", 80, 2)}


def make_base(data, tmp_path_factory) -> Path:
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


def make_run(base, tmp_path) -> Path:
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


# The fixtures the run-directory tests share: a module imports them by name (pytest finds imported fixtures).
@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    return make_data(tmp_path_factory)


@pytest.fixture(scope="module")
def base(data, tmp_path_factory) -> Path:
    return make_base(data, tmp_path_factory)


@pytest.fixture
def run(base, tmp_path) -> Path:
    return make_run(base, tmp_path)
