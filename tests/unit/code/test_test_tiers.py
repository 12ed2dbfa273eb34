"""The test tiers keep their promises: tests/unit mirrors the package and starts no process."""
from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, TESTS_DIR, StartedAProcess, is_unit_test, no_processes


PACKAGE = REPO_ROOT / "torchwise"
# a unit folder that tests the code's shape rather than one layer of it
NOT_A_LAYER = {"code"}


def test_every_unit_folder_is_a_layer_of_the_package():
    layers = {p.stem for p in PACKAGE.iterdir() if (p / "__init__.py").exists() or p.suffix == ".py"}
    folders = {p.name for p in (TESTS_DIR / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - layers <= NOT_A_LAYER, f"unit folders that mirror no package layer: {folders - layers - NOT_A_LAYER}"


def test_test_files_live_in_a_tier():
    stray = sorted(p.name for p in TESTS_DIR.glob("test_*.py"))
    assert not stray, f"test files outside tests/unit and tests/integration: {stray}"
    assert is_unit_test(TESTS_DIR / "unit" / "data" / "test_x.py")
    assert not is_unit_test(TESTS_DIR / "integration" / "test_x.py")


def _never_called():  # a worker target (never reached: the start is refused)
    raise AssertionError("a refused worker ran")


def test_the_guard_refuses_subprocesses_and_workers_and_says_where_to_go():
    this = "tests/unit/code/test_test_tiers.py::example"
    with no_processes(this):
        with pytest.raises(StartedAProcess, match="example started a subprocess.*tests/integration/"):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        with pytest.raises(StartedAProcess, match="started a worker process"):
            multiprocessing.get_context("spawn").Process(target=_never_called).start()
    # this test itself runs under the unit tier's guard: the same refusal, from the hook around every unit test
    with pytest.raises(StartedAProcess, match="test_the_guard_refuses"):
        subprocess.run([sys.executable, "-c", "pass"])
