"""`torchwise check` through the real command line, in a subprocess, as a user runs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TESTS_DIR


ZOO = TESTS_DIR / "check_zoo"


def check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torchwise", "check", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def test_buggy_script_through_the_cli_with_report(tmp_path):
    report = tmp_path / "r.json"
    script = ZOO / "buggy" / "validate_without_eval.py"
    proc = check("--report", str(report), "--", sys.executable, str(script))
    assert proc.returncode == 1, proc.stderr
    assert "eval-mode-missing" in proc.stderr and "fix:" in proc.stderr
    data = json.loads(report.read_text())
    assert data["steps"] > 0 and isinstance(data["findings"], list)
    f = data["findings"][0]
    assert {"id", "severity", "message", "where", "evidence", "fix"} <= set(f)
    assert f["id"] == "eval-mode-missing" and f["where"].rsplit(":", 1)[0].endswith(script.name)


def test_more_buggy_scripts_through_the_cli(tmp_path):
    for name, want in [("digits_no_zero_grad.py", "missing-zero-grad"), ("csv_with_missing_values.py", "nonfinite-input"),
                       ("sorted_by_label.py", "no-shuffle")]:
        report = tmp_path / f"{name}.json"
        proc = check("--report", str(report), "--", "python", str(ZOO / "buggy" / name))
        assert proc.returncode == 1, proc.stderr
        assert want in [f["id"] for f in json.loads(report.read_text())["findings"]]


def test_correct_script_exits_0_with_the_short_form(tmp_path):
    proc = check(str(ZOO / "correct" / "mlp_digits.py"))
    assert proc.returncode == 0, proc.stderr
    assert "no silent mistakes found" in proc.stderr
    assert "val acc" in proc.stdout  # the script's own output is untouched


def test_failing_script_exits_2_with_traceback_and_translation(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(256, 10))\n"
        "x = torch.randn(8, 1, 12, 12)\n"
        "loss = model(x).sum()\n")
    proc = check("--", "python", str(script), "--some-arg")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "mat1 and mat2 shapes cannot be multiplied" in proc.stderr
    assert "what happened" in proc.stderr and "nn.Linear(400, 10)" in proc.stderr


def test_overfit_one_batch_flag(tmp_path):
    report = tmp_path / "r.json"
    proc = check("--overfit", "--report", str(report), str(ZOO / "buggy" / "softmax_in_model.py"))
    assert proc.returncode == 1
    data = json.loads(report.read_text())
    assert data["overfit"]["ok"] is False
    assert {"softmax-before-loss", "cannot-overfit-batch"} <= {f["id"] for f in data["findings"]}
    assert "overfit-one-batch" in proc.stderr and "FAILED" in proc.stderr


def test_missing_script_is_a_user_error(tmp_path):
    proc = check(str(tmp_path / "nope.py"))
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_list_and_command_forms_in_process(capsys, tmp_path):
    from torchwise.cli.check_command import _split_command
    from torchwise.cli.main import main
    from torchwise.diagnose.catalog import CATALOG

    assert main(["check", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(i in out for i in CATALOG) and "detected by:" in out
    script = tmp_path / "t.py"
    script.write_text("")
    assert _split_command(["--", "python3", "-u", str(script), "--lr", "1"]) == (str(script), ["--lr", "1"], False)
    assert _split_command([str(script), "a"]) == (str(script), ["a"], False)
    assert _split_command(["python", "-m", "pkg.train", "--x"]) == ("pkg.train", ["--x"], True)


_CRASH_AFTER_STEPS = """\
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
for step in range(STEPS):
    ZERO_GRAD
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
model(torch.randn(4, 5))   # crashes: the model wants 8 features
"""


def test_failed_script_summary_says_it_failed_not_that_it_ran_to_the_end(tmp_path):
    clean = tmp_path / "clean_then_crash.py"
    clean.write_text(_CRASH_AFTER_STEPS.replace("STEPS", "3").replace("ZERO_GRAD", "opt.zero_grad()"))
    proc = check("--", "python", str(clean))
    assert proc.returncode == 2, proc.stderr
    summary = proc.stderr.split("nn.LazyLinear")[-1]   # what comes after the translation
    assert "failed after 3 optimizer steps" in summary and "only what ran before the failure" in summary
    assert "ran to the end" not in proc.stderr
    assert "no silent mistakes found in the 3 optimizer steps before the failure" in summary
    assert "no silent mistakes found." not in proc.stderr


def test_findings_made_before_a_failure_are_scoped_to_the_steps_that_ran(tmp_path):
    buggy = tmp_path / "buggy_then_crash.py"
    buggy.write_text(_CRASH_AFTER_STEPS.replace("STEPS", "5").replace("ZERO_GRAD", "pass"))
    report = tmp_path / "r.json"
    proc = check("--report", str(report), "--", "python", str(buggy))
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert "failed after 5 optimizer steps" in err and "ran to the end" not in err
    assert "missing-zero-grad" in err and "1 finding(s) in the 5 optimizer steps before the failure" in err
    data = json.loads(report.read_text())
    assert data["script_failed"] is True and data["steps"] == 5


def test_script_exiting_with_nonzero_status_is_reported_as_failed(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nprint('bad data')\nsys.exit(3)\n")
    proc = check(str(script))
    assert proc.returncode == 2
    assert "failed after 0 optimizer steps" in proc.stderr and "ran to the end" not in proc.stderr
    assert "no silent mistakes found." not in proc.stderr


def test_check_under_torchrun_sees_every_rank_train_on_all_the_data(tmp_path):
    """`torchrun ... -m torchwise check -- python train.py`: each rank runs the script under its own Watcher."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={port}",
           "-m", "torchwise", "check", "--", "python", str(ZOO / "buggy" / "ddp_without_distributed_sampler.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out  # a finding of severity error: exit status 1 on each rank
    assert out.count("ddp-no-distributed-sampler") >= 2, out  # both ranks
    assert "Rank 0 of 2" in out and "Rank 1 of 2" in out


# --- honest endings: check's status never says "clean" for what it did not see (issue 27, class 3) ----------

_TRAIN = """
import os, sys
import torch
from torch import nn
torch.manual_seed(0)
X = torch.randn(512, 8)
y = (X[:, 0] + X[:, 1] > 0).long()
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)

def train(steps, zero_grad=True):
    for i in range(steps):
        idx = torch.randint(0, 512, (32,))
        if zero_grad:
            opt.zero_grad()
        nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
        opt.step()
"""


def _script(tmp_path: Path, name: str, tail: str) -> Path:
    path = tmp_path / name
    path.write_text(_TRAIN + tail)
    return path


def test_a_non_zero_exit_status_after_training_is_never_turned_into_0(tmp_path):
    ok = check("--", "python", str(_script(tmp_path, "ends_0.py", "train(60)\nsys.exit(0)\n")), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    for status, how in [(3, "sys.exit(3)"), (1, "sys.exit('accuracy below 0.9')")]:
        proc = check("--", "python", str(_script(tmp_path, f"ends_{status}.py", f"train(60)\n{how}\n")), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert f"exited with status {status}" in proc.stderr
        assert f"but the script exited with status {status}, so check exits 2" in proc.stderr
        assert "no silent mistakes found." not in proc.stderr


def test_os_exit_still_reports_what_was_seen(tmp_path):
    report = tmp_path / "r.json"
    script = _script(tmp_path, "hard_exit.py", "train(120, zero_grad=False)\nprint('done', flush=True)\nos._exit(0)\n")
    proc = check("--report", str(report), "--", "python", str(script), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "done" in proc.stdout  # the script's own output, then the report
    assert "ended its process with os._exit(0) at hard_exit.py:" in proc.stderr
    assert "missing-zero-grad" in proc.stderr
    data = json.loads(report.read_text())
    assert data["script_hard_exit"] is True and data["steps"] == 120
    assert [f["id"] for f in data["findings"]] == ["missing-zero-grad"]
    # a non-zero os._exit status is the script's failure, even where nothing was found
    proc = check("--", "python", str(_script(tmp_path, "hard_fail.py", "train(60)\nos._exit(5)\n")), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "os._exit(5)" in proc.stderr


def test_a_forked_child_ends_as_python_ends_it_and_the_parent_reports_once(tmp_path):
    script = _script(tmp_path, "forks.py", """
pid = os.fork()
train(40)
if pid == 0:
    sys.exit(4)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
""")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "child status 4" in plain.stdout, plain.stderr
    proc = check("--", "python", str(script), cwd=tmp_path)
    assert "child status 4" in proc.stdout, proc.stderr   # the child kept its own status
    assert proc.stderr.count("forks.py ran to the end") == 1, proc.stderr  # one report: the parent's
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    # a child that fails prints its traceback and ends with status 1, as without check
    script = _script(tmp_path, "fork_fails.py", """
pid = os.fork()
if pid == 0:
    raise ValueError("child broke")
train(40)
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status), flush=True)
""")
    proc = check("--", "python", str(script), cwd=tmp_path)
    assert "child status 1" in proc.stdout and "ValueError: child broke" in proc.stderr, proc.stderr
    assert proc.stderr.count("fork_fails.py ran to the end") == 1, proc.stderr
