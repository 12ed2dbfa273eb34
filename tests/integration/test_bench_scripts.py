"""The CPU benchmarks README points to run as written, in a reduced size (their numbers are in the
issue notes; here only that each one runs and prints its ratios)."""
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT


BENCH = REPO_ROOT / "bench"


def run(script, *args, timeout=300, ok=(0,)):
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode in ok, proc.stderr[-3000:]
    return proc.stdout


def test_bench_trainer_prints_the_trainer_against_the_hand_loop():
    # the smallest sizes that still run every workload and runner: the numbers themselves are the benchmark's
    # business (issue notes), and no test judges a speed
    out = run("bench_trainer.py", "--samples", "256", "--hidden", "64", "--epochs", "1", "--repeats", "1")
    assert out.count("workload:") == 3  # MLP sample by sample, MLP on tensors, small CNN
    for runner in ("hand-written loop", "torchwise.Trainer", "(checks=False)"):
        ratios = re.findall(rf"{re.escape(runner)}\s+\d+ samples/s\s+ratio (\d+\.\d+)", out)
        assert len(ratios) == 3 and all(float(r) > 0 for r in ratios), out
    assert out.count("ratio 1.000") >= 3  # the hand loop is the reference


def test_bench_check_overhead_runs():
    # exit status 1 means "over its 5% target", which 8 steps on a busy machine cannot judge
    out = run("bench_check_overhead.py", "--steps", "8", "--block", "2", "--batch", "8", "--threads", "1", ok=(0, 1))
    assert re.search(r"[+-]\d+\.\d+% per step", out), out


def test_bench_image_cache_prints_the_speed_up_of_each_cache():
    out = run("bench_image_cache.py", "--images", "48", "--sizes", "32", "--workers", "0", "--epochs", "1",
              "--repeats", "1")
    assert re.search(r"memory.*disk", out, re.S) and re.search(r"\d+\.\d+x", out), out


def test_bench_device_augment_prints_its_ratio():
    pytest.importorskip("torchvision")
    out = run("bench_device_augment.py", "--batch", "16", "--repeats", "1")
    assert re.search(r"\d+(\.\d+)?x", out), out


def test_bench_recipes_prints_each_recipe_against_the_plain_run():
    out = run("recipes_digits.py", "--epochs", "1", "--seeds", "0")
    rows = [line for line in out.splitlines() if "%" in line and not line.startswith("(")]
    assert [r.split("  ")[0].strip() for r in rows][:2] == ["plain", "EMA (decay 0.99)"] and len(rows) == 6, out
