"""The Trainer's one settings tree: flat names, old names, the CLI's keys, the resolved config in every
checkpoint and the run directory, one monitor for the best weights and early stopping, callbacks."""
import inspect
import json

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import torchwise
from torchwise.errors import ConfigError, TorchwiseError
from torchwise.train.settings import ALIASES, FLAT, SECTIONS, LoopSettings, TrainerConfig, build_config


QUIET = dict(progress=False, checks=False, tensorboard=False)


def data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def test_the_constructor_has_few_named_parameters_and_takes_the_rest_as_settings():
    params = inspect.signature(torchwise.Trainer.__init__).parameters
    named = [p for p in params.values() if p.kind is not p.VAR_KEYWORD and p.name != "self"]
    assert len(named) <= 10
    t = torchwise.Trainer(mlp(), sgd, train_data=data(), max_epochs=3, batch_size=8, early_stopping=2,
                          val_data=data(seed=1), **QUIET)
    assert t.config.loop.epochs == 3 and t.config.loop.batch_size == 8
    assert t.max_epochs == t.epochs == 3  # the old name reads too
    assert isinstance(t.early_stopping, torchwise.EarlyStopping) and t.early_stopping.patience == 2


def test_flat_names_map_into_the_tree_and_sections_are_validated():
    config = build_config(None, dict(epochs=2, batch_size=4, precision="fp32", fast="tf32,compile", scheduler="none"))
    assert (config.loop.epochs, config.loop.batch_size, config.hardware.precision) == (2, 4, "fp32")
    assert config.speed.fast == ["tf32", "compile"] and config.optim.scheduler is None
    assert build_config({"loop": {"epochs": 5}}).epochs == 5
    assert TrainerConfig(loop=LoopSettings(batch_size=7)).batch_size == 7
    assert set(FLAT.values()) == set(SECTIONS)
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        LoopSettings(batch_size=0)


def test_an_unknown_setting_is_refused_with_did_you_mean():
    with pytest.raises(TorchwiseError) as excinfo:
        torchwise.Trainer(mlp(), sgd, train_data=data(), batch_sise=8, **QUIET)
    assert "batch_sise" in str(excinfo.value) and "did you mean: batch_size" in str(excinfo.value)
    with pytest.raises(TorchwiseError, match="loop.precision"):
        build_config({"loop": {"precision": "fp32"}})


def test_an_old_name_is_mapped_and_named_in_its_errors():
    assert ALIASES["max_epochs"] == "epochs"
    with pytest.raises(TorchwiseError) as excinfo:
        torchwise.Trainer(mlp(), sgd, train_data=data(), max_epochs=0, **QUIET)
    assert "max_epochs must be an integer >= 1" in str(excinfo.value)
    with pytest.raises(TorchwiseError, match="old name of epochs"):
        torchwise.Trainer(mlp(), sgd, train_data=data(), max_epochs=2, epochs=3, **QUIET)


def test_every_cli_train_key_is_a_trainer_setting_of_the_same_name_or_cli_only():
    import dataclasses

    from torchwise.run.trainer_setup import CLI_ONLY, trainer_settings
    from torchwise.config import RunConfig, TrainConfig

    for f in dataclasses.fields(TrainConfig):
        assert f.name in FLAT or f.name in CLI_ONLY, f"train.{f.name} is neither a Trainer setting nor CLI-only"
    run = RunConfig()
    config = build_config(None, trainer_settings(run, None))
    assert config.epochs == run.train.epochs and config.batch_size == run.train.batch_size
    assert config.logging.run_config == run.to_dict()


def test_a_python_api_checkpoint_and_the_run_directory_hold_the_whole_resolved_config(tmp_path):
    t = torchwise.Trainer(mlp(), sgd, train_data=data(), val_data=data(seed=1), epochs=2, batch_size=16,
                          out_dir=tmp_path, monitor="val_acc", **QUIET)
    t.fit()
    newest = sorted((tmp_path / "checkpoints").glob("step-*"))[-1]
    recorded = torch.load(newest / "state.pt", weights_only=True)["config"]
    on_disk = json.loads((tmp_path / "trainer_config.json").read_text())
    assert recorded == on_disk
    tree = recorded["trainer"]
    assert set(tree) == set(SECTIONS)
    assert tree["loop"]["epochs"] == 2 and tree["loop"]["batch_size"] == 16
    assert tree["eval"]["monitor"] == "val_acc" and tree["eval"]["mode"] == "max"  # resolved, not as given
    assert tree["checkpoint"]["out_dir"] == str(tmp_path)
    assert tree == t.config.to_dict()


def test_one_monitor_judges_the_best_weights_and_early_stopping():
    es = torchwise.EarlyStopping(patience=2, min_delta=0.01)
    t = torchwise.Trainer(mlp(), sgd, train_data=data(), val_data=data(seed=1), monitor="val_acc", mode="max",
                          early_stopping=es, **QUIET)
    assert es.judge is t.judge is t.best.monitor
    assert (t.judge.name, t.judge.mode, t.judge.min_delta) == ("val_acc", "max", 0.01)
    assert t.best.update(0.5, 1) and not t.best.update(0.505, 2) and t.best.update(0.52, 3)
    with pytest.raises(TorchwiseError, match="disagree on min_delta"):
        torchwise.Trainer(mlp(), sgd, train_data=data(), val_data=data(seed=1), min_delta=0.1,
                          early_stopping=torchwise.EarlyStopping(min_delta=0.2), **QUIET)


def test_callbacks_get_the_trainer_and_checkpoint_saved_names_it(tmp_path):
    seen = []

    class Counter:
        def __init__(self):
            self.steps = 0

        def on_step_end(self, trainer, **_):
            self.steps += 1

        def on_checkpoint_saved(self, trainer, step, path):
            seen.append((trainer, step, path))

        def state_dict(self):
            return {"steps": self.steps}

        def load_state_dict(self, state):
            self.steps = state["steps"]

    counter = Counter()
    t = torchwise.Trainer(mlp(), sgd, train_data=data(), epochs=1, batch_size=16, out_dir=tmp_path,
                          callbacks=[counter], **QUIET)
    t.fit()
    assert seen and all(trainer is t for trainer, _, _ in seen)
    state = torch.load(seen[-1][2] / "state.pt", weights_only=True)
    assert state["callbacks"] == {"Counter": {"steps": 4}}
    with pytest.raises(TorchwiseError, match="on_<event> methods"):
        torchwise.Trainer(mlp(), sgd, train_data=data(), callbacks=[object()], **QUIET)


def test_a_config_tree_trains_like_the_same_settings_by_name(tmp_path):
    by_name = torchwise.Trainer(mlp(), sgd, train_data=data(), val_data=data(seed=1), epochs=2, batch_size=16,
                                seed=3, **QUIET).fit()
    tree = TrainerConfig(loop=LoopSettings(epochs=2, batch_size=16, seed=3))
    by_tree = torchwise.Trainer(mlp(), sgd, train_data=data(), val_data=data(seed=1), config=tree, **QUIET).fit()
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("elapsed_s", "data_wait", "samples_per_s")}
                          for r in rows]  # noqa: E731
    assert strip(by_tree.history) == strip(by_name.history) and by_tree.steps == by_name.steps == 8


def test_a_stateful_callback_missing_from_the_checkpoint_starts_afresh_and_says_so(tmp_path, capsys):
    class Steps:
        def __init__(self):
            self.n = 0

        def on_step_end(self, **_):
            self.n += 1

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, state):
            self.n = state["n"]

    torchwise.Trainer(mlp(), sgd, train_data=data(), epochs=1, batch_size=16, out_dir=tmp_path, **QUIET).fit()
    steps = Steps()
    result = torchwise.Trainer(mlp(), sgd, train_data=data(), epochs=2, batch_size=16, out_dir=tmp_path,
                               resume=True, callbacks=[steps], **QUIET).fit()
    assert result.resumed_from is not None and steps.n == 4  # only the steps of this session
    assert "holds no state of callback 'Steps'" in capsys.readouterr().err
