"""docs/guide.md, the users' guide: its settings and commands are generated from the code's own definitions
(torchwise/cli/user_guide.py), and it names every file a real run directory holds."""
from __future__ import annotations

import dataclasses
import re

from conftest import REPO_ROOT
from testkit.rundir_runs import tw, write_csv

from torchwise import config
from torchwise.cli import user_guide
from torchwise.train import settings

GUIDE = REPO_ROOT / "docs" / "guide.md"
REGENERATE = "python -m torchwise.cli.user_guide"


def test_the_committed_guide_is_what_the_generator_makes():
    text = GUIDE.read_text(encoding="utf-8")
    blocks = {m.group("name") for m in user_guide.BLOCK.finditer(text)}
    assert blocks == set(user_guide.GENERATORS), f"docs/guide.md's generated blocks: {blocks}"
    assert user_guide.render(text) == text, f"docs/guide.md is out of date with the code: run `{REGENERATE}`"


def test_every_trainer_setting_has_a_help_text_and_appears_in_the_guide():
    text = GUIDE.read_text(encoding="utf-8")
    for section, cls in settings.SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help", "").strip(), f"Trainer setting {section}.{f.name} has no help text"
            assert f"| `{f.name}` | " in text, f"Trainer setting {f.name} is missing from docs/guide.md"


def test_every_cli_setting_appears_in_the_guide_with_its_default():
    text = GUIDE.read_text(encoding="utf-8")
    for section, cls in config.SECTIONS.items():
        for f in dataclasses.fields(cls):
            row = f"| `{section}.{f.name}` | `{user_guide.yaml_word(f.default)}` |"
            assert row in text, f"{section}.{f.name} (default {f.default!r}) is not in docs/guide.md as {row!r}"


def test_a_changed_default_makes_the_guide_out_of_date(monkeypatch):
    # what the first test guards against, shown happening: the generator reads the live definitions
    text = GUIDE.read_text(encoding="utf-8")
    field = next(f for f in dataclasses.fields(settings.LoopSettings) if f.name == "batch_size")
    monkeypatch.setattr(field, "default", 33)
    assert user_guide.render(text) != text
    assert "| `batch_size` | `int` | `33` |" in user_guide.render(text)


def test_the_guide_names_every_file_of_a_real_run_directory(tmp_path):
    data = write_csv(tmp_path / "table.csv", 80, 0)
    run = tmp_path / "run"
    trained = tw("train", "--data", data, "--target", "label", "--out", run, "--epochs", "1", "--batch-size", "16",
                 "--set", "train.threads=1")  # with its report
    assert trained.returncode == 0, trained.stdout + trained.stderr
    evaluated = tw("eval", "--run", run)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    section = GUIDE.read_text(encoding="utf-8").split("## What a run directory holds", 1)[1]
    named = set(re.findall(r"`([^`/]+/?)", section))
    for entry in sorted(run.iterdir()):
        shown = entry.name + ("/" if entry.is_dir() else "")
        assert shown in named or any(n.startswith(shown) for n in named), \
            f"{shown} is in a real run directory but not in docs/guide.md's table: {sorted(named)}"
    assert (run / "report.html").is_file() and (run / "eval.json").is_file()
