"""`torchwise doctor --json` through the command line."""
from __future__ import annotations

import json
import subprocess
import sys

import torch


def test_doctor_json_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torchwise", "doctor", "--json"], capture_output=True, text=True,
                          timeout=300)
    data = json.loads(proc.stdout)
    assert proc.returncode == (0 if data["ok"] else 1)
    names = [c["name"] for c in data["checks"]]
    for name in ("python", "torch", "torchvision", "numpy", "driver", "device cpu", "distributed",
                 "pinned memory", "dataloader"):
        assert name in names
    checks = {c["name"]: c for c in data["checks"]}
    assert all(c["status"] in ("ok", "warning", "problem", "info") for c in data["checks"])
    assert all(c["fix"] for c in data["checks"] if c["status"] in ("warning", "problem"))
    cpu = checks["device cpu"]
    assert cpu["status"] == "ok" and cpu["details"]["fp32_max_rel_err"] < 1e-4 and cpu["details"]["bf16_ok"]
    assert checks["distributed"]["details"]["backends"]["gloo"]
    assert checks["distributed"]["status"] == "ok" and "gloo all_reduce" in checks["distributed"]["summary"]
    assert checks["dataloader"]["status"] == "ok" and checks["dataloader"]["details"]["startup_s"] < 30
    assert data["environment"]["torch"] == torch.__version__
    assert data["environment"]["torch_cuda"] == torch.version.cuda
