"""Memory estimates against the peak measured in a fresh process, and `torchwise memory`. The accounting is
tests/unit/toolbox/test_memory.py."""
import json

import pytest
import torch

from torchwise.toolbox.memory import memory_estimate, optimizer_cost

from testkit.models import BlockNet, ConvNet, WideMLP


# Test models live at module level: the measuring process unpickles them by name.


CASES = [  # (model factory, one sample, batch, optimizer, precisions)
    (ConvNet, (1, 3, 32, 32), 64, "adamw", ("fp32", "bf16")),
    (WideMLP, (1, 256), 256, "adamw", ("fp32",)),
    (BlockNet, (1, 64, 128), 48, "sgd_momentum", ("fp32", "bf16")),
]


@pytest.mark.parametrize("factory,shape,batch,opt,precisions", CASES, ids=[c[0].__name__ for c in CASES])
def test_estimate_within_25_percent_of_the_measured_peak_on_cpu(factory, shape, batch, opt, precisions):
    torch.manual_seed(0)
    report = memory_estimate(factory(), torch.randn(shape), batch_size=batch, optimizer=opt, precisions=precisions,
                             device="cpu", measure=True, threads=1)
    print(report.table())
    assert [r.precision for r in report.rows] == list(precisions)
    for row in report.rows:
        assert row.measured is not None and row.measured > 20 * 2**20   # big enough for RSS to be meaningful
        assert 0.75 <= row.ratio <= 1.25, report.table()
    fp32 = report.row("fp32")
    n = sum(p.numel() for p in factory().parameters())
    buffers = sum(b.numel() * b.element_size() for b in factory().buffers())
    assert fp32.params == 4 * n + buffers and fp32.grads == 4 * n
    assert fp32.optimizer_state == optimizer_cost(opt).state_copies * 4 * n
    if "bf16" in precisions:
        assert report.row("bf16").activations < fp32.activations
    assert "peak (measured)" in report.table()


def test_cli_memory_table_and_batch_size(tmp_path, capsys):
    from torchwise.cli.main import main

    code = main(["memory", "--model", "mlp", "--input-size", "20", "--classes", "3", "--batch-size", "64",
                 "--find-batch-size", "--budget", "8MB", "--json", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "fp32" in out and "bf16" in out and "optimizer" in out and "largest batch that fits" in out
    data = json.loads((tmp_path / "m.json").read_text())
    rows = {r["precision"]: r for r in data["memory"]["rows"]}
    assert rows["fp32"]["optimizer_state"] == 2 * rows["fp32"]["grads"]
    found = data["batch_size"]
    assert found["batch_size"] > 0
    fits = {t["batch_size"]: t["fits"] for t in found["tried"]}
    assert fits[found["batch_size"]] and not fits.get(found["batch_size"] + 1, False)
