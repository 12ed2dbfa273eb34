"""Never lose a run (issue 16): the run directory and resume, under bad input of every kind.

Each refused command must give torchwise's own error (what, values, fix; no traceback) and leave
the disk exactly as it was (tree_snapshot before == after); each accepted one must do what it says.
The CLI runs in this process (torchwise.cli.main.main, the same code `python -m torchwise` runs)
except where a process limit is the point (RLIMIT_FSIZE), so that the many cases stay cheap.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import types
import typing
from pathlib import Path

import pytest
import yaml

from conftest import assert_clear_api_error, tree_snapshot
from testkit.rundir_runs import base, data, FAST, refused, run, tw  # noqa: F401  (fixtures)


# ----------------------------------------------------------------------------- case 2: changed settings

def _fields():
    from torchwise import config as cfg

    for section, cls in cfg.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            yield f"{section}.{f.name}", hints[f.name]


# Values for keys whose type alone does not say what a valid other value is.
SPECIAL = {"data.target": "x2", "model.name": "smallcnn", "model.weights": "/nowhere/start.safetensors",
           "train.device": "cpu", "train.fast": "off", "data.num_workers": "0", "data.cache_dir": "/tmp/tw-cache",
           "output.progress": "false", "data.image_size": "8", "train.threads": "2", "train.loggers": "csv"}


def changed_text(key: str, tp, saved) -> str:
    """A valid value other than the saved one, as --set text (any key, including ones added later)."""
    if key in SPECIAL:
        return SPECIAL[key]
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for option in options:
        if typing.get_origin(option) is typing.Literal:
            others = [choice for choice in typing.get_args(option) if choice != saved]
            if others:
                return str(others[0])
    if isinstance(saved, bool):
        return str(not saved).lower()
    if isinstance(saved, int):
        return str(saved + 1)
    if isinstance(saved, float):
        return str(saved / 2) if saved else "0.5"  # 0.0 halved is still 0.0
    # None, or the one literal of a union ("auto"): a value of the union's other type
    for option, text in ((bool, "true"), (float, "0.5"), (int, "2")):
        if option in options:
            return text
    raise AssertionError(f"no changed value for {key}={saved!r}: add it to SPECIAL")


SETTINGS = [key for key, _ in _fields() if key not in ("train.resume", "output.dir", "data.path")]


def _saved(base: Path) -> dict:
    return yaml.safe_load((base / "config.yaml").read_text())


@pytest.mark.parametrize("key", SETTINGS)
def test_every_setting_changed_on_resume_is_applied_ignored_or_refused(key, base):
    from torchwise import config as cfg
    from torchwise.run import resume

    section, _, name = key.partition(".")
    saved = _saved(base)[section][name]
    text = changed_text(key, dict(_fields())[key], saved)
    policy = resume.resume_policy(key, "step")
    if policy == "refused":
        error = refused(base, "train", "--out", base, "--resume", "--set", f"{key}={text}",
                        must_say=(key, f"saved {saved}", "given", "--weights"))
        assert "cannot change when a run is resumed" in error
        return
    asked = cfg.resolve(base=cfg.load_yaml(base / "config.yaml"), sets=[f"{key}={text}"],
                        flags={"resume": True, "out": str(base)})
    lines: list[str] = []
    plan = resume.plan_resume(asked, base, base / "checkpoints" / "step-000000008", log=lines.append)
    used = plan.to_dict()[section][name]
    given = asked.to_dict()[section][name]
    said = "\n".join(lines)
    assert key in said and str(saved) in said and str(given) in said, said
    # config.yaml is written from this plan: it never claims a value the run does not use
    assert used == (given if policy == "applied" else saved)


@pytest.mark.parametrize("scheduler", ["onecycle", "cosine"])
@pytest.mark.parametrize("flag", [("--epochs", "3"), ("--max-steps", "20")])
def test_a_new_length_is_refused_when_the_schedule_was_laid_out_for_the_old_one(run, scheduler, flag):
    saved = _saved(run)
    saved["train"]["scheduler"] = scheduler  # the run as a one-cycle/cosine run would have saved it
    (run / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    refused(run, "train", "--out", run, "--resume", *flag,
            must_say=("laid out for the old length", scheduler, "given " + flag[1], "steps then: 8",
                      "--extend-schedule restart", "--extend-schedule keep_end"))


def test_resume_applies_length_and_bookkeeping_ignores_start_weights_and_config_says_so(run):
    proc = tw("train", "--out", run, "--resume", "--epochs", "3", "--weights", "/nowhere/start.safetensors",
              "--set", "train.keep_last=3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "train.epochs changes from 2 to 3" in said and "train.keep_last changes from 2 to 3" in said
    assert "ignoring model.weights=/nowhere/start.safetensors" in said
    saved = _saved(run)
    assert saved["train"]["epochs"] == 3 and saved["train"]["keep_last"] == 3
    assert saved["model"]["weights"] is None and saved["train"]["resume"] is False
    assert (run / "checkpoints" / "step-000000012").is_dir()


def test_a_refused_setting_among_allowed_ones_refuses_the_whole_command(base):
    refused(base, "train", "--out", base, "--resume", "--epochs", "5", "--lr", "0.5", "--seed", "3",
            must_say=("train.lr: saved 0.001, given 0.5", "train.seed: saved 0, given 3"))


# ----------------------------------------------------------------------------- case 1: other data

@pytest.mark.parametrize("which", ["other", "same_size"])
def test_resume_on_other_data_is_refused_and_the_run_stays_resumable(run, data, which):
    error = refused(run, "train", "--out", run, "--resume", "--data", data[which],
                    must_say=("training data differ", str(data["own"]), str(data[which])))
    assert "split.json" in error or "meta.json" in error
    again = tw("train", "--out", run, "--resume", "--epochs", "3")
    assert again.returncode == 0, again.stderr
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["path"] == str(data["own"])


def test_other_data_for_a_run_without_split_files_is_refused_by_the_checkpoint_and_nothing_changes(run, data):
    # a run from before split.json/meta.json were kept: the Trainer's own comparison with the checkpoint
    # refuses, and it runs before the run files are written
    (run / "split.json").unlink()
    (run / "meta.json").unlink()
    refused(run, "train", "--out", run, "--resume", "--data", data["other"],
            must_say=("training data differ", "samples then/now"))


def test_moved_data_resume(run, data, tmp_path):
    moved = tmp_path / "moved.csv"
    shutil.copyfile(data["own"], moved)
    proc = tw("train", "--out", run, "--resume", "--data", moved, "--epochs", "3")
    assert proc.returncode == 0, proc.stderr
    assert _saved(run)["data"]["path"] == str(moved)


# ----------------------------------------------------------------------------- case 4: a wrong run directory

def _damage(run: Path, how: str) -> None:
    if how == "no config.yaml":
        (run / "config.yaml").unlink()
    elif how == "config.yaml is a folder":
        (run / "config.yaml").unlink()
        (run / "config.yaml").mkdir()
    elif how == "config.yaml is not YAML":
        (run / "config.yaml").write_text("train: [unclosed\n")
    elif how == "no checkpoints":
        shutil.rmtree(run / "checkpoints")
    elif how == "only an unfinished checkpoint":
        for marker in (run / "checkpoints").glob("*/COMPLETE"):
            marker.unlink()
    elif how == "checkpoints is a file":
        shutil.rmtree(run / "checkpoints")
        (run / "checkpoints").write_text("not a folder")
    elif how == "split.json is damaged":
        (run / "split.json").write_text("{not json")
    elif how == "every checkpoint cut short":
        for weights in (run / "checkpoints").glob("*/model.safetensors"):
            weights.write_bytes(weights.read_bytes()[:100])


RESUME_REFUSALS = {
    "no config.yaml": ("no config.yaml",),
    "config.yaml is a folder": ("a folder where torchwise writes a file", "config.yaml"),
    "config.yaml is not YAML": ("not valid YAML",),
    "no checkpoints": ("Nothing to resume",),
    "only an unfinished checkpoint": ("No checkpoint of this run can be read", "step-000000004",
                                      "step-000000008", "COMPLETE missing"),
    "checkpoints is a file": ("a file where torchwise keeps a folder",),
    "split.json is damaged": ("split.json is damaged",),
    "every checkpoint cut short": ("No checkpoint of this run can be read", "step-000000004", "step-000000008",
                                   "model.safetensors: 100 bytes"),
}


@pytest.mark.parametrize("how", RESUME_REFUSALS)
def test_resume_of_a_damaged_run_directory_is_refused(run, how):
    _damage(run, how)
    refused(run, "train", "--out", run, "--resume", must_say=RESUME_REFUSALS[how])


def test_resume_of_nothing(tmp_path):
    refused(tmp_path, "train", "--out", tmp_path / "never", "--resume", must_say=("Nothing to resume",))
    (tmp_path / "empty").mkdir()
    refused(tmp_path, "train", "--out", tmp_path / "empty", "--resume", must_say=("Nothing to resume",))


def test_a_new_run_into_a_run_directory_is_refused(run, data):
    args = ("train", "--data", data["own"], "--target", "label", "--out", run, "--epochs", "2", *FAST)
    refused(run, *args, must_say=("already holds a run", "step-000000008", "--resume"))
    shutil.rmtree(run / "checkpoints")  # a finished run whose checkpoints were deleted
    refused(run, *args, must_say=("already holds a finished run", "final"))


def test_a_run_stopped_before_its_first_checkpoint_starts_again(run, data):
    for name in ("checkpoints", "final", "best"):
        shutil.rmtree(run / name)
    assert tw("train", "--out", run, "--resume").returncode == 2  # nothing to resume ...
    proc = tw("train", "--data", data["own"], "--target", "label", "--out", run, "--epochs", "1", *FAST)
    assert proc.returncode == 0, proc.stderr  # ... and a new run is allowed there


def _bad_out(tmp_path: Path, how: str) -> tuple[Path, tuple[str, ...]]:
    afile = tmp_path / "afile"
    afile.write_text("x")
    return {
        "a regular file": (afile, ("names a file", "1 bytes")),
        "under a regular file": (afile / "run", ("inside a file", str(afile))),
        "deep under a regular file": (afile / "a" / "b", ("inside a file", str(afile))),
        "under /proc": (Path("/proc/torchwise-run"), ("cannot be created or written", "/proc")),
        "under a /proc file": (Path("/proc/self/status/run"), ("inside a file", "/proc/self/status")),
    }[how]


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("how", ["a regular file", "under a regular file", "deep under a regular file",
                                 "under /proc", "under a /proc file"])
def test_an_out_path_that_cannot_be_a_run_directory(tmp_path, data, how, resume):
    out, must_say = _bad_out(tmp_path, how)
    args = ("--resume",) if resume else ("--data", data["own"], "--target", "label")
    refused(tmp_path, "train", "--out", out, *args, must_say=must_say)


@pytest.mark.parametrize("name", ["final", "best", "tb"])
def test_a_file_where_the_run_keeps_a_folder(tmp_path, data, name):
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_text("x")
    refused(tmp_path, "train", "--data", data["own"], "--target", "label", "--out", out, *FAST,
            must_say=("a file where torchwise keeps a folder", name))


# ----------------------------------------------------------------------------- case 6: refused before any data are read

@pytest.fixture(scope="module")
def no_images(tmp_path_factory) -> Path:
    """Class folders with no images: scanning them fails, so an error about anything else came first."""
    root = tmp_path_factory.mktemp("no-images")
    for name in ("red", "green"):
        (root / name).mkdir()
    return root


BEFORE_THE_DATA = {
    "unknown model": (("--model", "resnet19"), ("Unknown model name", "resnet19", "did you mean", "resnet18")),
    "torchvision model for a CSV": (("--model", "resnet18", "--data", "CSV"), ("feature vectors", "resnet18")),
    "missing weights file": (("--weights", "/nowhere/w.safetensors"), ("--weights file does not exist",)),
    "missing data": (("--data", "/nowhere/data"), ("data path does not exist", "/nowhere/data")),
    "unknown device": (("--device", "tpu9"), ("device", "tpu9")),
    "zero epochs": (("--epochs", "0"), ("train.epochs", "0")),
    "text learning rate": (("--lr", "fast"), ("train.lr", "fast")),
    "unknown key": (("--set", "train.nope=1"), ("train.nope",)),
    "val fraction of 1.5": (("--val-fraction", "1.5"), ("data.val_fraction", "1.5")),
    "bad --set": (("--set", "train.lr"), ("section.key=value",)),
}


@pytest.mark.parametrize("case", BEFORE_THE_DATA)
def test_settings_are_refused_before_any_data_are_read_or_files_written(tmp_path, no_images, data, case):
    extra, must_say = BEFORE_THE_DATA[case]
    extra = tuple(str(data["own"]) if a == "CSV" else a for a in extra)
    data_args = () if "--data" in extra else ("--data", no_images)
    refused(tmp_path, "train", *data_args, "--out", tmp_path / "run", *extra, must_say=must_say)


def test_cuda_asked_for_without_one(tmp_path, no_images):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    refused(tmp_path, "train", "--data", no_images, "--out", tmp_path / "run", "--device", "cuda",
            must_say=("CUDA device was asked for",))


# ----------------------------------------------------------------------------- case 3: cut-short checkpoints

CUTS = {"empty": lambda n: 0, "7 bytes": lambda n: 7, "half": lambda n: n // 2, "one byte short": lambda n: n - 1}


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("file", ["model.safetensors", "state.pt"])
def test_a_cut_short_newest_checkpoint_is_passed_over_for_the_previous_one(run, file, cut):
    from torchwise.errors import CheckpointError
    from torchwise.train.state import checkpoint as ckpt

    newest = run / "checkpoints" / "step-000000008"
    content = (newest / file).read_bytes()
    (newest / file).write_bytes(content[:CUTS[cut](len(content))])
    size = (newest / file).stat().st_size
    warnings: list[str] = []
    assert ckpt.find_resume_checkpoint(True, run, warn=warnings.append) == run / "checkpoints" / "step-000000004"
    assert len(warnings) == 1 and "step-000000008" in warnings[0] and "step-000000004" in warnings[0]
    assert f"{file}: {size} bytes" in warnings[0]
    with pytest.raises(CheckpointError) as excinfo:  # named directly, it is refused, never half loaded
        ckpt.find_resume_checkpoint(newest, None)
    assert_clear_api_error(excinfo, str(newest), file)
    with pytest.raises(CheckpointError) as excinfo:
        ckpt.load_checkpoint(newest)
    assert_clear_api_error(excinfo, file, f"{size} bytes")


def test_resume_falls_back_past_a_cut_short_checkpoint_and_finishes(run):
    weights = run / "checkpoints" / "step-000000008" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    proc = tw("train", "--out", run, "--resume")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "step-000000008 is unreadable" in said and "previous good checkpoint step-000000004" in said
    assert "resumed from" in said and "step-000000004" in said
    from torchwise.train.state import checkpoint as ckpt

    # the run ends with a good newest checkpoint again (so a later resume does not warn)
    newest = ckpt.list_checkpoints(run / "checkpoints")[-1]
    assert newest.name == "step-000000008" and ckpt.unreadable_reason(newest) is None


# ----------------------------------------------------------------------------- case 4: writes that fail midway


def test_a_failed_checkpoint_write_cleans_up_and_names_the_good_one(tmp_path):
    import torch

    from torchwise.errors import TorchwiseError
    from torchwise.train.state import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    ckpt.save_checkpoint(root, 1, {"w": torch.ones(3)}, {"step": 1})
    pending = ckpt.begin_checkpoint(root, 2)
    (pending / "model.safetensors").mkdir()  # a folder where the weights file goes: the write fails
    before = tree_snapshot(root)
    with pytest.raises(TorchwiseError) as excinfo:
        ckpt.save_checkpoint(root, 2, {"w": torch.ones(3)}, {"step": 2}, pending)
    assert_clear_api_error(excinfo, "step-000000002", "latest good checkpoint", "step-000000001")
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["step-000000001"]
    assert not pending.exists() and set(tree_snapshot(root)) < set(before)


def test_an_atomic_write_that_fails_keeps_the_old_file(tmp_path):
    from torchwise.errors import TorchwiseError
    from torchwise import files

    target = tmp_path / "meta.json"
    target.write_text("old")
    with pytest.raises(TorchwiseError) as excinfo:
        with files.atomic_write_path(target) as tmp:
            tmp.mkdir()  # then writing a file there fails: IsADirectoryError
            tmp.write_text("new")
    assert_clear_api_error(excinfo, str(target))
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


# ----------------------------------------------------------------------------- case 5: file modes

def test_every_file_of_a_run_has_the_umask_mode(base):
    modes = {str(p.relative_to(base)): oct(p.stat().st_mode & 0o777) for p in base.rglob("*") if p.is_file()}
    assert set(modes.values()) == {"0o644"}, modes


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_checkpoint_and_weights_files_follow_the_umask(tmp_path, umask, mode):
    import torch

    from torchwise.train.state import checkpoint as ckpt
    from torchwise.weights import save_state_dict

    old = os.umask(umask)
    try:
        path = ckpt.save_checkpoint(tmp_path / "checkpoints", 3, {"w": torch.ones(2)}, {"step": 3})
        weights = save_state_dict({"w": torch.ones(2)}, tmp_path / "final" / "model.safetensors")
    finally:
        os.umask(old)
    for file in [*path.iterdir(), weights]:
        assert file.stat().st_mode & 0o777 == mode, (file, oct(file.stat().st_mode))


def test_a_checkpoint_moved_aside_for_a_resave_comes_back_when_the_process_died_between_renames(tmp_path):
    """save_checkpoint replaces a step saved again by renaming the old one to .old-NAME-PID first; a
    crash right then leaves that as the only copy: clean_stale restores it instead of deleting it."""
    import os

    import torch

    from torchwise.train.state import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    root.mkdir()
    saved = ckpt.save_checkpoint(root, 7, {"w": torch.ones(3)}, {"position": {"step": 7}})
    os.replace(saved, root / f".old-{saved.name}-12345")  # the state between the two renames
    assert ckpt.list_checkpoints(root) == []
    ckpt.clean_stale(root)
    assert [p.name for p in ckpt.list_checkpoints(root)] == [saved.name]
    weights, state = ckpt.load_checkpoint(saved)
    assert torch.equal(weights["w"], torch.ones(3)) and state["position"]["step"] == 7
    # an .old- copy whose step is there and complete is only a leftover: removed
    again = ckpt.save_checkpoint(root, 7, {"w": torch.zeros(3)}, {"position": {"step": 7}})
    (root / f".old-{again.name}-999").mkdir()
    ckpt.clean_stale(root)
    assert sorted(p.name for p in root.iterdir()) == [again.name]


# ----------------------------------------------------------------------------- outputs apart from inputs

@pytest.fixture
def colors(tmp_path) -> Path:
    from conftest import write_color_images

    root = tmp_path / "colors"
    write_color_images(root, 6, seed=0)
    return root


def _overlapping_out(tmp_path: Path, colors: Path, how: str) -> tuple[Path, Path, str]:
    """(out, data, what the refusal says) for each way --out and --data can overlap."""
    if how == "the same folder":
        return colors, colors, "--out is the data folder"
    if how == "a new folder inside the data":
        return colors / "runs" / "r1", colors, "--out lies inside the data folder"
    if how == "inside the data through a link":
        (tmp_path / "link").symlink_to(colors)
        return tmp_path / "link" / "run", colors, "--out lies inside the data folder"
    if how == "the data inside the run folder":
        return tmp_path, colors, "--out holds the data folder"
    if how == "a CSV file given as --out's parent":
        csv_file = tmp_path / "table.csv"
        csv_file.write_text("a,label\n1,x\n")
        return csv_file / "run", csv_file, "--out lies inside the data folder"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["the same folder", "a new folder inside the data", "inside the data through a link",
                                 "the data inside the run folder", "a CSV file given as --out's parent"])
def test_out_and_data_may_not_overlap_in_either_direction(tmp_path, colors, how):
    out, data, says = _overlapping_out(tmp_path, colors, how)
    refused(tmp_path, "train", "--data", data, "--out", out, "--epochs", "1", *FAST, must_say=(says, "--out"))


def test_a_run_folder_beside_the_data_is_allowed(tmp_path, colors):
    proc = tw("train", "--data", colors, "--out", tmp_path / "colors_run", "--epochs", "1", *FAST)
    assert proc.returncode == 0, proc.stderr


def test_a_run_folder_left_inside_the_data_is_never_a_class(tmp_path, colors):
    """A run folder that got into the data (an older version accepted --out inside --data) is outputs, not a
    class with no images: the scan skips it and says so, and the classes are the data's own."""
    from torchwise.data.imagefolder import scan_image_folder

    old_run = colors / "run1"
    (old_run / "checkpoints" / "step-000000004").mkdir(parents=True)
    (old_run / "config.yaml").write_text("data: {}\n")
    (old_run / "metrics.csv").write_text("epoch,step\n")
    (old_run / "final").mkdir()
    from PIL import Image
    Image.new("RGB", (8, 8)).save(old_run / "final" / "worst_0.png")   # a report's image is not a sample either
    found = scan_image_folder(colors, threads=1)
    assert found.class_names == ["blue", "green", "red"]
    assert all("run1" not in path for path, _ in found.train + found.val)
    assert not any("run1" in path for path, _ in found.skipped) or any(
        "torchwise run folder" in why for _, why in found.skipped)
