"""Writes that stay in the run folder (issue 27, class 5): no file torchwise writes in a run folder is written
through a symbolic link out of it.

A link placed in the run folder that leads out (to a file, or a folder: checkpoints/, final/, tb/) is refused
when a command takes the folder, naming it, before anything is written: the run folder and what the link
points to are byte-identical afterwards. At each write the same rule holds for a link placed while the run
runs: an atomic write's temporary is a fresh file of its own (a link at any name it could take is not
followed) and its rename replaces a link, an append is opened with O_NOFOLLOW. A run folder that is itself a
link (a run kept on another disk) is the user's choice and works; so does a link inside it pointing inside.
The CLI runs in this process (testkit.rundir_runs.tw).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import assert_clear_api_error, tree_snapshot
from testkit.rundir_runs import base, data, FAST, refused, run, tw  # noqa: F401  (fixtures)


@pytest.fixture
def outside(tmp_path) -> Path:
    """Files a link may point to: each must be byte-identical after any command."""
    folder = tmp_path / "outside"
    folder.mkdir()
    for name in ("precious.txt", "notes.html", "table.csv"):
        (folder / name).write_text(f"the user's own {name}\n")
    return folder


# the files torchwise writes at the run folder's top, fresh run and resume alike
FILE_NAMES = ["report.html", "metrics.csv", "eval.json", "config.yaml", "checks.json", "trainer_config.json",
              "meta.json", "split.json", "data_stats.json"]
FOLDER_NAMES = ["checkpoints", "final", "best", "tb"]


def _link(at: Path, to: Path) -> None:
    if at.is_dir() and not at.is_symlink():
        shutil.rmtree(at)
    elif at.exists() or at.is_symlink():
        at.unlink()
    at.symlink_to(to)


def _train(data, out: Path, *extra: object):
    return tw("train", "--data", data["own"], "--target", "label", "--out", out, "--epochs", "2", *FAST, *extra)


@pytest.mark.parametrize("name", FILE_NAMES)
def test_a_fresh_run_into_a_folder_with_a_link_out_is_refused_and_nothing_changes(tmp_path, data, outside, name):
    out = tmp_path / "run"
    out.mkdir()
    _link(out / name, outside / "precious.txt")
    text = refused(tmp_path, "train", "--data", data["own"], "--target", "label", "--out", out, *FAST,
                   must_say=("symbolic link that leads out of it", str(out / name), str(outside / "precious.txt")))
    assert f"rm {out / name}" in text
    assert (outside / "precious.txt").read_text() == "the user's own precious.txt\n"


@pytest.mark.parametrize("name", ["report.html", "metrics.csv", "eval.json", "checks.json", "config.yaml"])
def test_a_resume_with_a_link_out_is_refused_and_nothing_changes(run, outside, tmp_path, name):
    target = outside / name  # the run's own file moved out (or a blank one) and linked back: read, never written
    target.write_bytes((run / name).read_bytes() if (run / name).is_file() else b"the user's own\n")
    _link(run / name, target)
    refused(tmp_path, "train", "--out", run, "--resume", "--set", "output.report=true",
            must_say=("symbolic link that leads out of it", str(run / name)))


@pytest.mark.parametrize("name", FOLDER_NAMES)
def test_a_linked_sub_folder_that_leads_out_is_refused_on_resume(run, tmp_path, name):
    elsewhere = tmp_path / f"elsewhere-{name}"
    shutil.copytree(run / name, elsewhere)  # the run's own folder, moved out and linked back
    _link(run / name, elsewhere)
    refused(tmp_path, "train", "--out", run, "--resume", must_say=("symbolic link that leads out of it", name))


@pytest.mark.parametrize("name", ["tb", "final", "checkpoints"])
def test_a_linked_sub_folder_that_leads_out_is_refused_on_a_fresh_run(tmp_path, data, name):
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("x")
    _link(out / name, elsewhere)
    refused(tmp_path, "train", "--data", data["own"], "--target", "label", "--out", out, *FAST,
            must_say=("symbolic link that leads out of it", str(out / name)))


def test_a_link_deeper_in_the_run_folder_is_refused_too(run, outside, tmp_path):
    _link(run / "checkpoints" / "step-000000008" / "COMPLETE", outside / "precious.txt")
    refused(tmp_path, "train", "--out", run, "--resume", must_say=("COMPLETE",))


def test_a_run_folder_that_is_itself_a_link_trains_and_resumes(tmp_path, data):
    real = tmp_path / "disk" / "real-run"
    real.parent.mkdir()
    real.mkdir()
    link = tmp_path / "run"
    link.symlink_to(real)
    proc = _train(data, link, "--set", "output.report=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (real / "report.html").is_file() and (real / "metrics.csv").is_file()
    shutil.rmtree(real / "checkpoints" / "step-000000008")  # a crash before the last checkpoint
    proc = tw("train", "--out", link, "--resume", "--set", "output.report=true")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert link.is_symlink() and (real / "checkpoints" / "step-000000008").is_dir()


def test_a_link_inside_the_run_folder_that_points_inside_is_fine(run):
    (run / "latest").symlink_to(run / "checkpoints" / "step-000000008")
    (run / "notes").mkdir()
    (run / "notes" / "config-copy.yaml").symlink_to("../config.yaml")
    proc = tw("train", "--out", run, "--resume", "--epochs", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_links_inside_the_folders_other_tools_write_are_theirs(run, outside):
    """W&B links its debug logs to its cache, outside the run: its folder is checked, not its contents."""
    from torchwise import files

    (run / "wandb" / "offline-run-1" / "logs").mkdir(parents=True)
    (run / "wandb" / "offline-run-1" / "logs" / "debug-core.log").symlink_to(outside / "precious.txt")
    (run / "mlruns").mkdir()
    (run / "mlruns" / "cache").symlink_to(outside)
    assert files.links_out(run) == []
    proc = tw("train", "--out", run, "--resume", "--epochs", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run / "wandb").rename(run.parent / "wandb-moved")
    (run / "wandb").symlink_to(run.parent / "wandb-moved")
    assert [link for link, _ in files.links_out(run)] == [run / "wandb"]


def test_eval_into_the_run_folder_through_a_link_out_is_refused(run, outside, tmp_path):
    _link(run / "eval.json", outside / "precious.txt")
    refused(tmp_path, "eval", "--run", run, must_say=("symbolic link that leads out of it", str(run / "eval.json")))
    assert (outside / "precious.txt").read_text() == "the user's own precious.txt\n"


def test_lr_find_into_a_folder_with_a_link_out_is_refused(tmp_path, data, outside):
    out = tmp_path / "sweep"
    out.mkdir()
    _link(out / "lr_find.json", outside / "precious.txt")
    refused(tmp_path, "lr-find", "--data", data["own"], "--target", "label", "--out", out, "--steps", "5",
            must_say=("symbolic link that leads out of it", "lr_find.json"))


def test_the_python_api_refuses_a_link_out_and_works_in_a_linked_run_folder(tmp_path, outside):
    import torch
    from torch import nn

    from torchwise import Trainer
    from torchwise.errors import TorchwiseError

    def fit(out: Path):
        torch.manual_seed(0)
        x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
        return Trainer(nn.Linear(4, 3), train_data=(x, y), val_data=(x, y), out_dir=out, epochs=1, batch_size=16,
                       progress=False, checks=False, tensorboard=False).fit()

    out = tmp_path / "run"
    out.mkdir()
    _link(out / "metrics.csv", outside / "table.csv")
    before = tree_snapshot(tmp_path)
    with pytest.raises(TorchwiseError) as excinfo:
        fit(out)
    assert_clear_api_error(excinfo, "symbolic link that leads out of it", str(out / "metrics.csv"))
    assert tree_snapshot(tmp_path) == before
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    result = fit(tmp_path / "linked")
    assert (real / "final" / "model.safetensors").is_file() and (real / "metrics.csv").is_file(), result


# ----------------------------------------------------------------------------- at each write (files.py)


def test_an_atomic_write_replaces_a_link_inside_and_refuses_one_out(tmp_path, outside):
    from torchwise import files
    from torchwise.errors import TorchwiseError

    root = tmp_path / "run"
    root.mkdir()
    (root / "elsewhere.txt").write_text("inside")
    (root / "report.html").symlink_to(root / "elsewhere.txt")
    files.write_text(root / "report.html", "page", root=root)
    assert not (root / "report.html").is_symlink() and (root / "report.html").read_text() == "page"
    assert (root / "elsewhere.txt").read_text() == "inside"
    _link(root / "eval.json", outside / "precious.txt")
    with pytest.raises(TorchwiseError) as excinfo:
        files.write_text(root / "eval.json", "{}", root=root)
    assert_clear_api_error(excinfo, str(root / "eval.json"), str(outside / "precious.txt"))
    assert (outside / "precious.txt").read_text() == "the user's own precious.txt\n"


def test_a_link_at_any_temporary_name_is_never_written_through(tmp_path, outside):
    """The temporary was `.NAME.tmp-PID` (a name anyone could guess and place a link at); it is now created
    exclusively under a random name, so links at the old name, and a folder there, change nothing."""
    from torchwise import files
    from torchwise.weights import save_state_dict

    import torch

    root = tmp_path / "run"
    (root / "final").mkdir(parents=True)
    for name in ("meta.json", "model.safetensors"):
        (root / "final" / f".{name}.tmp-{os.getpid()}").symlink_to(outside / "precious.txt")
    files.write_json(root / "final" / "meta.json", {"a": 1}, root=root)
    save_state_dict({"w": torch.ones(2)}, root / "final" / "model.safetensors", root=root)
    assert (outside / "precious.txt").read_text() == "the user's own precious.txt\n"
    assert (root / "final" / "meta.json").read_text().startswith("{")


def test_folders_between_the_run_folder_and_a_file_are_checked(tmp_path, outside):
    from torchwise import files
    from torchwise.errors import TorchwiseError
    from torchwise.weights import save_state_dict

    import torch

    root = tmp_path / "run"
    root.mkdir()
    (root / "best").symlink_to(outside)
    before = tree_snapshot(outside)
    with pytest.raises(TorchwiseError) as excinfo:
        save_state_dict({"w": torch.ones(2)}, root / "best" / "model.safetensors", root=root)
    assert_clear_api_error(excinfo, str(root / "best"))
    with pytest.raises(TorchwiseError):
        files.make_folder(root / "best" / "deeper", root)
    assert tree_snapshot(outside) == before
    files.write_text(root / "a" / "b" / "c.txt", "made", root=root)  # missing folders are made, one by one
    assert (root / "a" / "b" / "c.txt").read_text() == "made"


def test_metrics_csv_appends_never_follow_a_link_placed_while_the_run_runs(tmp_path, outside):
    from torchwise.errors import TorchwiseError
    from torchwise.train.loggers.csv_file import CsvLogger
    from torchwise.train.loggers.protocol import RunInfo

    root = tmp_path / "run"
    info = RunInfo(run_dir=root, config={}, columns=["step", "val_loss"])
    logger = CsvLogger()
    logger.start(info)
    logger.log_metrics({"step": 1, "val_loss": 0.5}, 1)
    _link(root / "metrics.csv", outside / "table.csv")  # placed mid-run
    with pytest.raises(TorchwiseError) as excinfo:
        logger.log_metrics({"step": 2, "val_loss": 0.4}, 2)
    assert_clear_api_error(excinfo, str(root / "metrics.csv"), "symbolic link")
    assert (outside / "table.csv").read_text() == "the user's own table.csv\n"


def test_a_checkpoint_write_removes_a_link_at_its_temporary_folder(tmp_path, outside):
    import torch

    from torchwise.train.state import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    root.mkdir()
    (root / ".tmp-step-000000003").symlink_to(outside)
    before = tree_snapshot(outside)
    saved = ckpt.save_checkpoint(root, 3, {"w": torch.ones(2)}, {"step": 3})
    assert ckpt.unreadable_reason(saved) is None and tree_snapshot(outside) == before
