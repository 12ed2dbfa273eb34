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
