"""torch.export (.pt2): the graph format PyTorch itself moves to (AOTInductor, ExecuTorch).

The saved ExportedProgram is loaded back and run against eager PyTorch before we call it done.
"""
from __future__ import annotations

import contextlib
import copy
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from torchwise.export.example_inputs import cpu_example, dynamic_shapes_for
from torchwise.export.onnx import explain_export_failure, quiet_torch_logs
from torchwise.export.staged import in_memory, staged_export
from torchwise.export.verify import DEFAULT_ATOL, DEFAULT_RTOL, VerifyReport, verify_callable


@dataclass
class Pt2Export:
    path: Path
    verification: VerifyReport

    @property
    def ok(self) -> bool:
        return self.verification.ok


def export_pt2(model, example_input: Any, path: str | Path, *, batches: Sequence[tuple[str, Any]] = (),
               dynamic_batch: bool = True, dynamic_spatial: bool = False, atol: float = DEFAULT_ATOL,
               rtol: float = DEFAULT_RTOL) -> Pt2Export:
    import os

    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).to("cpu").eval()
    example = cpu_example(example_input)
    shapes = dynamic_shapes_for(example, dynamic_batch=dynamic_batch, dynamic_spatial=dynamic_spatial)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                quiet_torch_logs(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(model, example, dynamic_shapes=shapes)
    except Exception as exc:
        if os.environ.get("TORCHWISE_EXPORT_DEBUG"):
            raise
        raise explain_export_failure(exc, "torch.export (pt2)") from None
    with staged_export(path) as staged:  # whole or not at all
        staged.write_bytes(in_memory(torch.export.save, program))  # see staged.in_memory
        loaded = torch.export.load(str(staged)).module()
    report = verify_callable("pt2", loaded, model, list(batches) or [("example", example)], atol=atol, rtol=rtol)
    return Pt2Export(path, report)
