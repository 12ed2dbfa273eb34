"""Judgement of the checker's detectors on real scripts: verdicts need evidence that supports them.

Each test runs zoo scripts (tests/check_zoo) under the real Watcher, as `torchwise check` does, and
looks at what a finding must (or must not) be, and at what the detectors say they could not judge
(`undecided`). The classes:

1. gradient sizes judged against the loss's scale and the optimizer (a summed loss is not exploding);
2. an adversarial pair (GAN) is recognised: no loss-not-decreasing, adding two losses is not retention;
3. a verdict needs a window that holds it: a slow start in a long epoch is "could not judge";
4. dead ReLUs are judged over several batches (batch size 1);
5. accumulation without dividing is recognised by the inputs, with no DataLoader;
6. a scheduler sized in optimizer steps and stepped per batch is fine; one sized in epochs is not;
7. lr-too-low needs its own evidence and is not a second cause of a loss flat for another reason.
"""
from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
from pathlib import Path

import pytest
import torch

from torchwise.diagnose.checks import loss_curve
from torchwise.diagnose.checks import model as model_checks
from torchwise.diagnose.checks import optim as optim_checks
from torchwise.script_check.runner import run_script
from torchwise.diagnose.watch import StopScript, Watcher
from conftest import TESTS_DIR


ZOO = TESTS_DIR / "check_zoo"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def watch_script(path: Path, max_steps: int = 300) -> Watcher:
    """run_script's run, keeping the Watcher (for undecided())."""
    w = Watcher(check_mode=True, max_steps=max_steps)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    w.attach()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(path), run_name="__main__")
    except StopScript:
        pass
    finally:
        w.detach()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return w


def ids_of(path: Path) -> list[str]:
    with contextlib.redirect_stdout(io.StringIO()):
        result = run_script(str(path), [])
    assert result.error is None, result.traceback
    return [f.id for f in result.findings if f.severity != "info"]


def undecided(w) -> dict[str, str]:
    return optim_checks.undecided(w) | model_checks.undecided(w)


# ----------------------------------------------------------------------------- 1. loss scale, optimizer

def test_summed_loss_with_adam_is_not_exploding():
    w = watch_script(ZOO / "correct" / "vae_sum_reduction.py")
    assert [f.id for f in w.findings()] == []
    ex = optim_checks.jstate(w)["exploding"]
    # tens of times the weights' norm, but a fraction of the loss's (summed over 128 samples) scale
    assert ex["rel"] > 10 and ex["rel_per_loss"] < 1 and not ex["big"]


def test_summed_loss_with_sgd_is_not_exploding():
    assert ids_of(ZOO / "correct" / "sgd_sum_reduction.py") == []


def test_real_explosion_still_caught_with_its_symptom():
    w = watch_script(ZOO / "buggy" / "rnn_exploding.py")
    f = next(f for f in w.findings() if f.id == "exploding-gradients")
    assert f.evidence["symptom"]


# ----------------------------------------------------------------------------- 2. GANs

def test_dcgan_style_loop_has_no_finding_and_loss_trend_is_not_judged():
    w = watch_script(ZOO / "correct" / "dcgan_two_backwards.py")
    assert [f.id for f in w.findings()] == []
    assert optim_checks.adversarial_pair(w) is not None
    assert "adversarial" in undecided(w).get("loss-not-decreasing", "")


def test_running_total_of_losses_still_retains_graph():
    assert "loss-retains-graph" in ids_of(ZOO / "buggy" / "running_loss_tensor.py")


def test_adding_two_losses_of_one_step_is_not_retention():
    w = Watcher(check_mode=True)
    w.attach()
    try:
        lin = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        total = 0.0
        for step in range(4):
            opt.zero_grad()
            a = lin(torch.randn(4, 3)).pow(2).mean()
            b = lin(torch.randn(4, 3)).abs().mean()
            a.backward()
            b.backward()
            shown = a + b                   # kept for printing: not retention
            opt.step()
        assert not w.hits.get("loss-retains-graph")
        for step in range(3):
            opt.zero_grad()
            loss = lin(torch.randn(4, 3)).pow(2).mean()
            loss.backward()
            total = total + loss            # a running total across steps: retention
            opt.step()
    finally:
        w.detach()
    assert w.hits.get("loss-retains-graph"), shown


# ----------------------------------------------------------------------------- 3. windows too short

def test_slow_start_of_a_long_epoch_is_not_judged():
    w = watch_script(ZOO / "correct" / "long_epoch_slow_start.py")
    assert [f.id for f in w.findings()] == []
    why = undecided(w).get("loss-not-decreasing", "")
    assert "stopped after" in why and "slow start" in why, why


def test_clearly_flat_loss_is_still_judged():
    assert "loss-not-decreasing" in ids_of(ZOO / "buggy" / "shuffled_separately.py")


_SGD_RUN = """
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
if SHUFFLED:
    y = y[torch.randperm(len(y))]  # labels out of step with the images: nothing to learn
model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
for step in range(STEPS):
    idx = torch.randint(0, len(y), (64,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
    opt.step()
"""


@pytest.mark.parametrize("steps, shuffled, severity", [(40, False, None), (40, True, "info"),
                                                       (300, True, "warning")])
def test_a_whole_run_too_short_to_tell_a_slow_start_is_a_hint(tmp_path, steps, shuffled, severity):
    """Plain SGD at lr 0.01 sits near chance for its first tens of steps on a working setup: a whole run of 40
    steps cannot tell that from a run that learns nothing (labels shuffled), so either is a hint; 300 steps of the
    broken one are the harm itself."""
    path = tmp_path / "short.py"
    path.write_text(_SGD_RUN.replace("SHUFFLED", str(shuffled)).replace("STEPS", str(steps)))
    with contextlib.redirect_stdout(io.StringIO()):
        result = run_script(str(path), [], max_steps=0)
    flat = [f.severity for f in result.findings if f.id == "loss-not-decreasing"]
    assert flat == ([severity] if severity else []), [f.render() for f in result.findings]


def test_trend_separates_noise_from_progress():
    g = torch.Generator().manual_seed(0)
    noise = (torch.randn(300, generator=g) * 0.1).tolist()
    flat = [2.3 + e for e in noise]
    slow = [2.31 - 0.0002 * i + e for i, e in enumerate(noise)]
    b, se, m = loss_curve.trend(flat)
    assert max(0.0, -(b - 2 * se)) * m < 0.03 * 2.3       # clearly no progress
    b, se, m = loss_curve.trend(slow)
    assert max(0.0, -(b - 2 * se)) * m >= 0.03 * 2.3      # progress cannot be ruled out


# ----------------------------------------------------------------------------- 4. dead ReLU, batch size 1

def test_dead_relu_judged_with_batch_size_one():
    assert "dead-relu" in ids_of(ZOO / "buggy" / "dead_relu_batch_of_one.py")


# ----------------------------------------------------------------------------- 5. accumulation, no loader

def test_unscaled_accumulation_with_get_batch_is_caught():
    assert "accumulation-unscaled" in ids_of(ZOO / "buggy" / "accumulate_get_batch_unscaled.py")


def test_gan_with_sampled_batches_is_not_accumulation():
    ids = ids_of(ZOO / "correct" / "gan_sampled_batches.py")
    assert ids == []


# ----------------------------------------------------------------------------- 6. schedulers

def test_cosine_sized_in_steps_stepped_per_batch_is_fine():
    assert ids_of(ZOO / "correct" / "cosine_total_steps_per_batch.py") == []


# ----------------------------------------------------------------------------- 7. symptoms are not causes

def test_softmax_flat_loss_is_not_also_lr_too_low():
    ids = ids_of(ZOO / "buggy" / "softmax_in_model_sgd.py")
    assert "softmax-before-loss" in ids and "lr-too-low" not in ids


def test_optimizer_kinds():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert optim_checks.opt_kind(torch.optim.AdamW(p)) == "adaptive"
    assert optim_checks.opt_kind(torch.optim.RMSprop(p)) == "adaptive"
    assert optim_checks.opt_kind(torch.optim.Adagrad(p)) == "adaptive"
    assert optim_checks.opt_kind(torch.optim.SGD(p, lr=0.1)) == "sgd"


def _sched(kind, horizon, batches, calls, collapse_at):
    from torchwise.diagnose.probes import SchedulerCalls
    rec = SchedulerCalls(kind, horizon, where="train.py:1")
    rec.per_pass = {0: min(calls, batches)}
    rec.pass_len = {0: batches}
    rec.calls, rec.collapse_at = calls, collapse_at
    rec.lr_first, rec.lr_last = 0.1, 1e-4 if collapse_at else 0.05
    return rec


@pytest.mark.parametrize("kind,horizon,batches,calls,collapse_at,flagged", [
    ("StepLR", 30, 1000, 1000, 60, True),                 # step_size=30 meant as epochs, 1000 batches an epoch
    ("CosineAnnealingLR", 3000, 1000, 3000, 2990, False),  # T_max = epochs * len(loader): ends with the run
    ("CosineAnnealingLR", 3000, 1000, 300, None, False),   # stopped early: not spent within what was seen
    ("ExponentialLR", 90, 50, 500, 90, True),             # spent in the first fifth of the run
    ("MultiStepLR", 2400, 1000, 3000, 2400, False),        # milestones in steps, last one near the end
])
def test_scheduler_length_against_the_run(kind, horizon, batches, calls, collapse_at, flagged):
    from torchwise.diagnose.checks.calls import _per_batch_scheduler
    assert (_per_batch_scheduler(_sched(kind, horizon, batches, calls, collapse_at)) is not None) == flagged


def test_console_scripts_are_never_the_line_a_finding_is_about_and_classes_are_named():
    import os
    import sysconfig

    from torchwise.diagnose.checks.losses import class_label
    from torchwise.diagnose.user_code import is_user_file

    script = os.path.join(sysconfig.get_paths()["scripts"], "torchwise")
    assert not is_user_file(script)
    assert is_user_file(__file__)
    assert class_label(1, ["cat", "dog"]) == "class 1 ('dog')"
    assert class_label(1, None) == "class 1" and class_label(1, ["0", "1"]) == "class 1"


_ADAM_TINY_LR = """
import torch
import torch.nn as nn
torch.manual_seed(0)
X = torch.randn(4096, 10)
y = X @ torch.randn(10)
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-7)
for step in range(STEPS):
    idx = torch.randint(0, len(y), (32,))
    opt.zero_grad()
    nn.functional.mse_loss(model(X[idx]).squeeze(-1), y[idx]).backward()
    opt.step()
"""


def test_lr_too_low_needs_a_run_long_enough_to_show_the_stall(tmp_path):
    """Tiny updates and a flat loss over 40 steps are what a warm-up or a fine-tuning rate looks like too: a hint;
    over the zoo script's 189 steps (the same rate) the stall is the harm."""
    path = tmp_path / "tiny_lr.py"
    path.write_text(_ADAM_TINY_LR.replace("STEPS", "40"))
    for script, severity in ((path, "info"), (ZOO / "buggy" / "adam_lr_too_low.py", "warning")):
        with contextlib.redirect_stdout(io.StringIO()):
            result = run_script(str(script), [], max_steps=0)
        low = [f.severity for f in result.findings if f.id == "lr-too-low"]
        assert low == [severity], (script.name, [f.render() for f in result.findings])


_DEEP_SIGMOID = """
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
layers = [nn.Linear(64, 64), nn.Sigmoid()]
for _ in range(9):
    layers += [nn.Linear(64, 64)] + ([nn.LayerNorm(64)] if NORM else []) + [nn.Sigmoid()]
model = nn.Sequential(*layers, nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(150):
    idx = torch.randint(0, len(y), (64,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
    opt.step()
"""


def test_vanishing_gradients_is_a_hint_where_normalisation_makes_weights_scale_invariant(tmp_path):
    """The first layer's gradient relative to its weights is tiny in a deep sigmoid stack; with LayerNorm after
    each layer the weights are scale-invariant and that ratio no longer says the layer stops learning."""
    seen = {}
    for norm in (False, True):
        path = tmp_path / f"sigmoid_{norm}.py"
        path.write_text(_DEEP_SIGMOID.replace("NORM", str(norm)))
        with contextlib.redirect_stdout(io.StringIO()):
            result = run_script(str(path), [], max_steps=0)
        seen[norm] = [f.severity for f in result.findings if f.id == "vanishing-gradients"]
    assert seen[False] == ["warning"], seen
    assert seen[True] in ([], ["info"]), seen


def test_layers_built_inside_forward_are_named_as_such():
    """Layers made anew at every forward are not 'kept in a list': the finding says they are built inside forward()
    (held nowhere in the model, a new object of the same kind call after call), and the fix says where they belong."""
    with contextlib.redirect_stdout(io.StringIO()):
        result = run_script(str(ZOO / "buggy" / "layer_built_inside_forward.py"), [])
    f = next(f for f in result.findings if f.id == "unregistered-submodules")
    assert f.evidence["built_in_forward"] is True and "built inside forward()" in f.message, f.render()
    assert "__init__" in f.fix
