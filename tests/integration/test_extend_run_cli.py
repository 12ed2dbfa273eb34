"""`torchwise train --resume --epochs N` on a finished run (issue 28, items 4 and 5), end to end in subprocesses.

A longer run with the default cosine schedule is refused with the two choices (no traceback, nothing on disk
changed); with --extend-schedule it trains on from the last checkpoint. The run's clock goes on across every
resume: metrics.csv's elapsed_s never goes back, and the `done:` line and the report count the whole run.
"""
from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import yaml

from conftest import assert_clear_cli_error, run_cli, tree_snapshot
from testkit.rundir_runs import write_csv

FAST = ("--batch-size", "16", "--set", "train.threads=1", "--set", "train.keep_last=20")


def rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def report_timing(run: Path, key: str) -> float:
    found = re.search(rf">{key}</td><td[^>]*>([0-9.]+)<", (run / "report.html").read_text())
    assert found, f"report.html has no {key} row"
    return float(found.group(1))


def done_seconds(proc) -> float:
    found = re.search(r"done: .* after (\d+) steps \((\d+) epochs\) in ([0-9.]+) s", proc.stdout + proc.stderr)
    assert found, f"no done: line:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return float(found.group(3))


def test_extending_a_finished_cosine_run_from_the_command_line(tmp_path):
    data = write_csv(tmp_path / "table.csv", 160, 0)  # 128 training rows: 8 steps an epoch
    run = tmp_path / "run"
    first = run_cli("train", "--data", data, "--target", "label", "--out", run, "--epochs", "2", *FAST, timeout=240)
    assert first.returncode == 0, first.stderr
    before = tree_snapshot(run)

    refused = run_cli("train", "--out", run, "--resume", "--epochs", "4", timeout=120)
    error = assert_clear_cli_error(refused, "laid out for the old length", "cosine", "train.epochs: saved 2, given 4",
                                   "steps then: 16", "steps now: 32", "resuming at step: 16",
                                   "--extend-schedule restart", "--extend-schedule keep_end")
    assert "optimizer, random state and position are the checkpoint's" in error
    assert tree_snapshot(run) == before, "a refused command changed the run"

    longer = run_cli("train", "--out", run, "--resume", "--epochs", "4", "--extend-schedule", "restart", timeout=240)
    assert longer.returncode == 0, longer.stderr
    said = longer.stdout + longer.stderr
    assert "resumed from" in said and "step-000000016" in said and "it restarts at step 16" in said
    table = rows(run)
    assert [int(r["step"]) for r in table] == [8, 16, 24, 32] and [int(r["epoch"]) for r in table] == [0, 1, 2, 3]
    lr = [float(r["lr"]) for r in table]
    assert lr[1] == 0 and lr[2] > lr[1] and lr[3] == 0  # the cosine ended, then started again over the 16 added
    saved = yaml.safe_load((run / "config.yaml").read_text())["train"]
    assert saved["epochs"] == 4 and saved["extend_schedule"] == "restart"
    elapsed = [float(r["elapsed_s"]) for r in table]
    assert elapsed == sorted(elapsed), f"elapsed_s went back at the resume: {elapsed}"
    # the summary and the report count the whole run, the first session's training included
    assert done_seconds(longer) >= elapsed[-1] - 0.05
    assert report_timing(run, "train_time_s") >= elapsed[-1] and report_timing(run, "steps_this_session") == 16

    # interrupted mid-way (only the checkpoints up to step 24 left) and resumed: the restarted schedule's layout
    # is in the checkpoint, so the run ends where the uninterrupted one did, and its clock goes on again
    for name in ("step-000000032",):
        shutil.rmtree(run / "checkpoints" / name)
    shutil.rmtree(run / "final")
    again = run_cli("train", "--out", run, "--resume", timeout=240)
    assert again.returncode == 0, again.stderr
    table_again = rows(run)
    assert [r["train_loss"] for r in table_again] == [r["train_loss"] for r in table]
    assert [r["lr"] for r in table_again] == [r["lr"] for r in table]
    elapsed_again = [float(r["elapsed_s"]) for r in table_again]
    assert elapsed_again == sorted(elapsed_again), f"elapsed_s went back at the second resume: {elapsed_again}"
    assert 0 < float(table_again[-1]["data_wait"]) < 1


def test_the_runs_clock_goes_on_across_two_resumes(tmp_path):
    """As the issue saw it (elapsed_s 86.59 -> 28.90 -> 24.97): a run interrupted twice and resumed twice."""
    data = write_csv(tmp_path / "table.csv", 160, 1)
    run = tmp_path / "run"
    steps = ("--set", "train.scheduler=step", "--set", "train.checkpoint_every=4")
    first = run_cli("train", "--data", data, "--target", "label", "--out", run, "--epochs", "4", *FAST, *steps,
                    timeout=240)
    assert first.returncode == 0, first.stderr
    whole = rows(run)
    sessions = []
    for last_kept in (12, 28):  # as if the process had died right after the checkpoint of this step
        for checkpoint in (run / "checkpoints").iterdir():
            if int(checkpoint.name.split("-")[1]) > last_kept:
                shutil.rmtree(checkpoint)
        shutil.rmtree(run / "final")
        resumed = run_cli("train", "--out", run, "--resume", timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        sessions.append(resumed)
    table = rows(run)
    assert [r["step"] for r in table] == [r["step"] for r in whole] == ["8", "16", "24", "32"]
    elapsed = [float(r["elapsed_s"]) for r in table]
    assert elapsed == sorted(elapsed), f"elapsed_s went back at a resume: {elapsed}"
    # the last session trained 4 of the 32 steps; what it reports counts all of them
    assert done_seconds(sessions[-1]) >= elapsed[-1] - 0.05
    assert report_timing(run, "train_time_s") >= elapsed[-1]
    assert report_timing(run, "train_time_s") > report_timing(run, "train_time_this_session_s")
    assert all(0 < float(r["data_wait"]) < 1 for r in table)
