"""The GPU benchmark and its session script, checked on the CPU: a lent GPU's minutes must not be spent
finding a typo. bench/bench_gpu.py runs for real (tiny sizes) in a subprocess, as the session runs it."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT


ROOT = REPO_ROOT
WORKLOADS = ("resnet", "mlp", "gpt")
# contenders that run anywhere; each must come back with a number on a CPU
CPU_CONTENDERS = ("hand-tuned eager", "seed template (fp32, DataLoader)", "torchwise default",
                  "torchwise checks=False", "torchwise data on device, checks=False")
GPU_ONLY = ("hand-tuned + CUDA graph (whole step)", "hand-tuned eager + compile", "torchwise +compile, checks=False")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("bench") / "bench_gpu.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_gpu.py"), "--device", "cpu", "--quick",
                           "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, json.loads(out.read_text())


def test_quick_cpu_run_has_a_number_for_every_cpu_contender(quick_run):
    proc, report = quick_run
    meta = report["meta"]
    assert meta["device"] == "cpu" and meta["torch"] and "cuda" in meta and meta["timed"]
    assert set(report["workloads"]) == set(WORKLOADS)
    optional = {"Lightning (bf16-mixed)": importlib.util.find_spec("lightning") or importlib.util.find_spec("pytorch_lightning"),
                "Accelerate (bf16)": importlib.util.find_spec("accelerate")}
    for name, workload in report["workloads"].items():
        entries = workload["contenders"]
        must_run = list(CPU_CONTENDERS) + [k for k, present in optional.items() if present]
        for contender in must_run:
            entry = entries[contender]
            assert entry["status"] == "ok", (name, contender, entry)
            for key in ("value", "step_us", "samples_per_s", "timed_s", "speed_vs_hand_tuned"):
                assert isinstance(entry[key], float) and math.isfinite(entry[key]) and entry[key] > 0, (name, contender, key)
            assert entry["timed_steps"] == workload["timed_steps"] or contender.startswith("seed")
            assert entry["notes"]
        assert entries["hand-tuned eager"]["speed_vs_hand_tuned"] == pytest.approx(1.0)
        if name == "resnet":
            assert entries["torchwise default"]["images_per_s"] == entries["torchwise default"]["value"]
        if name == "gpt":
            assert entries["torchwise default"]["tokens_per_s"] > 0 and workload["flops_per_token"] > 0
        for contender, present in optional.items():
            if not present:
                assert entries[contender]["status"] == "skipped" and "installed" in entries[contender]["reason"]
        for contender in GPU_ONLY:
            assert entries[contender]["status"] == "skipped" and "GPU" in entries[contender]["reason"]
        for contender, entry in entries.items():  # nothing failed; every skip says why
            assert entry["status"] in ("ok", "skipped"), (name, contender, entry.get("error"))
            if entry["status"] == "skipped":
                assert entry["reason"].strip()
    table = proc.stdout[proc.stdout.index("=" * 100):]
    assert "timed:" in table and "us/step" in table and "img/s" in table and "tok/s" in table
    assert "target" in table and "SKIPPED: CUDA graphs need a GPU" in table


def test_session_script_is_valid_bash():
    proc = subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_session.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
