"""Export to ONNX / TorchScript / pt2, verified with real onnxruntime sessions and reloaded files."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from torchwise.errors import TorchwiseError
from torchwise.export import (ExportError, ExportMismatchError, UnsupportedOperatorError, export_and_verify,
                              export_onnx, export_torchscript, verify_onnx)
from torchwise.export.verify import verification_batches


META = {"task": "image", "problem": "classification", "class_names": ["cat", "dog", "fox"],
        "input_size": [3, 12, 12], "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3],
        "image": {"mode": "RGB", "size": 12, "center_crop": 0.875}}


class BNDropNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(32, 3))

    def forward(self, x):
        return self.head(self.features(x))


def bn_drop_net() -> nn.Module:
    torch.manual_seed(0)
    model = BNDropNet()
    with torch.no_grad():  # non-trivial running statistics, so eval-mode BN is really exercised
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model.train()  # left in train mode on purpose: export must use eval mode


class DataDependent(nn.Module):
    """Scriptable: torch.jit.script keeps the branch; a trace records one side."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return -self.fc(x) * 2


class UnscriptableDataDependent(nn.Module):
    """Scripting fails (a Python lambda attribute), so auto falls back to tracing."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.act = lambda t: t * 2

    def forward(self, x):
        if x.mean() > 0:
            return self.act(self.fc(x))
        return self.fc(x)


class QRNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        q, _r = torch.linalg.qr(self.fc(x).reshape(-1, 2, 2))
        return q.reshape(x.shape[0], -1)


def test_bn_dropout_model_exports_to_all_formats_and_matches(tmp_path):
    model = bn_drop_net()
    real = torch.randn(40, 3, 12, 12, generator=torch.Generator().manual_seed(3)) * 1.5 + 0.2
    summary = export_and_verify(model, torch.randn(2, 3, 12, 12), tmp_path, formats="onnx,torchscript,pt2",
                                metadata=META, real_inputs=real, log=None)
    assert summary.ok, {k: r.error for k, r in summary.results.items()}
    assert model.training, "export must not switch the caller's model to eval mode"
    onnx_result = summary.results["onnx"]
    # random and real inputs, each at two batch sizes
    labels = {c.label for c in onnx_result.verification.comparisons}
    assert labels == {"random, batch 1", "random, batch 5", "real, batch 3", "real, batch 16"}
    assert onnx_result.verification.max_abs < 1e-4
    assert summary.results["torchscript"].details["method"] == "script"
    assert summary.results["pt2"].verification.max_abs < 1e-5

    proto = onnx.load(str(summary.onnx_path))
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    assert opset >= 18
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [3, 12, 12]
    props = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(props["class_names"]) == ["cat", "dog", "fox"]
    assert json.loads(props["mean"]) == META["mean"]
    pre = json.loads(props["torchwise.preprocess"])
    assert pre["size"] == [12, 12] and pre["mode"] == "RGB" and pre["resize_shorter"] == 14

    # A real session, batch sizes never seen at export time, against eval-mode PyTorch.
    session = ort.InferenceSession(str(summary.onnx_path), providers=["CPUExecutionProvider"])
    model.eval()
    for n in (1, 7, 33):
        x = torch.randn(n, 3, 12, 12)
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x).numpy(), atol=1e-4, rtol=1e-3)
    report = json.loads((tmp_path / "export_report.json").read_text())
    assert report["ok"] and report["formats"]["onnx"]["max_abs_err"] < 1e-4


class GlobalPoolNet(nn.Module):
    def __init__(self, pool: int):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        self.fc = nn.Linear(4 * pool * pool, 3)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x).relu()).flatten(1))


def test_dynamic_spatial_axes(tmp_path):
    torch.manual_seed(0)
    model = GlobalPoolNet(1).eval()
    result = export_onnx(model, torch.randn(2, 3, 12, 12), tmp_path / "m.onnx", metadata=META, dynamic_spatial=True)
    assert set(result.dynamic_axes["input"]) == {0, 2, 3}
    session = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 12, 12), (3, 3, 20, 16)):
        x = torch.randn(*shape)
        with torch.no_grad():
            np.testing.assert_allclose(session.run(None, {"input": x.numpy()})[0], model(x).numpy(), atol=1e-4, rtol=1e-3)


def test_dynamic_spatial_verification_catches_a_baked_in_image_size(tmp_path):
    # AdaptiveAvgPool2d(2) is exported as a fixed-kernel pool sized for the example image:
    # another image size then fails. The verification must try another size to notice.
    torch.manual_seed(0)
    summary = export_and_verify(GlobalPoolNet(2), torch.randn(2, 3, 12, 12), tmp_path, formats="onnx,pt2",
                                dynamic_spatial=True, log=None)
    assert summary.results["pt2"].ok
    onnx_result = summary.results["onnx"]
    if onnx_result.ok:  # a future exporter may handle it; then every size must really match
        assert any("20x16" in c.label for c in onnx_result.verification.comparisons)
    else:
        assert onnx_result.error and "20x16" in onnx_result.error


def test_verification_fails_and_names_the_worst_output(tmp_path):
    model = bn_drop_net().eval()
    path = export_onnx(model, torch.randn(2, 3, 12, 12), tmp_path / "m.onnx").path
    other = bn_drop_net().eval()
    with torch.no_grad():
        other.head[2].bias.add_(0.01)  # a small, real difference
    report = verify_onnx(other, path, verification_batches(torch.randn(2, 3, 12, 12)))
    assert not report.ok
    assert 0.005 < report.max_abs < 0.02
    with pytest.raises(ExportMismatchError) as info:
        report.raise_if_failed()
    assert "logits" in str(info.value) and "max abs err" in str(info.value)


def test_trace_fallback_warns_loudly_on_data_dependent_control_flow(tmp_path):
    torch.manual_seed(0)
    model = UnscriptableDataDependent()
    example = torch.rand(4, 4) + 0.1  # positive: the trace records the first branch only
    result = export_torchscript(model, example, tmp_path / "m.pt")
    assert result.method == "trace"
    assert result.script_error  # why scripting failed is kept
    assert any("Converting a tensor to a Python boolean" in w for w in result.tracer_warnings)
    assert result.data_dependent
    assert not result.ok
    assert result.warnings and "TRACED MODEL MAY NOT FOLLOW YOUR CODE" in result.warnings[0]
    assert "negated example" in result.warnings[0]


def test_scripting_keeps_the_branch_and_forced_trace_does_not(tmp_path):
    torch.manual_seed(0)
    model = DataDependent()
    example = torch.rand(4, 4) + 0.1
    scripted = export_torchscript(model, example, tmp_path / "s.pt")
    assert scripted.method == "script" and scripted.ok and not scripted.warnings
    traced = export_torchscript(model, example, tmp_path / "t.pt", method="trace")
    assert traced.data_dependent and not traced.ok and traced.warnings

    summary = export_and_verify(model, example, tmp_path / "cli", formats="onnx,torchscript", log=None)
    assert summary.results["torchscript"].ok  # scripted
    onnx_error = summary.results["onnx"].error
    assert "data-dependent control flow" in onnx_error
    assert "if x.sum() > 0" in onnx_error and "torch.cond" in onnx_error


def test_unsupported_operator_is_named_with_what_to_try(tmp_path):
    model = QRNet().eval()
    with pytest.raises(UnsupportedOperatorError) as info:
        export_onnx(model, torch.randn(3, 4), tmp_path / "qr.onnx")
    message = str(info.value)
    assert "aten.linalg_qr" in message and "torch.linalg.qr" in message
    assert "--format torchscript" in message and "custom_translation_table" in message
    assert info.value.operators == ["aten.linalg_qr"]
    assert isinstance(info.value, (ExportError, TorchwiseError))
    # the other formats still work
    summary = export_and_verify(model, torch.randn(3, 4), tmp_path, formats="onnx,torchscript", log=None)
    assert not summary.ok and summary.results["torchscript"].ok
    assert "linalg_qr" in summary.results["onnx"].error


def test_unknown_format_is_a_user_error(tmp_path):
    with pytest.raises(TorchwiseError, match="Unknown export format"):
        export_and_verify(nn.Linear(2, 2), torch.randn(2, 2), tmp_path, formats="onnx,tflite", log=None)


def _write_run(root, *, seed: int):
    """A run directory as `torchwise train` writes it: final/ + a checkpoint with other weights."""
    from safetensors.torch import save_file

    from torchwise.models import build_model

    spec = {"name": "smallcnn", "num_classes": 3, "in_channels": 3, "input_size": [12, 12]}
    meta = dict(META, model=spec)
    run = root / "run"
    (run / "final").mkdir(parents=True)
    torch.manual_seed(seed)
    final = build_model(**spec)
    save_file({k: v.contiguous() for k, v in final.state_dict().items()}, str(run / "final" / "model.safetensors"))
    (run / "final" / "meta.json").write_text(json.dumps(meta))
    ckpt = run / "checkpoints" / "step-000000010"
    ckpt.mkdir(parents=True)
    torch.manual_seed(seed + 1)
    early = build_model(**spec)
    save_file({k: v.contiguous() for k, v in early.state_dict().items()}, str(ckpt / "model.safetensors"))
    return run, ckpt, final.eval(), early.eval()


def test_cli_exports_a_run_dir_and_a_checkpoint(tmp_path, capsys):
    from torchwise.cli.main import main

    run, ckpt, final, early = _write_run(tmp_path, seed=0)
    assert main(["export", str(run), "--format", "onnx,pt2"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime matches PyTorch" in out and "max abs err" in out
    assert (run / "export" / "model.onnx").is_file() and (run / "export" / "model.pt2").is_file()

    assert main(["export", str(ckpt), "--out", str(tmp_path / "ckpt_export")]) == 0
    x = torch.randn(4, 3, 12, 12)
    with torch.no_grad():
        expect_final, expect_early = final(x).numpy(), early(x).numpy()
    for path, expected in ((run / "export" / "model.onnx", expect_final),
                           (tmp_path / "ckpt_export" / "model.onnx", expect_early)):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, {"input": x.numpy()})[0], expected, atol=1e-4, rtol=1e-3)

    assert main(["export", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_demo_architecture_on_real_digits_exports_to_all_formats(tmp_path):
    """The demo's model (smallcnn, 1x8x8, 10 classes) with real digits as verification inputs."""
    from sklearn.datasets import load_digits

    from torchwise.models import build_model

    spec = {"name": "smallcnn", "num_classes": 10, "in_channels": 1, "input_size": [8, 8]}
    torch.manual_seed(0)
    model = build_model(**spec)
    images = torch.tensor(load_digits().images[:64], dtype=torch.float32).unsqueeze(1) / 16.0
    model.train()
    with torch.no_grad():  # one pass in train mode gives BatchNorm real running statistics
        model(images)
    model.eval()
    x = (images - 0.34) / 0.31
    meta = {"task": "image", "problem": "classification", "class_names": [str(i) for i in range(10)],
            "input_size": [1, 8, 8], "mean": [0.34], "std": [0.31], "model": spec,
            "image": {"mode": "L", "size": 8, "center_crop": 1.0}}
    summary = export_and_verify(model, x[:2], tmp_path, formats="onnx,torchscript,pt2", metadata=meta,
                                real_inputs=x, log=None)
    assert summary.ok, {k: r.error for k, r in summary.results.items()}
    for result in summary.results.values():
        assert result.verification.max_abs < 1e-4
        real = [c for c in result.verification.comparisons if c.label.startswith("real")]
        assert real and all(c.top1_agree == 1.0 for c in real)
    pre = json.loads({p.key: p.value for p in onnx.load(str(summary.onnx_path)).metadata_props}["torchwise.preprocess"])
    assert pre["resize_shorter"] == 8 and pre["mode"] == "L"  # center_crop 1.0: no resize for 8x8 digits
