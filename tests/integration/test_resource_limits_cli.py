"""Resource limits end to end (issue 27, class 8): a full disk during an export leaves the previous export
whole and says so; the CPU running out of memory in train, eval and export is said, not a traceback; a
"billion laughs" --config is refused. The disk is filled for real: the export runs under a file size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored, so the write fails with EFBIG as on a full disk); the memory runs
out for real: the model's forward asks for more than any machine has."""
from __future__ import annotations

import csv
import hashlib
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO_ROOT, assert_clear_cli_error

pytest.importorskip("resource")
TIMEOUT_S = 300  # far above any of these commands; only a hang reaches it

MODEL = '''
import os, torch
from torch import nn

class Net(nn.Module):
    """A small classifier that asks for an impossible amount of memory where $OOM_AT says (train, eval, always)."""
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(n_in, 256), nn.ReLU(), nn.Linear(256, n_out))
    def forward(self, x):
        at = os.environ.get("OOM_AT", "")
        if at == "always" or (at == "train" and self.training) or (at == "eval" and not self.training):
            if os.environ.get("OOM_KIND") == "python":
                bytearray(2 ** 62)
            else:
                torch.empty(2 ** 62, dtype=torch.uint8)
        return self.fc(x)

def make(num_classes=2, **_):
    return Net(3, num_classes)  # the CSV below has three feature columns
'''


def run(*args, env_extra=None, code: str | None = None, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    command = [sys.executable, "-c", code, *map(str, args)] if code else [sys.executable, "-m", "torchwise", *map(str, args)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=cwd or REPO_ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(map(str, args))} did not finish in {TIMEOUT_S} s")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A folder with the model module and a small CSV, and a run trained on it (the model never fails)."""
    root = tmp_path_factory.mktemp("limits")
    (root / "hungry.py").write_text(MODEL)
    rng = random.Random(0)
    with (root / "table.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b", "c", "label"])
        for i in range(80):
            writer.writerow([rng.random(), rng.random(), rng.random(), "xy"[i % 2]])
    env = {"PYTHONPATH": f"{root}{os.pathsep}{REPO_ROOT}"}
    proc = run("train", "--data", root / "table.csv", "--target", "label", "--model", "hungry:make", "--out",
               root / "run", "--epochs", "1", "--set", "train.threads=1", env_extra=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, env


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name) if folder.is_dir() else []


LIMITED = textwrap.dedent('''
    import resource, signal, sys
    import onnx, torch  # noqa: F401  the imports read files; the limit is for the export's writes
    import torchwise.export.api  # noqa: F401
    from torchwise.cli.main import main
    {before}
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.exit(main(["export", *sys.argv[2:]]))
''')


def export_limited(limit: int, *args, env, before: str = "") -> subprocess.CompletedProcess:
    return run(limit, *args, env_extra=env, code=LIMITED.format(before=before))


@pytest.mark.parametrize("fmt, name", [("onnx", "model.onnx"), ("torchscript", "model.torchscript.pt"),
                                       ("pt2", "model.pt2")])
def test_an_export_onto_a_full_disk_keeps_the_previous_export_whole(lab, tmp_path, fmt, name):
    root, env = lab
    out = tmp_path / "export"
    first = run("export", root / "run", "--format", fmt, "--out", out, env_extra=env)
    assert first.returncode == 0, first.stdout + first.stderr
    before = snapshot(out)
    assert name in before and "export_report.json" in before
    limit = (out / name).stat().st_size // 3  # the new file cannot be written whole
    proc = export_limited(limit, root / "run", "--format", fmt, "--out", out, env=env)
    text = assert_clear_cli_error(proc, name, "File too large", "file size limit", "previous export")
    assert str(out / name) in text
    assert snapshot(out) == before  # byte for byte: no cut-off model file, the old report kept
    assert leftovers(out) == []


def test_an_export_onto_a_full_disk_into_a_new_folder_leaves_no_half_file(lab, tmp_path):
    root, env = lab
    out = tmp_path / "fresh"
    proc = export_limited(4096, root / "run", "--format", "onnx,torchscript,pt2", "--out", out, env=env)
    assert_clear_cli_error(proc, "model.onnx", "file size limit")
    assert sorted(p.name for p in out.iterdir()) == []


EXTERNAL = "import torchwise.export.onnx as o; o.EXTERNAL_DATA_BYTES = 0  # the >2 GB layout, for a small model"


def test_onnx_with_external_weights_is_written_whole_or_not_at_all(lab, tmp_path):
    root, env = lab
    out = tmp_path / "export"
    proc = export_limited(2 ** 40, root / "run", "--format", "onnx", "--out", out, env=env, before=EXTERNAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {"model.onnx", "model.onnx.data", "export_report.json"} <= set(snapshot(out))
    assert "onnx         ok" in proc.stdout  # verified by onnxruntime from the two files in place
    before = snapshot(out)
    data_size = (out / "model.onnx.data").stat().st_size
    proc = export_limited(data_size // 2, root / "run", "--format", "onnx", "--out", out, env=env, before=EXTERNAL)
    assert_clear_cli_error(proc, "model.onnx", "file size limit")
    assert snapshot(out) == before and leftovers(out) == []


@pytest.mark.parametrize("kind", ["torch", "python"])
def test_train_out_of_cpu_memory_in_the_validation_is_said(lab, tmp_path, kind):
    root, env = lab
    proc = run("train", "--data", root / "table.csv", "--target", "label", "--model", "hungry:make", "--out",
               tmp_path / "run", "--epochs", "1", "--set", "train.threads=1",
               env_extra={**env, "OOM_AT": "eval", "OOM_KIND": kind})
    assert_clear_cli_error(proc, "Out of memory while evaluating the model", "this machine's memory (RAM)",
                           "eval_batch_size")


@pytest.mark.parametrize("kind", ["torch", "python"])
def test_train_out_of_cpu_memory_in_a_step_is_said(lab, tmp_path, kind):
    root, env = lab
    proc = run("train", "--data", root / "table.csv", "--target", "label", "--model", "hungry:make", "--out",
               tmp_path / "run", "--epochs", "1", "--set", "train.threads=1",
               env_extra={**env, "OOM_AT": "train", "OOM_KIND": kind})
    assert_clear_cli_error(proc, "Out of memory in training step 1")


def test_eval_out_of_cpu_memory_is_said_and_writes_no_eval_json(lab):
    root, env = lab
    before = (root / "run" / "eval.json").read_bytes()
    proc = run("eval", "--run", root / "run", env_extra={**env, "OOM_AT": "eval"})
    assert_clear_cli_error(proc, "Out of memory while evaluating", "--batch-size")
    assert (root / "run" / "eval.json").read_bytes() == before


def test_export_out_of_cpu_memory_is_said_and_keeps_the_previous_export(lab, tmp_path):
    root, env = lab
    out = tmp_path / "export"
    assert run("export", root / "run", "--out", out, env_extra=env).returncode == 0
    before = snapshot(out)
    proc = run("export", root / "run", "--format", "onnx,torchscript", "--out", out,
               env_extra={**env, "OOM_AT": "always", "OOM_KIND": "python"})
    assert_clear_cli_error(proc, "Out of memory while exporting")
    assert snapshot(out) == before and leftovers(out) == []


def test_a_billion_laughs_config_is_refused_by_train(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\ntrain:\n  lr: *a8\n")
    proc = run("train", "--config", path, "--out", tmp_path / "run")
    assert_clear_cli_error(proc, str(path), "aliases")
    assert not (tmp_path / "run").exists()
