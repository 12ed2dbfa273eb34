"""What exporting a run directory needs: the model rebuilt from it, an example input of its shape,
and real, pre-processed inputs to verify the exported files on (the run's validation images, or
the data given).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from torchwise.errors import TorchwiseError
from torchwise.export.metadata import preprocess_spec
from torchwise.export.preprocess import collect_images, preprocess_csv, preprocess_readable


def find_run_dir(path: Path) -> Path | None:
    """The run directory at or above `path` (the one holding final/meta.json), or None."""
    for candidate in (path, *path.parents):
        if (candidate / "final" / "meta.json").is_file():
            return candidate
    return None


def load_for_export(path: str | Path):
    """(model in eval mode, meta, description) from a run directory, a checkpoint directory or a
    .safetensors file inside a run."""
    from torchwise.models import model_from_run

    path = Path(path)
    if not path.exists():
        raise TorchwiseError("The run directory or checkpoint does not exist.", values={"path": str(path)},
                             fix="pass a run directory written by `torchwise train` (it holds final/meta.json)")
    run_dir = find_run_dir(path if path.is_dir() else path.parent)
    if run_dir is None:
        raise TorchwiseError("No final/meta.json found in or above this path, so the model cannot be rebuilt.",
                             values={"path": str(path)},
                             fix="pass a run directory written by `torchwise train` or a checkpoint inside one")
    weights: Path | None = None
    if path.is_file():
        weights = path
    elif path.resolve() != run_dir.resolve():
        weights = path / "model.safetensors"
        if not weights.is_file():
            raise TorchwiseError("The checkpoint directory has no model.safetensors.", values={"path": str(path)},
                                 fix="pass a checkpoint directory such as RUN/checkpoints/step-000000123")
    model, meta = model_from_run(run_dir, weights_file=weights)
    source = f"checkpoint {weights}" if weights else f"run {run_dir} (final weights)"
    return model.eval(), meta, source


def example_input_for(meta: Mapping[str, Any], batch: int = 2):
    import torch

    size = meta.get("input_size")
    if not size:
        raise TorchwiseError("meta.json has no input_size, so the input shape is unknown.",
                             values={"keys": sorted(meta)}, fix="pass the model and an example input to export_and_verify()")
    return torch.randn(batch, *[int(s) for s in size], generator=torch.Generator().manual_seed(0))


def _data_candidates(meta: Mapping[str, Any], run_dir: Path | None) -> list[str]:
    found = []
    for key in ("data", "data_path", "data_dir", "dataset"):
        value = meta.get(key)
        if isinstance(value, dict):
            value = value.get("path") or value.get("root")
        if isinstance(value, str):
            found.append(value)
    if run_dir is not None and (run_dir / "config.json").is_file():
        try:
            config = json.loads((run_dir / "config.json").read_text())
        except ValueError:
            config = {}
        for key in ("data", "data_path", "data_dir"):
            value = config.get(key) if isinstance(config, dict) else None
            if isinstance(value, dict):
                value = value.get("path") or value.get("root")
            if isinstance(value, str):
                found.append(value)
    return found


def real_inputs_for(meta: Mapping[str, Any], data: str | Path | None, run_dir: Path | None = None, limit: int = 64):
    """(pre-processed real examples as a tensor, or None; a note saying where they come from, or why
    there are none): the run's validation images, else image files/folders or a CSV from `data` (or
    the data the run names)."""
    import numpy as np
    import torch

    spec = preprocess_spec(meta)
    if spec is None:
        return None, "no pre-processing known for this task"
    if not data and spec["kind"] == "image" and run_dir is not None and (run_dir / "split.json").is_file():
        found = _validation_images(run_dir, spec, limit)
        if found is not None:
            return found
    candidates = [str(data)] if data else _data_candidates(meta, run_dir)
    for candidate in candidates:
        path = Path(candidate)
        x = _examples_from(path, meta, spec, limit) if path.exists() else None
        if x is not None:
            return torch.from_numpy(np.ascontiguousarray(x)), f"{len(x)} real examples from {path}"
    return None, "no data given (use --data to verify on real inputs too)"


def _validation_images(run_dir: Path, spec: Mapping[str, Any], limit: int):
    """(tensor, note) from the run's own validation images (real inputs the model never trained on),
    or None when split.json lists none that can be read."""
    import torch

    try:
        split = json.loads((run_dir / "split.json").read_text())
        root = Path(split["root"])
        files = [str(root / item[0]) for item in split.get("val", [])]
        files = [f for f in files if Path(f).is_file()]
    except (ValueError, KeyError, TypeError, IndexError):
        files = []
    if not files:
        return None
    step = max(1, len(files) // limit)
    x, _good, _bad = preprocess_readable(files[::step][:limit], spec)
    if x is None:
        return None
    return torch.from_numpy(x), f"{len(x)} validation images of the run ({root})"


def _examples_from(path: Path, meta: Mapping[str, Any], spec: Mapping[str, Any], limit: int):
    """Up to `limit` pre-processed examples (an array) from an image file/folder or a CSV, or None."""
    if spec["kind"] != "image":
        x, _rows = preprocess_csv(str(path), meta, spec)
        return x[:limit]
    files = collect_images([str(path)])
    if not files:
        return None
    step = max(1, len(files) // limit)
    # An unreadable image is left out: verification needs real inputs, not every one of them.
    x, _good, _bad = preprocess_readable(files[::step][:limit], spec)
    return x
