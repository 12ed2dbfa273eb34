"""One writer per run folder, in this process: the lock's semantics (train/state/run_lock.py) and the Trainer
holding it for fit(). The same with real processes (two CLI runs, a killed holder, two Trainer processes,
torchrun groups) is tests/integration/test_run_folder_lock.py."""
from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from conftest import assert_clear_api_error, tree_snapshot
from torchwise.train.state import run_lock
from torchwise.train.state.run_lock import LOCK_FILE, RunFolderBusy, RunLock


def write_note(run: Path, **fields) -> Path:
    """A lock file left behind by a holder that is gone (its lock is not held)."""
    run.mkdir(parents=True, exist_ok=True)
    note = {"pid": 1, "host": socket.gethostname(), "boot": run_lock.holder_record()["boot"],
            "since": "2020-01-01T00:00:00+00:00", "command": "torchwise train --out old", **fields}
    (run / LOCK_FILE).write_text(json.dumps(note))
    return run / LOCK_FILE


def test_a_second_lock_in_the_same_process_is_refused_and_changes_nothing(tmp_path):
    run = tmp_path / "run"
    with RunLock(run, command="torchwise train --out run") as held:
        (run / "metrics.csv").write_text("epoch,step\n")
        before = tree_snapshot(run)
        with pytest.raises(RunFolderBusy) as excinfo:
            RunLock(run).acquire()  # flock belongs to the open file: the same process is refused too
        text = assert_clear_api_error(excinfo, str(os.getpid()), "(this process)", socket.gethostname(),
                                      "torchwise train --out run", held.record["since"], str(run / LOCK_FILE))
        assert "another --out" in text
        assert tree_snapshot(run) == before, "a refused lock changed the run folder"
        assert json.loads((run / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (run / LOCK_FILE).exists(), "a released lock leaves its file behind"
    assert RunLock(run).acquire().held  # free again


def test_a_lock_refused_or_released_removes_the_folders_it_made(tmp_path):
    run = tmp_path / "new" / "run"
    lock = RunLock(run).acquire()
    assert run.is_dir()
    lock.release()
    assert not (tmp_path / "new").exists(), "the folders made only to hold the lock stay behind"
    kept = tmp_path / "kept"
    with RunLock(kept):
        (kept / "metrics.csv").write_text("rows\n")
    assert (kept / "metrics.csv").is_file()  # a folder with the run's files in it stays


def test_a_stale_lock_file_of_this_machine_is_taken_over(tmp_path):
    # pid 1 is alive: under this kernel only flock counts (a recycled pid must not keep a folder locked)
    path = write_note(tmp_path / "run")
    with RunLock(tmp_path / "run"):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


def test_a_lock_file_of_this_host_before_a_restart_is_taken_over(tmp_path):
    path = write_note(tmp_path / "run", boot="another-boot")
    with RunLock(tmp_path / "run"):
        assert json.loads(path.read_text())["pid"] == os.getpid()


def test_a_lock_file_of_another_machine_is_not_taken_over(tmp_path):
    path = write_note(tmp_path / "run", host="node-17", boot="their-boot", pid=4242)
    before = tree_snapshot(tmp_path / "run")
    with pytest.raises(RunFolderBusy) as excinfo:
        RunLock(tmp_path / "run").acquire()
    assert_clear_api_error(excinfo, "another machine", "node-17", "4242", f"delete {path}")
    assert tree_snapshot(tmp_path / "run") == before


def test_without_flock_a_live_holder_of_this_kernel_refuses_and_a_dead_one_does_not(tmp_path):
    run = tmp_path / "run"
    alive = {"pid": os.getpid(), "host": socket.gethostname(), "boot": run_lock.holder_record()["boot"]}
    refusal = run_lock.stale_note_refusal(alive, run, run / LOCK_FILE, flock_works=False)
    assert isinstance(refusal, RunFolderBusy) and str(os.getpid()) in str(refusal)
    dead = {**alive, "pid": int(Path("/proc/sys/kernel/pid_max").read_text())}  # pids stay below pid_max
    assert run_lock.stale_note_refusal(dead, run, run / LOCK_FILE, flock_works=False) is None
    assert run_lock.stale_note_refusal({}, run, run / LOCK_FILE, flock_works=False) is None


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_not_followed(tmp_path):
    run, target = tmp_path / "run", tmp_path / "elsewhere.txt"
    run.mkdir()
    target.write_text("not torchwise's")
    (run / LOCK_FILE).symlink_to(target)
    with pytest.raises(torchwise.TorchwiseError) as excinfo:
        RunLock(run).acquire()
    assert_clear_api_error(excinfo, "symbolic link", str(run / LOCK_FILE))
    assert target.read_text() == "not torchwise's"


def test_a_claim_nested_in_the_same_context_takes_nothing_and_another_thread_is_refused(tmp_path):
    run = tmp_path / "run"
    outcome = []

    def other_thread():
        try:
            run_lock.claim(run).release()
            outcome.append("took it")
        except RunFolderBusy as exc:
            outcome.append(str(exc))

    with run_lock.claim(run) as outer:
        with run_lock.claim(run) as inner:  # `torchwise train` holds it around its own Trainer's fit()
            assert outer.lock is not None and inner.lock is None
        assert (run / LOCK_FILE).exists(), "the nested claim released the outer one's lock"
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(timeout=60)
    assert outcome and "Another torchwise run is writing" in outcome[0], outcome
    assert not (run / LOCK_FILE).exists()


def test_claim_if_inside_locks_only_for_targets_in_the_run_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with run_lock.claim_if_inside(run, tmp_path / "elsewhere" / "eval.json") as outside:
        assert outside.lock is None
    with run_lock.claim_if_inside(run, run / "export") as inside:
        assert inside.lock is not None and (run / LOCK_FILE).exists()


# ----------------------------------------------------------------------------- the Trainer holds it for fit()


def trainer(out_dir: Path, **settings) -> torchwise.Trainer:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return torchwise.Trainer(model, train_data=TensorDataset(x, (x[:, 0] > 0).long()), out_dir=out_dir,
                             epochs=1, batch_size=8, num_workers=0, progress=False, checks=False,
                             tensorboard=False, device="cpu", **settings)


def test_a_trainer_on_a_held_run_folder_is_refused_before_it_writes_anything(tmp_path):
    run = tmp_path / "run"
    with RunLock(run, command="torchwise train --out run"):
        before = tree_snapshot(run)
        with pytest.raises(RunFolderBusy) as excinfo:
            trainer(run).fit()
        assert_clear_api_error(excinfo, "torchwise train --out run", str(os.getpid()))
        assert tree_snapshot(run) == before, "a refused fit() wrote into the run folder"
    result = trainer(run).fit()  # refused before: the same folder trains once it is free
    assert result.steps == 4 and (run / "metrics.csv").is_file()
    assert not (run / LOCK_FILE).exists(), "fit() left its lock file behind"


def test_fit_releases_the_lock_when_it_raises(tmp_path):
    run = tmp_path / "run"
    t = trainer(run)

    def fail(step, **_):
        assert (run / LOCK_FILE).exists(), "fit() runs without holding its run folder's lock"
        raise RuntimeError("a callback failed")

    t.on("step_end", fail)
    with pytest.raises(RuntimeError, match="a callback failed"):
        t.fit()
    assert not (run / LOCK_FILE).exists()
    with RunLock(run):  # free again
        pass
