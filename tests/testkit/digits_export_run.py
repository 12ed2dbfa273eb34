"""A digits run laid out as `torchwise train` writes one, trained in this process and exported with the CLI."""
from __future__ import annotations

import json
from pathlib import Path
import torch
from safetensors.torch import save_file
from torchwise.cli.main import main
from torchwise.export.metadata import preprocess_spec
from torchwise.export.preprocess import preprocess_images


def _train(model, x, y, steps: int = 300):
    # a fixed number of full-batch steps (a few seconds of CPU): a cap in seconds made the accuracy the later
    # tests ask for depend on how busy the machine was
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return model.eval()


def make_digits_run(tmp_path_factory):
    """A digits run written the way `torchwise train` writes one: PNG folders, split.json,
    final/model.safetensors + final/meta.json; then exported with the CLI."""
    from sklearn.model_selection import train_test_split

    from torchwise.data.digits import write_digits
    from torchwise.models import build_model

    root = tmp_path_factory.mktemp("digits")
    data = write_digits(root / "data")
    files = sorted(str(p.relative_to(data)) for p in data.glob("*/digit_*.png"))
    labels = [int(Path(f).parent.name) for f in files]
    train, val = train_test_split(list(zip(files, labels)), test_size=0.2, stratify=labels, random_state=0)
    meta = {"task": "image", "problem": "classification", "class_names": [str(i) for i in range(10)],
            "input_size": [1, 8, 8], "mean": [0.0], "std": [1.0],
            "image": {"mode": "L", "size": 8, "center_crop": 0.875},
            "model": {"name": "mlp", "num_classes": 10, "in_channels": 1, "input_size": [8, 8]}}
    raw = preprocess_images([str(data / f) for f, _ in train], preprocess_spec(meta))  # mean 0, std 1: raw [0, 1]
    meta["mean"], meta["std"] = [float(raw.mean())], [float(raw.std())]
    spec = preprocess_spec(meta)
    x_train = torch.from_numpy(preprocess_images([str(data / f) for f, _ in train], spec))
    y_train = torch.tensor([label for _, label in train])
    torch.manual_seed(0)
    model = _train(build_model(**meta["model"]), x_train, y_train)

    run = root / "run"
    (run / "final").mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(run / "final" / "model.safetensors"))
    (run / "final" / "meta.json").write_text(json.dumps(meta))
    (run / "split.json").write_text(json.dumps({"kind": "image", "root": str(data), "train": train, "val": val}))
    val_dir = root / "val"
    for f, _ in val:
        (val_dir / Path(f).parent).mkdir(parents=True, exist_ok=True)
        (val_dir / f).write_bytes((data / f).read_bytes())
    assert main(["export", str(run), "--format", "onnx"]) == 0
    onnx_path = run / "export" / "model.onnx"
    assert onnx_path.is_file()
    return {"run": run, "onnx": onnx_path, "val_dir": val_dir, "val": val, "model": model, "meta": meta}
