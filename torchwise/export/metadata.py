"""What an exported model carries with it, so that it can be used with nothing else.

The run's meta.json (class names, input size, mean/std, tabular encoders) is written into the ONNX
model's `metadata_props`, one JSON value per key, plus a `torchwise.preprocess` entry that spells
out the exact evaluation pre-processing (resize, center crop, scaling, normalization). `predict`
reads only these. No torch import here: `predict` uses this module.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

PREPROCESS_KEY = "torchwise.preprocess"
INFO_KEY = "torchwise.export"
FORMAT_VERSION = 1
DEFAULT_CENTER_CROP = 0.875  # torchwise.data.transforms.val_transform's default


def eval_resize_size(size: int, center_crop: float) -> int:
    """Shorter side before the center crop; the same arithmetic as torchwise.data.transforms.eval_resize."""
    return max(size, int(round(size / center_crop)))


def preprocess_spec(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The evaluation pre-processing implied by a run's meta.json, or None when it is unknown."""
    task = meta.get("task")
    input_size = meta.get("input_size")
    mean, std = meta.get("mean"), meta.get("std")
    if task == "image" and input_size and len(input_size) == 3:
        channels, height, width = (int(v) for v in input_size)
        image = meta.get("image") or {}  # written by torchwise.data.tasks: {"mode", "size", "center_crop"}
        crop = float(image.get("center_crop", DEFAULT_CENTER_CROP))
        size = min(height, width)
        return {
            "kind": "image",
            "mode": image.get("mode") or ("L" if channels == 1 else "RGB"),
            "channels": channels,
            "size": [height, width],
            "resize_shorter": eval_resize_size(size, crop) if height == width else None,
            "center_crop": crop,
            "scale": 1.0 / 255.0,
            "mean": list(mean) if mean is not None else [0.0] * channels,
            "std": list(std) if std is not None else [1.0] * channels,
            "layout": "NCHW",
        }
    if task == "tabular":
        tab = meta.get("tabular") or {}
        n = int(input_size[0]) if input_size else len(tab.get("feature_names", []))
        return {
            "kind": "tabular",
            "features": n,
            "mean": list(mean) if mean is not None else [0.0] * n,
            "std": list(std) if std is not None else [1.0] * n,
            "target_mean": tab.get("target_mean", 0.0),
            "target_std": tab.get("target_std", 1.0),
        }
    return None


def onnx_metadata(meta: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """meta.json -> {key: JSON string} for ONNX metadata_props."""
    meta = dict(meta or {})
    props = {str(k): json.dumps(v) for k, v in meta.items()}
    spec = preprocess_spec(meta)
    if spec is not None:
        props[PREPROCESS_KEY] = json.dumps(spec)
    info = {"format_version": FORMAT_VERSION, "outputs": "logits (softmax not applied)"} | dict(extra or {})
    props[INFO_KEY] = json.dumps(info)
    return props


def read_metadata(props: Mapping[str, str]) -> dict[str, Any]:
    """ONNX metadata_props (strings) -> Python values (JSON-decoded where possible)."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        try:
            out[key] = json.loads(value)
        except (TypeError, ValueError):
            out[key] = value
    return out
