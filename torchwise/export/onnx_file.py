"""Opening an .onnx file in onnxruntime: the one place `predict` and export verification do it.

The file's bytes are checked first, so an empty, cut-off or foreign file (weights, a text file)
is refused with what it is instead of onnxruntime's "Protobuf parsing failed". No torch import:
`predict` runs without torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from torchwise.errors import TorchwiseError, is_out_of_memory, out_of_memory

_REEXPORT = ("export the run again (torchwise export RUNDIR writes RUNDIR/export/model.onnx); if the file "
             "was copied, copy it again: it was cut off or changed on the way")


def _looks_like(head: bytes) -> str | None:
    """What a file that cannot be ONNX is, from its first bytes."""
    if not head:
        return None
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        return "a torch.save file (PyTorch weights or a TorchScript/.pt2 archive), not ONNX"
    if len(head) > 8 and head[8:9] == b"{":
        return "a safetensors weights file, not ONNX"
    try:
        text = head[:512].decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.strip() and all(c.isprintable() or c in "\r\n\t" for c in text):
        return f"a text file (it begins with {text.strip().splitlines()[0][:60]!r}), not ONNX"
    if head[:1] != b"\x08":  # a ModelProto starts with field 1 (ir_version), a varint: tag byte 0x08
        return f"not an ONNX model (it begins with {head[:8].hex(' ')})"
    return None


def open_session(path: str | Path) -> Any:
    """An onnxruntime CPU InferenceSession for `path`, or a TorchwiseError saying what the file is."""
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise TorchwiseError("The ONNX model file does not exist." if not path.exists() else
                             "The ONNX model path is not a regular file.", values={"path": str(path)},
                             fix="pass a .onnx file written by `torchwise export`, or its run directory")
    size = path.stat().st_size
    if size == 0:
        raise TorchwiseError("The ONNX model file is empty (0 bytes).", values={"path": str(path)}, fix=_REEXPORT)
    with path.open("rb") as handle:
        head = handle.read(4096)
    foreign = _looks_like(head)
    if foreign:
        raise TorchwiseError(f"This file is {foreign}.", values={"path": str(path), "size": f"{size} bytes"},
                             fix="pass the .onnx file written by `torchwise export` (RUNDIR/export/model.onnx)")
    try:
        from torchwise.file_names import utf8_reachable

        with utf8_reachable(path) as name:  # (a folder named in Latin-1: onnxruntime takes UTF-8 names only)
            return ort.InferenceSession(name, providers=["CPUExecutionProvider"])
    except Exception as exc:  # InvalidProtobuf, Fail, NoSuchFile (external data): onnxruntime's own classes
        if is_out_of_memory(exc):  # a whole file that does not fit is not a damaged one
            raise out_of_memory(exc, f"loading the ONNX model ({size} bytes) into onnxruntime", path=str(path),
                                fix="load it on a machine with more free memory; close what else uses this "
                                    "one's (or raise the process' memory limit, ulimit -v)") from exc
        reason = str(exc).split(" failed:")[-1].strip().splitlines()
        raise TorchwiseError(f"The ONNX model file is truncated or damaged: onnxruntime cannot load it "
                             f"({size} bytes).", values={"path": str(path),
                                                         "reason": (reason[0] if reason else type(exc).__name__)[:200]},
                             fix=_REEXPORT) from None
