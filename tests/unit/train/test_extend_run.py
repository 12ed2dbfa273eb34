"""Extending a finished run (issue 28, item 4) and the run's clock across resumes (item 5), in-process.

A finished run resumed with more epochs continues from its last checkpoint: optimizer, schedule, RNG and
position kept. A step / plateau / no schedule goes on as it is; a onecycle or cosine schedule (laid out over
the run's length) goes on only as extend_schedule says ("restart" or "keep_end"), else the resume is refused
with both choices, and a restarted or held schedule resumes exactly after an interruption.
"""
from __future__ import annotations

import shutil

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import ConfigError


def make_data(n=64, seed=0):
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def trainer(out_dir, scheduler, epochs, **settings):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
    # momentum: the optimizer's state matters, so a run that lost it would train differently
    return torchwise.Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), train_data=make_data(),
                             val_data=make_data(16, seed=1), batch_size=16, epochs=epochs, scheduler=scheduler,
                             out_dir=out_dir, progress=False, checks=False, tensorboard=False, keep_last=50,
                             **settings)


def weights(t):
    return {k: v.clone() for k, v in t.model.state_dict().items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def lrs(result):
    return [round(row["lr"], 6) for row in result.history]


@pytest.mark.parametrize("scheduler", [None, "step", "plateau"])
def test_a_finished_run_extended_continues_as_if_it_had_been_planned_longer(tmp_path, scheduler):
    # step: StepLR's step size (epochs // 3) is 1 for both lengths, so the two runs have one schedule
    whole = trainer(tmp_path / "whole", scheduler, 3)
    whole.fit()
    first = trainer(tmp_path / "run", scheduler, 2)
    first.fit()
    longer = trainer(tmp_path / "run", scheduler, 3, resume=True)
    result = longer.fit()
    assert result.resumed_from.name == "step-000000008" and result.steps == 12 and result.epochs == 3
    # optimizer (momentum), schedule, dropout's RNG and the data order all went on: bit-identical weights
    assert same(weights(longer), weights(whole))


@pytest.mark.parametrize("scheduler", ["cosine", "onecycle"])
def test_a_laid_out_schedule_is_refused_with_both_choices_and_nothing_changes(tmp_path, scheduler):
    trainer(tmp_path, scheduler, 2).fit()
    before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    with pytest.raises(ConfigError) as info:
        trainer(tmp_path, scheduler, 3, resume=True).fit()
    text = str(info.value)
    assert "laid out for the old length" in text and f"scheduler: {scheduler}" in text
    assert "steps then: 8" in text and "steps now: 12" in text and "resuming at step: 8" in text
    assert "extend_schedule='restart'" in text and "extend_schedule='keep_end'" in text
    assert "optimizer, random state and position are the checkpoint's" in text
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before


def test_restart_lays_the_schedule_out_again_from_where_the_run_resumes(tmp_path):
    trainer(tmp_path, "cosine", 2).fit()
    longer = trainer(tmp_path, "cosine", 4, resume=True, extend_schedule="restart")
    result = longer.fit()
    # the cosine of the first 8 steps ended at 0; a new one over the 8 steps left starts at 0.1 again
    assert lrs(result) == [0.05, 0.0, 0.05, 0.0]
    assert longer.schedule.start_step == 8 and longer.schedule.total_steps == 8
    assert longer.optimizer.state  # the momentum buffers came back with the checkpoint


@pytest.mark.parametrize("scheduler,choice", [("cosine", "restart"), ("onecycle", "restart"),
                                              ("onecycle", "keep_end")])
def test_an_extended_run_interrupted_midway_resumes_exactly(tmp_path, scheduler, choice):
    """The schedule's layout is in every checkpoint: resumed without the choice, the run goes on as chosen."""
    trainer(tmp_path / "run", scheduler, 2).fit()
    extended = trainer(tmp_path / "run", scheduler, 4, resume=True, extend_schedule=choice)
    whole = extended.fit()
    whole_weights = weights(extended)
    # as if the process had died at step 12: only the checkpoints up to it are left
    for later in ("step-000000016",):
        shutil.rmtree(tmp_path / "run" / "checkpoints" / later)
    shutil.rmtree(tmp_path / "run" / "final")
    again = trainer(tmp_path / "run", scheduler, 4, resume=True)  # no extend_schedule: the checkpoint knows
    result = again.fit()
    assert result.resumed_from.name == "step-000000012"
    assert lrs(result) == lrs(whole)
    assert same(weights(again), whole_weights)


def test_keep_end_holds_the_last_learning_rate_past_the_planned_end(tmp_path):
    trainer(tmp_path, "onecycle", 2).fit()
    extended = trainer(tmp_path, "onecycle", 4, resume=True, extend_schedule="keep_end")
    result = extended.fit()  # one-cycle stepped past its total would raise; held, it does not
    end = 0.1 / 25 / 1e4  # torch's one-cycle ends at max_lr / div_factor / final_div_factor
    assert [row["lr"] for row in result.history[2:]] == pytest.approx([end, end])
    assert extended.schedule.scheduler.last_epoch == 8  # the planned length, not one step more
    assert extended.optimizer.param_groups[0]["lr"] == pytest.approx(end)


def test_extend_schedule_is_checked_at_construction():
    with pytest.raises(ConfigError) as info:
        torchwise.Trainer(nn.Linear(4, 2), train_data=make_data(), extend_schedule="restrat")
    assert "did you mean: restart" in str(info.value) and "keep_end" in str(info.value)


def test_the_layout_rule():
    from torchwise.train.recipes.schedule import resumed_layout

    # (first step, length, holds) saved, (first step, length) now, the step resumed at, the user's choice
    assert resumed_layout((0, 8, False), (0, 8), 8, None) == ("as_built", 0, 8)
    assert resumed_layout((8, 8, False), (0, 16), 12, None) == ("as_saved", 8, 8)
    assert resumed_layout((0, 8, False), (0, 16), 8, None)[0] == "refuse"
    assert resumed_layout((0, 8, False), (0, 16), 8, "restart") == ("restart", 8, 8)
    assert resumed_layout((0, 8, False), (0, 16), 8, "keep_end") == ("keep_end", 0, 8)
    assert resumed_layout((0, 8, True), (0, 24), 12, None) == ("keep_end", 0, 8)


def test_elapsed_time_and_the_step_timing_go_on_across_a_resume(tmp_path):
    first = trainer(tmp_path, None, 2, checkpoint_every=3)
    first.fit()
    rows = first.pos.history
    # as if the process had died at step 6 (mid-epoch 1): its checkpoint holds the clock and the step timing
    for later in ("step-000000008", "step-000000009"):
        shutil.rmtree(tmp_path / "checkpoints" / later, ignore_errors=True)
    shutil.rmtree(tmp_path / "final")
    from torchwise.train.state.checkpoint import read_state

    saved = read_state(tmp_path / "checkpoints" / "step-000000006")["position"]
    assert saved["elapsed_s"] >= rows[0]["elapsed_s"] and saved["timing"]["compute_s"] > 0
    again = trainer(tmp_path, None, 2, checkpoint_every=3, resume=True)
    result = again.fit()
    elapsed = [row["elapsed_s"] for row in result.history]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= saved["elapsed_s"]  # never back to 0
    assert again.pos.earlier_sessions_s == saved["elapsed_s"]
    last = result.history[-1]
    assert 0 < last["data_wait"] < 1 and last["samples_per_s"] > 0


def test_a_row_with_no_step_since_the_last_has_no_data_wait(tmp_path):
    """A checkpoint from before the step timing was kept, made at an epoch's end before its evaluation: the
    first row after the resume trained nothing in this process, so its share of data wait is unknown, not 1."""
    run = trainer(tmp_path, None, 1, checkpoint_every=4, eval_every=100)
    run.fit()
    # step 4 ends the epoch; remove the row it made, and the timing, as an old checkpoint would lack them
    path = tmp_path / "checkpoints" / "step-000000004" / "state.pt"
    state = torch.load(path, weights_only=True)
    for key in ("timing", "elapsed_s"):
        state["position"].pop(key, None)
    state["history"] = "[]"
    torch.save(state, path)
    shutil.rmtree(tmp_path / "final")
    again = trainer(tmp_path, None, 1, checkpoint_every=4, eval_every=100, resume=True)
    result = again.fit()
    assert len(result.history) == 1 and result.history[0]["step"] == 4
    assert result.history[0]["data_wait"] is None and result.history[0]["samples_per_s"] is None
