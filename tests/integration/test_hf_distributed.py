"""The Hugging Face example under DDP: two gloo ranks (torchrun) validate half of the data each, and the
metrics (our streamed accuracy and loss, torchmetrics' F1 synced by torchmetrics) equal one process's."""
import json
import subprocess
import sys

import pytest

from torchwise.train.distributed.process_group import free_port
from conftest import TESTS_DIR


PROGRAM = TESTS_DIR / "programs" / "hf_ddp_eval.py"


def test_two_ranks_give_the_same_validation_metrics_as_one_process(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("torchmetrics")
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    done = subprocess.run([sys.executable, str(PROGRAM), str(one)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"one process failed:\n{done.stderr[-3000:]}"
    ranks = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                            f"--master-port={free_port()}", str(PROGRAM), str(two)],
                           capture_output=True, text=True, timeout=300)
    assert ranks.returncode == 0, f"the 2-rank run failed:\n{ranks.stdout[-2000:]}\n{ranks.stderr[-3000:]}"
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a["world"] == 1 and b["world"] == 2
    assert b["last"]["val_f1"] == pytest.approx(a["last"]["val_f1"], abs=1e-6)
    assert b["last"]["val_acc"] == a["last"]["val_acc"]
    assert b["last"]["val_loss"] == pytest.approx(a["last"]["val_loss"], rel=1e-5)
