"""Fallbacks that fire (issue 27, class 7): a newest checkpoint that cannot be loaded, for any reason, is
passed over for the newest one that loads, with a warning that names it and says why; it is never deleted
or renamed; when none loads, one error lists each checkpoint with its reason.

The checkpoints are real ones, from a real 2-epoch CSV run (testkit.rundir_runs: step-4 and step-8), resumed
through the CLI in this process (`tw`) or through the Trainer. A state.pt holding a pickled object that the
safe unpickler refuses is never run: its object would create a file if it were.
"""
from __future__ import annotations

import builtins
import shutil
from pathlib import Path

import pytest

from conftest import assert_clear_api_error, tree_snapshot
from testkit.rundir_runs import base, data, refused, run, tw  # noqa: F401  (fixtures)


class Planted:
    """A pickled object whose unpickling would create `path` (torch.save pickles it by its reduce)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return builtins.open, (str(self.path), "w")


def _state(checkpoint: Path) -> dict:
    import torch

    return torch.load(checkpoint / "state.pt", map_location="cpu", weights_only=True)


def _save_state(checkpoint: Path, state: object) -> None:
    import torch

    torch.save(state, checkpoint / "state.pt")


def _weights_of_another_shape(checkpoint: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(checkpoint / "model.safetensors"))
    first = sorted(weights)[0]
    weights[first] = __import__("torch").zeros(*(n + 1 for n in weights[first].shape))
    save_file(weights, str(checkpoint / "model.safetensors"))


def _damaged_header(checkpoint: Path) -> None:
    file = checkpoint / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[8:24] = b"#" * 16  # the JSON header's first bytes: same size, no longer JSON
    file.write_bytes(bytes(data))


def _optimizer_of_another_model(checkpoint: Path) -> None:
    state = _state(checkpoint)
    state["optimizer"]["param_groups"][0]["params"] = [0]
    _save_state(checkpoint, state)


def _without(key: str):
    def damage(checkpoint: Path) -> None:
        state = _state(checkpoint)
        del state[key]
        _save_state(checkpoint, state)
    return damage


# damage -> what the warning says of it
DAMAGE = {
    "planted pickle in state.pt": (lambda c: _save_state(c, {**_state(c), "planted": Planted(c.parent.parent / "RAN")}),
                                   "refused by the safe unpickler"),
    "state.pt missing": (lambda c: (c / "state.pt").unlink(), "state.pt missing"),
    "model.safetensors missing": (lambda c: (c / "model.safetensors").unlink(), "model.safetensors missing"),
    "COMPLETE missing": (lambda c: (c / "COMPLETE").unlink(), "COMPLETE missing"),
    "state.pt is not a torch file": (lambda c: (c / "state.pt").write_bytes(b"\x80\x04K\x01." * 40),
                                     "state.pt"),
    "state.pt holds a list": (lambda c: _save_state(c, [1, 2, 3]), "not the checkpoint's dict"),
    "weights header damaged": (_damaged_header, "model.safetensors"),
    "weights of another shape": (_weights_of_another_shape, "do not fit this model"),
    "optimizer of another model": (_optimizer_of_another_model, "ValueError"),
    "state without its random streams": (_without("rng_per_rank"), "KeyError"),
    "state without its data record": (_without("data"), "KeyError"),
}


def _newer_copy(run: Path) -> Path:
    """checkpoints/step-000000012: a copy of step-8, newer than the run's end (so that resuming from step-8
    trains nothing and the damaged copy can be seen left as it is afterwards)."""
    newer = run / "checkpoints" / "step-000000012"
    shutil.copytree(run / "checkpoints" / "step-000000008", newer)
    return newer


@pytest.mark.parametrize("how", DAMAGE)
def test_a_newest_checkpoint_that_does_not_load_is_passed_over_said_and_left_as_it_is(run, how):
    damage, reason = DAMAGE[how]
    newer = _newer_copy(run)
    damage(newer)
    kept = tree_snapshot(newer)
    proc = tw("train", "--out", run, "--resume")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "Traceback" not in said
    warning = next((line for line in said.splitlines() if "step-000000012 is unreadable" in line), None)
    assert warning is not None, said
    assert reason in warning and "resuming from the previous good checkpoint step-000000008" in warning, warning
    assert "left as it is" in warning
    assert tree_snapshot(newer) == kept, "the checkpoint passed over was changed, moved or deleted"
    assert not (run / "RAN").exists()


def test_a_planted_pickle_is_never_run_and_the_run_continues_exactly_from_the_checkpoint_before(run, base):
    """The newest checkpoint (step-8) holds an object that would create a file when unpickled: it is refused
    (the file is never made), the run resumes from step-4 and ends with the uninterrupted run's weights."""
    import torch
    from safetensors.torch import load_file

    marker = run.parent / "RAN"
    newest = run / "checkpoints" / "step-000000008"
    _save_state(newest, {**_state(newest), "planted": Planted(marker)})
    with pytest.raises(Exception) as excinfo:  # the object is real: an unsafe load would run it
        torch.load(newest / "state.pt", weights_only=True)
    assert "weights_only" in str(excinfo.value) or "Weights only" in str(excinfo.value)
    assert not marker.exists()
    proc = tw("train", "--out", run, "--resume")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "step-000000008 is unreadable" in said and "refused by the safe unpickler" in said, said
    assert "previous good checkpoint step-000000004" in said
    assert not marker.exists(), "the pickled object was run"
    resumed = load_file(str(run / "final" / "model.safetensors"))
    uninterrupted = load_file(str(base / "final" / "model.safetensors"))
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_weights_of_another_shape_in_the_newest_checkpoint_fall_back_and_train_on(run, base):
    import torch
    from safetensors.torch import load_file

    _weights_of_another_shape(run / "checkpoints" / "step-000000008")
    proc = tw("train", "--out", run, "--resume")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "step-000000008 is unreadable" in said and "do not fit this model" in said, said
    resumed = load_file(str(run / "final" / "model.safetensors"))
    uninterrupted = load_file(str(base / "final" / "model.safetensors"))
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


def test_when_no_checkpoint_loads_one_error_lists_each_and_nothing_changes(run):
    marker = run.parent / "RAN"
    old, newest = run / "checkpoints" / "step-000000004", run / "checkpoints" / "step-000000008"
    _save_state(newest, {**_state(newest), "planted": Planted(marker)})
    _weights_of_another_shape(old)
    text = refused(run, "train", "--out", run, "--resume",
                   must_say=("No checkpoint of this run can be read or loaded", "step-000000008",
                             "refused by the safe unpickler", "step-000000004", "nothing was deleted"))
    assert "do not fit this model" in text or "step-000000004" in text
    assert not marker.exists()


def test_a_named_checkpoint_that_does_not_load_is_refused_not_replaced(run):
    from torchwise.errors import CheckpointError
    from torchwise.train.state import checkpoint as ckpt

    newest = run / "checkpoints" / "step-000000008"
    (newest / "state.pt").unlink()
    with pytest.raises(CheckpointError) as excinfo:
        ckpt.find_resume_checkpoint(newest, None)
    assert_clear_api_error(excinfo, "cannot be read", str(newest), "state.pt missing")
    # the run folder itself: the one before is taken, and the damaged one stays
    assert ckpt.find_resume_checkpoint(run, None, warn=None) == run / "checkpoints" / "step-000000004"
    assert newest.is_dir() and ckpt.clean_stale(run / "checkpoints") == [] and newest.is_dir()


def test_a_damaged_checkpoint_is_not_pruned_nor_cleaned_away(tmp_path):
    """Pruning counts loadable checkpoints only and leaves a damaged one; clean_stale removes only the
    leftovers of its own writes (.tmp-, .old-), never a step-N folder."""
    import torch

    from torchwise.train.state import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        ckpt.save_checkpoint(root, step, {"w": torch.ones(2)}, {"step": step})
    (root / "step-000000002" / "state.pt").write_bytes(b"not a torch file")
    ckpt.save_checkpoint(root, 4, {"w": torch.ones(2)}, {"step": 4})
    ckpt.prune(root, keep_last=2)
    assert sorted(p.name for p in root.iterdir()) == ["step-000000002", "step-000000003", "step-000000004"]
    (root / "step-000000003" / "COMPLETE").unlink()
    (root / ".tmp-step-000000009").mkdir()
    assert ckpt.clean_stale(root) == [".tmp-step-000000009"]
    assert sorted(p.name for p in root.iterdir()) == ["step-000000002", "step-000000003", "step-000000004"]


def test_the_python_api_falls_back_past_a_planted_pickle(tmp_path, capsys):
    """Trainer(resume=True): the stage peek and the load both pass over the refused state (never run it)."""
    import torch
    from torch import nn

    from torchwise import Trainer

    def trainer(epochs: int) -> Trainer:
        torch.manual_seed(0)
        x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
        return Trainer(nn.Linear(4, 3), train_data=(x, y), out_dir=tmp_path / "run", epochs=epochs, batch_size=16,
                       progress=False, checks=False, tensorboard=False, resume=True)

    trainer(2).fit()
    checkpoints = tmp_path / "run" / "checkpoints"
    assert [p.name for p in sorted(checkpoints.iterdir())] == ["step-000000004", "step-000000008"]
    newer = checkpoints / "step-000000012"
    shutil.copytree(checkpoints / "step-000000008", newer)
    _save_state(newer, {**_state(newer), "planted": Planted(tmp_path / "RAN")})
    capsys.readouterr()
    result = trainer(3).fit()
    err = capsys.readouterr().err
    assert result.resumed_from == checkpoints / "step-000000008", err
    assert "step-000000012 is unreadable" in err and "refused by the safe unpickler" in err, err
    assert result.steps == 12 and not (tmp_path / "RAN").exists()
