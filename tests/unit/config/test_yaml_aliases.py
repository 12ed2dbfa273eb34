"""YAML that grows through its aliases ("billion laughs") is refused, with a clear error, by every reader of
YAML torchwise has: --config files (and a run folder's config.yaml, read the same way on --resume), --space
files, the file lr-find --apply edits. Small, harmless aliases keep working."""
from __future__ import annotations

import pytest
import yaml

from torchwise import config as cfg
from torchwise import safe_yaml
from torchwise.cli.lr_find_command import apply_lr
from torchwise.errors import ConfigError
from torchwise.tune.space import load_space


def laughs(levels: int, under: str = "train:\n  lr: ") -> str:
    """Nine aliases of nine aliases ...: `levels` of them expand to 9**levels strings, in a few hundred bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\n{under}*a{levels - 1}\n"


def test_the_billion_laughs_config_is_refused_before_it_expands(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(9))  # 9**9 = 387 million strings once expanded
    assert len(path.read_bytes()) < 1300
    with pytest.raises(ConfigError) as info:
        cfg.load_yaml(path)
    text = str(info.value)
    assert str(path) in text and "aliases" in text and "fix:" in text


@pytest.mark.parametrize("levels", [6, 7])
def test_smaller_laughs_past_the_bound_are_refused_too(tmp_path, levels):
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(levels))  # 9**6 = 531,441 values: past the bound, though it would fit in memory
    with pytest.raises(ConfigError, match="expands to more than"):
        cfg.load_yaml(path)


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("train: &t\n  lr: 0.01\n  more: *t\n")
    with pytest.raises(ConfigError, match="contains itself"):
        cfg.load_yaml(path)


def test_a_small_harmless_alias_keeps_working(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  epochs: &n 3\n  early_stopping: *n\n  lr: 0.02\n")
    config = cfg.load_yaml(path)
    assert config.train.epochs == 3 and config.train.early_stopping == 3 and config.train.lr == 0.02


def test_aliases_shared_widely_but_small_are_counted_once_per_use():
    # 50 uses of one 100-value list: 5,000 values in all, well under the bound, and counted in linear time
    text = "base: &b [" + ",".join(["1"] * 100) + "]\n" + "".join(f"k{i}: *b\n" for i in range(50))
    data = safe_yaml.load(text, source="inline")
    assert len(data) == 51 and data["k7"] == [1] * 100
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    assert 5_000 < safe_yaml.expanded_size(node, 10**9) < 6_000


def test_a_search_space_file_with_laughs_is_refused(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(laughs(8, under="train.lr: "))
    with pytest.raises(ConfigError, match="expands to more than"):
        load_space(path)


def test_a_search_space_with_a_harmless_alias_keeps_working(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("train.lr: &r {type: loguniform, low: 1.0e-4, high: 1.0e-1}\ntrain.weight_decay: *r\n")
    assert len(load_space(path)) == 2


def test_lr_find_apply_refuses_a_laughs_file_and_leaves_it(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(laughs(8))
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="expands to more than"):
        apply_lr(cfg.resolve(), 0.01, path)
    assert path.read_bytes() == before
