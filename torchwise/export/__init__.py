"""Export to ONNX / TorchScript / torch.export (.pt2), each verified against PyTorch.

    from torchwise.export import export_and_verify, export_run
    summary = export_and_verify(model, example_input, "out/", formats=("onnx", "torchscript", "pt2"),
                                metadata=meta, real_inputs=x_val)
    summary.ok, summary.onnx_path, summary.results["onnx"].verification.max_abs

Names are resolved lazily: importing this package (e.g. from `torchwise predict`, which must not
need torch) imports nothing heavy.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "export_and_verify": "torchwise.export.api",
    "export_run": "torchwise.export.api",
    "load_for_export": "torchwise.export.run_dir",
    "ExportSummary": "torchwise.export.api",
    "export_onnx": "torchwise.export.onnx",
    "ExportError": "torchwise.export.onnx",
    "UnsupportedOperatorError": "torchwise.export.onnx",
    "verify_onnx": "torchwise.export.verify",
    "ExportMismatchError": "torchwise.export.verify",
    "export_torchscript": "torchwise.export.torchscript",
    "export_pt2": "torchwise.export.pt2",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchwise.export' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
