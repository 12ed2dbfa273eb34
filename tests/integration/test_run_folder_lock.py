"""One writer per run folder, with real processes (train/state/run_lock.py): two `torchwise train` on one --out
started together, a holder killed with SIGKILL, two Python Trainer processes, two torchrun groups. The lock's
semantics in this process are tests/unit/train/test_run_lock.py.

Every wait has a limit that only a hang reaches (a limit, not a measurement); every process is ended by the test."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import assert_clear_cli_error, run_cli, tree_snapshot
from testkit.rundir_runs import FAST, write_csv

LOCK = ".torchwise.lock"
LIMIT_S = 300  # far longer than any start here takes; only a hang reaches it
BUSY = "Another torchwise run is writing to this run folder"
# runs until the test ends it: a checkpoint after every step, so a kill finds one to resume from
FOREVER = ("--epochs", "100000", "--checkpoint-every", "1", "--quiet", *FAST)


@pytest.fixture(scope="module")
def csv_data(tmp_path_factory) -> Path:
    return write_csv(tmp_path_factory.mktemp("lock-data") / "own.csv", 80, 0)


class Started:
    """A process started by a test, its output in files (a pipe nobody reads would fill and stall it)."""

    def __init__(self, argv: list[str], log: Path, *, group: bool = False):
        self.log = log
        self.out, self.err = open(log.with_suffix(".out"), "w"), open(log.with_suffix(".err"), "w")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=self.err, start_new_session=group,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.group = group

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        self.out.flush(), self.err.flush()
        return self.log.with_suffix(".out").read_text() + self.log.with_suffix(".err").read_text()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            (os.killpg if self.group else os.kill)(self.pid, sig)

    def end(self) -> None:
        # the ranks a launcher started are in sessions of their own: SIGKILL on its group alone would leave them
        # training (for FOREVER epochs) through the rest of the suite, so every descendant is ended by its pid
        family = descendants(self.pid)
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=60)
        self.out.close(), self.err.close()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` now (Linux /proc), children before their own children."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # it ended meanwhile
            parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parent_of.items() if parent in frontier]
        found += children
        frontier = children
    return found


def torchwise_process(tmp_path: Path, name: str, *args: object, group: bool = False) -> Started:
    return Started([sys.executable, "-m", "torchwise", *map(str, args)], tmp_path / name, group=group)


def wait_for(condition, what: str, *watched: Started) -> None:
    """Poll `condition` until it holds; fail, with every watched process's output, at LIMIT_S."""
    deadline = time.monotonic() + LIMIT_S
    while not condition():
        if time.monotonic() > deadline:
            outputs = "\n".join(f"--- {s.log.name} (exit {s.proc.poll()}):\n{s.text()[-3000:]}" for s in watched)
            pytest.fail(f"{what}: not seen within {LIMIT_S} s\n{outputs}")
        time.sleep(0.2)


def note(run: Path) -> dict:
    try:
        return json.loads((run / LOCK).read_text())
    except (OSError, ValueError):
        return {}


def as_completed(proc: Started) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(proc.proc.args, proc.proc.returncode, proc.log.with_suffix(".out").read_text(),
                                       proc.log.with_suffix(".err").read_text())


def test_two_cli_trains_started_together_on_one_out_the_second_is_refused(csv_data, tmp_path):
    run = tmp_path / "run"
    both = [torchwise_process(tmp_path, f"train{i}", "train", "--data", csv_data, "--target", "label", "--out", run,
                              *FOREVER) for i in (1, 2)]
    try:
        wait_for(lambda: any(p.proc.poll() is not None for p in both), "one of two trains on one --out ending", *both)
        loser = next(p for p in both if p.proc.poll() is not None)
        winner = next(p for p in both if p is not loser)
        assert winner.proc.poll() is None, f"both trains ended:\n{winner.text()[-3000:]}\n{loser.text()[-3000:]}"
        assert_clear_cli_error(as_completed(loser), BUSY, f"holder pid: {winner.pid}", "its command: torchwise train",
                               f"kill {winner.pid}", "another --out")
        wait_for(lambda: note(run).get("pid") == winner.pid, "the winner's note in the lock file", winner)
        assert "done:" not in loser.text()
        # the holder frozen, a third writer (train, train --resume, eval into the folder) changes nothing there
        winner.signal(signal.SIGSTOP)
        before = tree_snapshot(run)
        for args in (("train", "--data", csv_data, "--target", "label", "--out", run, *FAST),
                     ("train", "--out", run, "--resume"), ("eval", "--run", run)):
            third = run_cli(*args, timeout=LIMIT_S)
            assert_clear_cli_error(third, BUSY, f"holder pid: {winner.pid}")
            assert tree_snapshot(run) == before, f"the refused `torchwise {args[0]}` changed the run folder"
    finally:
        for proc in both:
            proc.end()


def test_a_holder_killed_with_sigkill_leaves_a_lock_file_that_a_resumed_run_takes_over(csv_data, tmp_path):
    from torchwise.train.state import checkpoint as ckpt

    run = tmp_path / "run"
    holder = torchwise_process(tmp_path, "holder", "train", "--data", csv_data, "--target", "label", "--out", run,
                               *FOREVER)
    try:
        wait_for(lambda: ckpt.list_checkpoints(run / "checkpoints"), "a complete checkpoint of the holder", holder)
        holder.signal(signal.SIGKILL)
        holder.proc.wait(timeout=60)
    finally:
        holder.end()
    assert note(run).get("pid") == holder.pid, "the killed holder's lock file is not there (nothing to take over)"
    step = int(ckpt.list_checkpoints(run / "checkpoints")[-1].name[len(ckpt.PREFIX):])
    resumed = run_cli("train", "--out", run, "--resume", "--max-steps", step + 1, timeout=LIMIT_S)
    assert resumed.returncode == 0, f"the stale lock file was not taken over:\n{resumed.stderr[-3000:]}"
    assert "done:" in resumed.stdout and (run / "final" / "model.safetensors").is_file()
    assert not (run / LOCK).exists(), "the finished run left its lock file behind"


TRAINER_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    import torchwise

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    trainer = torchwise.Trainer(nn.Linear(4, 2), train_data=TensorDataset(x, (x[:, 0] > 0).long()), out_dir=sys.argv[1],
                                max_steps=10**9, checkpoint_every=1, batch_size=8, num_workers=0, progress=False,
                                checks=False, tensorboard=False, device="cpu")
    try:
        trainer.fit()
    except torchwise.TorchwiseError as exc:
        print(exc, file=sys.stderr)
        sys.exit(3)
""")


def test_two_trainer_processes_on_one_out_dir_the_second_is_refused(tmp_path):
    script, run = tmp_path / "fit.py", tmp_path / "run"
    script.write_text(TRAINER_SCRIPT)
    both = [Started([sys.executable, str(script), str(run)], tmp_path / f"fit{i}") for i in (1, 2)]
    try:
        wait_for(lambda: any(p.proc.poll() is not None for p in both), "one of two Trainers on one out_dir ending",
                 *both)
        loser = next(p for p in both if p.proc.poll() is not None)
        winner = next(p for p in both if p is not loser)
        assert winner.proc.poll() is None, f"both fits ended:\n{winner.text()[-3000:]}\n{loser.text()[-3000:]}"
        assert loser.proc.returncode == 3 and BUSY in loser.text() and f"holder pid: {winner.pid}" in loser.text(), \
            loser.text()[-3000:]
        winner.signal(signal.SIGSTOP)
        before = tree_snapshot(run)
        third = subprocess.run([sys.executable, str(script), str(run)], capture_output=True, text=True,
                               timeout=LIMIT_S)
        assert third.returncode == 3 and f"holder pid: {winner.pid}" in third.stderr, third.stderr[-3000:]
        assert tree_snapshot(run) == before, "a refused Trainer changed the run folder"
    finally:
        for proc in both:
            proc.end()


def test_a_second_torchrun_group_on_one_out_ends_on_every_rank_with_the_refusal(csv_data, tmp_path):
    run = tmp_path / "run"
    train = ("train", "--data", csv_data, "--target", "label", "--out", run, "--nproc", "2")
    first = torchwise_process(tmp_path, "group1", *train, *FOREVER, group=True)
    try:
        wait_for(lambda: note(run).get("pid"), "the first group's rank 0 holding the folder", first)
        holder = note(run)["pid"]
        second = run_cli(*train, "--epochs", "1", *FAST, timeout=LIMIT_S)  # a hang fails here, by its timeout
        text = second.stdout + second.stderr
        assert second.returncode != 0 and BUSY in text and f"holder pid: {holder}" in text, text[-4000:]
        assert "Lost contact" not in text, f"a rank of the second group was left waiting:\n{text[-4000:]}"
        assert first.proc.poll() is None, f"the first group stopped:\n{first.text()[-3000:]}"
        assert note(run).get("pid") == holder
    finally:
        first.end()
