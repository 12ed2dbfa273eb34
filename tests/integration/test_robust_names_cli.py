"""Names that are not UTF-8 (a Latin-1 archive unpacked on Linux: b"caf\\xe9.png") through the whole CLI chain:
train, resume, eval, export and predict work, and every message, report and CSV shows the names readably."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from conftest import run_cli


def _latin1(name: bytes) -> str:
    return os.fsdecode(name)  # the name Python hands over for those bytes (surrogate escapes)


def _folder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    data = root / _latin1(b"donn\xe9es")
    for c, cls in enumerate(("cat", _latin1(b"ni\xf1o"), "dog")):
        (data / cls).mkdir(parents=True)
        for i in range(10):
            pixels = np.clip(rng.normal(60 + 70 * c, 20, (16, 16, 3)), 0, 255).astype(np.uint8)
            name = _latin1(b"caf\xe9-%d.png" % i) if i % 2 else f"{i}.png"
            Image.fromarray(pixels).save(data / cls / name, format="PNG")
    (data / "cat" / _latin1(b"cass\xe9.png")).write_bytes(b"not an image")
    return data


def _ok(proc, *must_say: str) -> str:
    text = proc.stdout + proc.stderr  # decoded as strict UTF-8 by run_cli: raw Latin-1 bytes would fail here
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    for phrase in must_say:
        assert phrase in text, f"{phrase!r} not shown:\n{text[-3000:]}"
    return text


def test_latin1_names_train_resume_eval_export_predict(tmp_path):
    data = _folder(tmp_path)
    run = tmp_path / _latin1(b"r\xe9sultats")
    common = ("--data", data, "--out", run, "--batch-size", "8", "--seed", "0", "--set", "train.threads=1")
    # stopped after 4 of its 6 steps, then continued: checkpoints and weights are read back from the folder
    _ok(run_cli("train", *common, "--epochs", "2", "--checkpoint-every", "2", "--set", "train.max_steps=4",
                timeout=240), "3 classes", "cassé.png")
    _ok(run_cli("train", *common, "--epochs", "2", "--checkpoint-every", "2", "--resume", timeout=240), "done")
    report = (run / "report.html").read_text(encoding="utf-8")
    assert "niño" in report and "cassé.png" in report
    _ok(run_cli("eval", "--run", run, "--data", data, timeout=240), "niño")
    _ok(run_cli("export", run, timeout=240))
    new = tmp_path / "new"
    new.mkdir()
    Image.fromarray(np.full((16, 16, 3), 200, np.uint8)).save(new / _latin1(b"perro\xf1.png"), format="PNG")
    out = tmp_path / "pred.csv"
    _ok(run_cli("predict", run / "export" / "model.onnx", new, "--out", out, timeout=240))
    assert "perroñ.png" in out.read_text(encoding="utf-8")
