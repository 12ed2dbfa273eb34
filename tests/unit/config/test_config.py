"""Typed run configuration: layers, validation, did-you-mean, round trip through config.yaml."""
from __future__ import annotations

import pytest
import yaml

from torchwise import config as cfg
from torchwise.errors import ConfigError


def test_layers_defaults_yaml_flags_set(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 0.01\n  epochs: 4\ndata:\n  hflip: false\n")
    config = cfg.resolve(config_file=path, flags={"epochs": "6", "batch_size": None},
                         sets=["train.lr=0.02", "train.max_steps=none"])
    assert config.train.lr == 0.02            # --set beats YAML
    assert config.train.epochs == 6           # a typed flag beats YAML
    assert config.train.batch_size == 64      # a flag left at None changes nothing
    assert config.data.hflip is False         # YAML beats the default
    assert config.train.max_steps is None


def test_values_are_converted_to_the_field_types():
    config = cfg.resolve(sets=["data.num_workers=2", "output.progress=false", "train.clip_grad_norm=1",
                               "train.max_steps=1e3", "data.image_size=none", "train.device=cuda:1"])
    assert config.data.num_workers == 2 and config.output.progress is False
    assert config.train.clip_grad_norm == 1.0 and isinstance(config.train.clip_grad_norm, float)
    assert config.train.max_steps == 1000 and config.train.device == "cuda:1"
    assert cfg.resolve(sets=["data.num_workers=auto"]).data.num_workers == "auto"


def test_unknown_key_names_key_value_allowed_and_guess():
    with pytest.raises(ConfigError) as info:
        cfg.resolve(sets=["train.lrr=0.1"])
    error = info.value
    assert error.values["key"] == "train.lrr" and error.values["value"] == "0.1"
    assert "train.lr" in error.values["allowed"] and error.values["did you mean"] == "train.lr"
    with pytest.raises(ConfigError) as info:
        cfg.resolve(sets=["trian.epochs=3"])
    assert info.value.values["did you mean"] == "train.epochs"


def test_bad_values_are_rejected_with_allowed_values():
    with pytest.raises(ConfigError) as info:
        cfg.resolve(sets=["train.precision=fp8"])
    assert "'bf16'" in info.value.values["allowed"]
    with pytest.raises(ConfigError) as info:
        cfg.resolve(sets=["data.missing=impte"])
    assert info.value.values["did you mean"] == "impute"
    with pytest.raises(ConfigError, match="out of range"):
        cfg.resolve(sets=["data.val_fraction=1.5"])
    with pytest.raises(ConfigError, match="out of range"):
        cfg.resolve(flags={"batch_size": "0"})
    with pytest.raises(ConfigError):
        cfg.resolve(sets=["train.epochs=2.5"])
    with pytest.raises(ConfigError, match="section.key=value"):
        cfg.resolve(sets=["train.lr"])


def test_yaml_is_validated_too(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  epochs: many\n")
    with pytest.raises(ConfigError) as info:
        cfg.resolve(config_file=path)
    assert info.value.values["key"] == "train.epochs"
    path.write_text("modle:\n  name: resnet18\n")
    with pytest.raises(ConfigError) as info:
        cfg.resolve(config_file=path)
    assert info.value.values["did you mean"] == "model"
    path.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        cfg.resolve(config_file=path)
    with pytest.raises(ConfigError, match="not found"):
        cfg.resolve(config_file=tmp_path / "missing.yaml")


def test_yaml_bool_is_not_a_number(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  epochs: true\n")
    with pytest.raises(ConfigError):
        cfg.resolve(config_file=path)


def test_sections_built_in_python_are_validated():
    with pytest.raises(ConfigError):
        cfg.TrainConfig(lr="fast")
    with pytest.raises(ConfigError):
        cfg.DataConfig(val_fraction=0.0)
    with pytest.raises(TypeError):
        cfg.TrainConfig(0.1)  # keyword-only


def test_saved_config_round_trips(tmp_path):
    config = cfg.resolve(flags={"data": "images", "lr": "0.05"}, sets=["model.name=resnet18"])
    path = config.save(tmp_path / "run" / "config.yaml")
    assert yaml.safe_load(path.read_text())["train"]["lr"] == 0.05
    assert cfg.load_yaml(path) == config


def test_describe_lists_every_key():
    text = cfg.describe()
    for key in ("data.path", "model.weights", "train.checkpoint_every", "output.report"):
        assert key in text
