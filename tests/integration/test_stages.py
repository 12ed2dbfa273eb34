"""fit() again on the same Trainer: staged fine-tuning continues the step count, the logs and the
checkpoints, and a staged script killed with SIGKILL in either stage resumes bit-identically."""
import csv
import json
import random
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from torchwise import Trainer
from torchwise.errors import TorchwiseError
from conftest import REPO_ROOT, TESTS_DIR


PROGRAM = TESTS_DIR / "programs" / "staged_run.py"
QUIET = dict(progress=False, checks=False, tensorboard=False)


def run(out_dir, *extra):
    return subprocess.run([sys.executable, str(PROGRAM), str(out_dir), *extra], capture_output=True, text=True,
                          timeout=300)


def test_a_second_fit_is_the_next_stage_of_the_same_run(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 6, generator=g)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), train_data=(x, y), val_data=(x[:32], y[:32]),
                      batch_size=32, out_dir=tmp_path / "run", **QUIET)
    for p in model[0].parameters():
        p.requires_grad = False
    first = trainer.fit(epochs=1)
    frozen = model[0].weight.detach().clone()
    for p in model[0].parameters():
        p.requires_grad = True
    second = trainer.fit(epochs=2, optimizer=lambda p: torch.optim.SGD(p, lr=0.01))
    assert (first.steps, second.steps) == (4, 12) and second.epochs == 3
    assert not torch.equal(frozen, model[0].weight)  # unfrozen in stage 1: in the new optimizer
    assert trainer.optimizer.param_groups[0]["lr"] == 0.01
    rows = list(csv.DictReader((tmp_path / "run" / "metrics.csv").open()))
    assert [int(r["step"]) for r in rows] == [4, 8, 12]  # the log goes on
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*"))
    assert names[-1] == "step-000000012"


def test_a_staged_run_killed_in_either_stage_resumes_bit_identical(tmp_path):
    reference = run(tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr[-3000:]
    stages = json.loads(reference.stdout.strip().splitlines()[-1])
    total = stages[-1]["steps"]
    first_end = stages[0]["steps"]
    for where, kill_at in (("stage 0", random.Random().randint(11, first_end - 1)),
                           ("stage 1", random.Random().randint(first_end + 11, total - 1))):
        out = tmp_path / where.replace(" ", "")
        killed = run(out, "--kill-at-step", str(kill_at))
        assert killed.returncode == -9, f"expected SIGKILL at step {kill_at}: {killed.stderr[-2000:]}"
        resumed = run(out, "--resume")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        again = json.loads(resumed.stdout.strip().splitlines()[-1])
        assert again[-1]["steps"] == total and again[-1]["rows"] == stages[-1]["rows"]
        if where == "stage 1":
            assert "stage 0 of this run is done" in resumed.stderr
        a = load_file(str(tmp_path / "reference" / "final" / "model.safetensors"))
        b = load_file(str(out / "final" / "model.safetensors"))
        for key in a:
            assert torch.equal(a[key], b[key]), f"killed in {where} at step {kill_at}: {key} differs after resume"


def test_a_new_stage_with_fsdp_is_refused():
    model = nn.Linear(4, 2)
    trainer = Trainer(model, train_data=(torch.randn(8, 4), torch.randint(0, 2, (8,))), max_steps=1, **QUIET)
    trainer.fit()
    trainer.config.distributed.strategy = "fsdp"
    with pytest.raises(TorchwiseError) as err:
        trainer.fit(max_steps=1)
    assert "fsdp" in str(err.value)


def test_the_staged_example_passes_the_checks_without_findings(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("staged", REPO_ROOT / "examples" /
                                                  "staged_finetuning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    head, whole = module.train_in_stages(tmp_path / "run", progress=False, tensorboard=False)  # checks on
    assert head.findings == [] and whole.findings == [], (head.findings, whole.findings)
    assert whole.history[-1]["val_acc"] > head.history[-1]["val_acc"] - 0.05
