"""Model summary: per-layer shapes, trainable/frozen parameters and activation bytes, from forward hooks."""
import json

import torch
from torch import nn

from conftest import run_cli
from torchwise.toolbox.summary import summary


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.act = nn.GELU()
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 5)
        for p in self.backbone.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        x = self.backbone(x).flatten(1)
        return self.fc2(self.act(self.act(self.fc1(x))))   # GELU called twice


def test_rows_shapes_params_and_activation_bytes():
    model = Net().eval()
    s = summary(model, torch.randn(4, 3, 8, 8))
    rows = {r.name: r for r in s.rows}
    assert [r.name for r in s.rows] == ["backbone.0", "backbone.1", "backbone.2", "fc1", "act", "fc2"]
    assert rows["backbone.0"].output_shape == "4x8x8x8" and rows["backbone.2"].output_shape == "4x8x4x4"
    assert rows["fc2"].output_shape == "4x5"
    assert (rows["backbone.0"].trainable, rows["backbone.0"].frozen) == (0, 3 * 8 * 9 + 8)
    assert (rows["fc1"].trainable, rows["fc1"].frozen) == (128 * 32 + 32, 0)
    assert rows["backbone.0"].activation_bytes == 4 * 8 * 8 * 8 * 4
    assert rows["backbone.1"].activation_bytes == 0            # in-place ReLU allocates nothing
    assert rows["act"].calls == 2 and rows["act"].activation_bytes == 2 * 4 * 32 * 4
    assert s.trainable == 128 * 32 + 32 + 32 * 5 + 5 and s.frozen == 3 * 8 * 9 + 8
    assert s.param_bytes == 4 * (s.trainable + s.frozen)
    assert s.activation_bytes == sum(r.activation_bytes for r in s.rows)
    # Hooks gone, mode restored.
    assert all(not m._forward_hooks for m in model.modules())
    assert not model.training
    table = s.table()
    assert "output shape" in table and "frozen" in table and "4x8x4x4" in table
    assert "act (x2)" in table
    assert f"{s.trainable:,} trainable" in table and f"{s.frozen:,} frozen" in table


def test_cli_summary_of_a_named_model_and_of_a_run(tmp_path):
    proc = run_cli("summary", "--model", "smallcnn", "--input-size", "1,8,8", "--classes", "10",
                   "--json", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    assert "features.0" in proc.stdout and "1x32x8x8" in proc.stdout and "1x10" in proc.stdout
    data = json.loads((tmp_path / "s.json").read_text())
    from torchwise.models import build_model

    assert data["trainable"] == sum(p.numel() for p in build_model("smallcnn", 10, 1, (8, 8)).parameters())
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"model": {"name": "mlp", "num_classes": 3, "in_channels": 6,
                                                         "input_size": None}, "input_size": [6]}))
    proc = run_cli("summary", "--run", run)
    assert proc.returncode == 0, proc.stderr
    assert "body.0" in proc.stdout and "1x256" in proc.stdout


def test_cli_summary_user_errors(capsys):
    from torchwise.cli.main import main

    assert main(["summary", "--model", "smallcnn"]) == 2
    assert "--input-size" in capsys.readouterr().err
    assert main(["summary", "--input-size", "3,8,8"]) == 2
    assert "--run RUNDIR or --model NAME" in capsys.readouterr().err
    assert main(["summary", "--model", "smallcnn", "--input-size", "3,a"]) == 2
    assert "Cannot read --input-size" in capsys.readouterr().err
    assert main(["summary", "--model", "smallcnn", "--input-size", "3"]) == 2
    err = capsys.readouterr().err
    assert "does not accept an input of this shape" in err and "C,H,W" in err
