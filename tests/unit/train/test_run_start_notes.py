"""The lines a run starts with say what is true: whether the model's initial weights came from a seeded torch
(a model built before any seeding differs in every process, whatever seed= says), and which kernels the
deterministic setting the user wrote puts in effect, in the words they wrote it with."""
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise

NOTE = "torch's random generator was not seeded before the model was built"


def data():
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x.sum(1) > 0).long())


def trainer(model=None, **settings):
    model = model if model is not None else nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return torchwise.Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), train_data=data(), max_steps=1,
                             batch_size=16, **settings)


@pytest.fixture
def unseeded_torch():
    """torch's generator as a fresh process has it: seeded from the OS (torch.seed() does just that)."""
    state = torch.get_rng_state()
    torch.seed()
    yield
    torch.set_rng_state(state)


def test_a_model_built_from_an_unseeded_torch_is_named_with_the_fix(unseeded_torch, capsys):
    # the pattern: the model first, then Trainer(seed=...); its initial weights differ in every process
    trainer(seed=3).fit()
    err = capsys.readouterr().err
    assert NOTE in err, err
    assert "torchwise.seed_everything(3) before building the model" in err, err


def test_no_note_after_seed_everything_and_the_same_weights_twice(unseeded_torch, capsys):
    def run():
        torchwise.seed_everything(0)
        t = trainer()
        t.fit()
        return t.model[0].weight.detach().clone()

    first, second = run(), run()
    assert NOTE not in capsys.readouterr().err
    assert torch.equal(first, second)


def test_no_note_without_a_console(unseeded_torch, capsys):
    trainer(progress=False).fit()
    assert NOTE not in capsys.readouterr().err


def test_the_determinism_line_names_the_python_setting_and_what_is_in_effect():
    t = trainer(progress=False)
    t.fit()
    assert t.determinism_note == ("deterministic=None (the default): fast kernels (deterministic=True for "
                                  "bit-reproducible ones)")
    t = trainer(progress=False, deterministic=True)
    t.fit()
    assert t.determinism_note == "deterministic=True: deterministic algorithms on"


def test_the_determinism_line_of_a_cli_run_says_what_its_config_yaml_says(capsys):
    # the CLI gives the Trainer its RunConfig (run_config) and train.deterministic (config.yaml: false)
    t = trainer(deterministic=False, run_config={"train": {"deterministic": False}})
    t.fit()
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("torchwise: device"))
    assert "train.deterministic=false: fast kernels (--set train.deterministic=true for bit-reproducible ones)" \
        in line, line
    assert "deterministic=True" not in line, line
