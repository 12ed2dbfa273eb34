"""`torchwise check` must never change what a script does, and never call a run clean that it did not see.

Each test runs a real script through the real command line in a subprocess (issue 15, classes 1 and 5):
whole-model pickling, deepcopy, torch.jit, torch.compile, a bare `except:` around the loop, an endless
inference loop, sys.exit at the end, Ctrl-C, training in spawned or forked worker processes, a
hand-written update without an optimizer, a script that trains nothing, and the checker's own failures.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


TIMEOUT = 420  # generous: the CI machine is shared, and each run imports torch twice at most

BASE = '''
import torch, torch.nn as nn
torch.manual_seed(0)
X = torch.randn(512, 20); Y = (X[:, 0] > 0).long()
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=32, shuffle=True)
def train_epoch():
    model.train()
    for x, y in loader:
        opt.zero_grad(); loss = nn.functional.cross_entropy(model(x), y); loss.backward(); opt.step()
    return loss.item()
'''


def _env() -> dict:
    # an inference loop is stopped after 2,000 forwards and this many seconds with no optimizer step
    return dict(os.environ, OMP_NUM_THREADS="1", TORCHWISE_CHECK_STRICT="1", TORCHWISE_CHECK_IDLE_SECONDS="3")


def check(script: Path, *extra: str, report: Path | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "torchwise", "check", *extra]
    if report is not None:
        args += ["--report", str(report)]
    try:
        return subprocess.run(args + ["--", "python", str(script)], capture_output=True, text=True,
                              timeout=TIMEOUT, env=_env(), cwd=script.parent)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"torchwise check on {script.name} did not end within {TIMEOUT} s; its output so far:\n"
                    f"{exc.stderr}")


def plain(script: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT,
                              env=_env(), cwd=script.parent)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script.name} did not end within {TIMEOUT} s when run plainly")


def write(tmp_path: Path, name: str, body: str) -> Path:
    (tmp_path / "base.py").write_text(BASE)
    path = tmp_path / name
    path.write_text(body)
    return path


def test_pickling_copying_and_scripting_the_model_work_under_check(tmp_path):
    script = write(tmp_path, "save_whole_model.py", '''
from base import *
import copy, io
for e in range(2): train_epoch()
buf = io.BytesIO(); torch.save(model, buf); buf.seek(0)
loaded = torch.load(buf, weights_only=False)
clone = copy.deepcopy(model)
scripted = torch.jit.script(model)
traced = torch.jit.trace(model.eval(), X[:4])
print("hooks", len(model._forward_pre_hooks), len(model._forward_hooks), len(loaded._forward_pre_hooks))
print("same", all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), clone.state_dict().values())))
''')
    ref = plain(script)
    assert ref.returncode == 0, ref.stderr
    proc = check(script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ref.stdout  # nothing of ours in the model's hook dicts, nothing changed
    assert "hooks 0 0 0" in proc.stdout and "same True" in proc.stdout
    assert "will not be serialized" not in proc.stderr  # no warning about our tensor hooks either
    assert "ran to the end: 32 optimizer steps" in proc.stderr


@pytest.mark.slow
def test_a_compiled_model_trains_under_check(tmp_path):
    script = write(tmp_path, "compiled.py", '''
from base import *
cmodel = torch.compile(model)
for e in range(2):
    for x, y in loader:
        opt.zero_grad(); loss = nn.functional.cross_entropy(cmodel(x), y); loss.backward(); opt.step()
print("trained")
''')
    proc = check(script)
    assert proc.returncode == 0, proc.stderr
    assert "trained" in proc.stdout and "ran to the end: 32 optimizer steps" in proc.stderr


def test_a_bare_except_around_the_loop_cannot_keep_the_script_running(tmp_path):
    script = write(tmp_path, "bare_except.py", '''
from base import *
for e in range(100000):
    try:
        train_epoch()
    except:
        pass
print("never printed under check")
''')
    proc = check(script, "--max-steps", "40")
    assert proc.returncode == 0, proc.stderr
    assert "stopped after" in proc.stderr and "--max-steps 40 reached" in proc.stderr


def test_an_endless_inference_loop_after_training_is_stopped(tmp_path):
    script = write(tmp_path, "serve_forever.py", '''
from base import *
for e in range(2): train_epoch()
model.eval()
with torch.no_grad():
    while True:
        model(torch.randn(4, 20))
''')
    proc = check(script)
    assert proc.returncode == 0, proc.stderr
    assert "model forwards since the last optimizer step" in proc.stderr and "32 optimizer steps" in proc.stderr


def test_sys_exit_at_the_end_is_judged_whole_and_its_status_kept(tmp_path):
    """A status given at the end is the script's verdict: the whole run was judged (not "a failure in the middle",
    whose findings cover only part of it), and a non-zero one is never turned into check's 0."""
    script = write(tmp_path, "exit_status.py", '''
from base import *
import sys
for e in range(2): train_epoch()
sys.exit(3)
''')
    proc = check(script)
    assert proc.returncode == 2, proc.stderr
    assert "ran to the end and exited with status 3 (sys.exit at exit_status.py:5)" in proc.stderr
    assert "not checked" not in proc.stderr


def test_ctrl_c_keeps_the_findings_seen_so_far(tmp_path):
    script = write(tmp_path, "long_run.py", '''
from base import *
import itertools, sys
for step in itertools.count():
    loss = nn.functional.cross_entropy(model(X[:32]), Y[:32]); loss.backward(); opt.step()  # never zeroed
    if step == 60:
        print("ready", flush=True)
''')
    report = tmp_path / "r.json"
    args = [sys.executable, "-m", "torchwise", "check", "--max-steps", "0", "--report", str(report), "--",
            "python", str(script)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            cwd=tmp_path)
    deadline = time.monotonic() + TIMEOUT
    line = ""
    while "ready" not in line and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
    assert "ready" in line, f"the script never got going: {proc.stderr.read() if proc.poll() is not None else ''}"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("check did not end after Ctrl-C")
    assert proc.returncode == 1, err
    assert "was interrupted (Ctrl-C)" in err and "missing-zero-grad" in err
    assert json.loads(report.read_text())["interrupted"] is True


SPAWNED = '''
import torch, torch.nn as nn, torch.multiprocessing as mp
def train(rank, world):
    torch.manual_seed(rank)
    X = torch.randn(256, 10); Y = (X[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for i in range(0, 256, 32):
            loss = nn.functional.cross_entropy(model(X[i:i+32]), Y[i:i+32])
            loss.backward()          # never zeroed: a mistake made in the workers only
            opt.step()
if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2, join=True)
'''


def test_training_in_spawned_workers_is_followed_and_merged(tmp_path):
    script = tmp_path / "spawn_train.py"
    script.write_text(SPAWNED)
    report = tmp_path / "r.json"
    proc = check(script, report=report)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(report.read_text())
    cov = data["coverage"]
    assert cov["processes_followed"] == 2 and cov["optimizer_steps"] == 32
    assert sorted(p["label"] for p in cov["processes"]) == ["spawned worker 0", "spawned worker 1"]
    found = {f["id"]: f for f in data["findings"]}
    assert "missing-zero-grad" in found
    assert found["missing-zero-grad"]["evidence"]["processes"] == "spawned worker 0, spawned worker 1"


def test_hogwild_processes_are_followed(tmp_path):
    script = tmp_path / "hogwild.py"
    script.write_text('''
import torch, torch.nn as nn, torch.multiprocessing as mp
def train(model):
    torch.manual_seed(0)
    X = torch.randn(256, 10); Y = (X[:, 0] > 0).long()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i in range(0, 256, 32):
        opt.zero_grad(); loss = nn.functional.cross_entropy(model(X[i:i+32]), Y[i:i+32]); loss.backward(); opt.step()
if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)); model.share_memory()
    ps = [mp.Process(target=train, args=(model,)) for _ in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()
    print("exit codes", [p.exitcode for p in ps])
''')
    ref = plain(script)
    proc = check(script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ref.stdout == "exit codes [0, 0]\n"
    assert "2 worker process(es) followed" in proc.stderr and "16 optimizer steps" in proc.stderr


def test_a_hand_written_update_is_seen_as_training(tmp_path):
    script = tmp_path / "manual_sgd.py"
    script.write_text('''
import torch
torch.manual_seed(0)
X = torch.randn(256, 5); Y = X @ torch.randn(5, 1)
lin = torch.nn.Linear(5, 1)
for epoch in range(5):
    for i in range(0, 256, 32):
        loss = ((lin(X[i:i+32]) - Y[i:i+32]) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in lin.parameters():
                p -= 0.05 * p.grad
                p.grad.zero_()
print("done")
''')
    proc = check(script)
    assert proc.returncode == 0, proc.stderr
    assert "40 optimizer steps (40 of them hand-written updates" in proc.stderr.replace("step(s)", "steps")


def test_a_script_that_trains_nothing_is_not_called_clean(tmp_path):
    script = tmp_path / "inference_only.py"
    script.write_text("import torch\nm = torch.nn.Linear(4, 2)\nwith torch.no_grad():\n    print(m(torch.randn(3, 4)).shape)\n")
    proc = check(script)
    assert proc.returncode == 3, proc.stderr
    assert "no training was seen" in proc.stderr and "no silent mistakes found" not in proc.stderr


def test_a_failure_inside_the_checker_is_the_checkers_and_strict_mode_fails_on_it(tmp_path):
    # a dry run on the meta device: training works, but no value can be read, so our input inspection
    # fails; that is the checker's failure (evidence lost), never the script's
    script = tmp_path / "meta_dry_run.py"
    script.write_text('''
import torch, torch.nn as nn
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("meta")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad(); loss = model(torch.randn(16, 8, device="meta")).pow(2).mean(); loss.backward(); opt.step()
print("trained", tuple(loss.shape))
''')
    proc = check(script)
    assert "trained ()" in proc.stdout, proc.stderr
    assert proc.returncode == 4, proc.stderr
    assert "failure(s) inside the checker itself (a torchwise bug, not your script's" in proc.stderr
    env = dict(_env())
    env.pop("TORCHWISE_CHECK_STRICT")
    lenient = subprocess.run([sys.executable, "-m", "torchwise", "check", "--", "python", str(script)],
                             capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
    assert lenient.returncode in (0, 1), lenient.stderr
    assert "inside the checker itself" in lenient.stderr and "trained ()" in lenient.stdout


def test_check_waits_for_the_validation_after_a_long_first_epoch(tmp_path):
    # 700 steps per epoch (past --max-steps 300): the validation after it is still seen and judged
    script = tmp_path / "long_epoch.py"
    script.write_text('''
import torch, torch.nn as nn
torch.manual_seed(0)
X = torch.randn(700 * 4, 20); Y = (X[:, 0] > 0).long()
ds = torch.utils.data.TensorDataset(X, Y)
train = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True)
val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 20), torch.zeros(64).long()),
                                  batch_size=32)
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    model.train()
    for x, y in train:
        opt.zero_grad(); nn.functional.cross_entropy(model(x), y).backward(); opt.step()
    with torch.no_grad():                      # model.eval() forgotten
        acc = sum((model(x).argmax(1) == y).sum().item() for x, y in val) / 64
    print("epoch", epoch, "acc", acc)
''')
    proc = check(script)
    assert proc.returncode == 1, proc.stderr
    assert "eval-mode-missing" in proc.stderr and "stopped after 701 optimizer steps" in proc.stderr
