"""A run laid out as `torchwise train` writes one (an MLP on 8x8 colour images), exported to ONNX once."""
from __future__ import annotations

import json
from pathlib import Path
import torch
from PIL import Image
import torchwise


COLORS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220)}


def write_png(path: Path, color, size=(8, 8), mode="RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path)
    return path


def make_run(tmp_path_factory):
    """A run laid out as `torchwise train` writes it (final/model.safetensors + final/meta.json, an MLP
    on 8x8 RGB images, 3 colour classes), exported to ONNX once."""
    from torchwise.export.api import export_run
    from torchwise.models import build_model

    root = tmp_path_factory.mktemp("robust")
    meta = {"task": "image", "problem": "classification", "class_names": list(COLORS),
            "input_size": [3, 8, 8], "mean": [0.5] * 3, "std": [0.25] * 3,
            "image": {"mode": "RGB", "size": 8, "center_crop": 1.0},
            "model": {"name": "mlp", "num_classes": 3, "in_channels": 3, "input_size": [8, 8]}}
    torch.manual_seed(0)
    model = build_model(**meta["model"])
    run_dir = root / "run"
    torchwise.save_model(model, run_dir / "final" / "model.safetensors")
    (run_dir / "final" / "meta.json").write_text(json.dumps(meta))
    images = root / "images"
    for name, color in COLORS.items():
        for i in range(4):
            write_png(images / name / f"{name}_{i}.png", tuple(c + 5 * i for c in color))
    # Verified on real images, two of which cannot be read: they are left out, the export goes on.
    (images / "red" / "cut.png").write_bytes((images / "red" / "red_0.png").read_bytes()[:30])
    (images / "blue" / "empty.png").write_bytes(b"")
    notes: list[str] = []
    summary = export_run(run_dir, data=images, log=notes.append)
    assert summary.ok, summary.to_dict()
    (images / "red" / "cut.png").unlink()
    (images / "blue" / "empty.png").unlink()
    return {"dir": run_dir, "onnx": run_dir / "export" / "model.onnx", "meta": meta, "model": model,
            "images": images, "root": root, "export_notes": notes}
