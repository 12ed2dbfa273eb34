"""Saving and loading model weights safely.

Weights are stored as safetensors (no pickle, so loading a file never runs code). Legacy `.pt`
files are read with `torch.load(weights_only=True)`. Every weights file torchwise reads is opened
here (`load_state_dict`), which checks the bytes first, so a missing, empty, truncated or foreign
file is refused with what is wrong with it instead of a library's traceback.

Wrappers: DDP/DataParallel put their model under `module`, torch.compile under `_orig_mod`, FSDP
and activation checkpointing under their own attributes. Saving drops those segments by the
wrapper's type, never by name, so a user's own attribute called `module` (EMA models, wrappers)
is kept; loading renames a file's keys only where that makes them fit the target model (a leading
`model.` of a training module that held the network, a LightningModule's say, is one such rename).
"""
from __future__ import annotations

import itertools
import pickle
import json
import re
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from torchwise.errors import CheckpointError, ConfigError
from torchwise.file_names import utf8_reachable

# The attribute each wrapper keeps the wrapped model under; the classes are matched by name so
# that neither torch._dynamo nor torch.distributed has to be imported to recognise them.
_WRAPPER_ATTRS_BY_CLASS = {
    "OptimizedModule": "_orig_mod",                        # torch.compile
    "FullyShardedDataParallel": "_fsdp_wrapped_module",    # FSDP (1)
    "CheckpointWrapper": "_checkpoint_wrapped_module",     # activation checkpointing
    "OffloadWrapper": "_checkpoint_wrapped_module",
}
WRAPPER_ATTRS = ("module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")
WRAPPER_PREFIXES = tuple(a + "." for a in WRAPPER_ATTRS)


def _wrapper_attr(module: nn.Module) -> str | None:
    """The attribute under which `module` wraps another model, when it is a wrapper."""
    if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        return "module"
    attr = _WRAPPER_ATTRS_BY_CLASS.get(type(module).__name__)
    return attr if attr and isinstance(getattr(module, attr, None), nn.Module) else None


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's model inside DDP / DataParallel / torch.compile / FSDP wrappers."""
    while (attr := _wrapper_attr(model)) is not None:
        model = getattr(model, attr)
    return model


def _wrapper_paths(model: nn.Module) -> set[str]:
    """Dotted key prefixes that end in a segment a wrapper inserted: {'module', 'head._orig_mod', ...}."""
    paths = set()
    for name, module in model.named_modules(remove_duplicate=False):
        attr = _wrapper_attr(module)
        if attr is not None:
            paths.add(f"{name}.{attr}" if name else attr)
    return paths


def _drop_segments(key: str, paths: set[str]) -> str:
    if not paths:
        return key
    parts = key.split(".")
    return ".".join(p for i, p in enumerate(parts) if ".".join(parts[:i + 1]) not in paths)


def clean_key_names(model: nn.Module) -> dict[str, str]:
    """{key without wrapper segments: the model's own state-dict key} for every entry of `model`."""
    paths = _wrapper_paths(model)
    return {_drop_segments(k, paths): k for k in model.state_dict()}


# The attribute a training module commonly holds the network under (a LightningModule's self.model,
# timm's and others' checkpoint dicts): a leading segment of that name may be dropped like a wrapper's.
HOLDER_ATTRS = ("model",)


def _unwrapped_candidates(key: str, limit: int = 6):
    """`key` with wrapper-named segments (and a leading holder) removed, fewest removals first (a file
    from a wrapped model we know nothing about: only the target's keys can tell which `module` a
    wrapper added)."""
    parts = key.split(".")
    spots = [i for i, p in enumerate(parts[:-1]) if p in WRAPPER_ATTRS or (i == 0 and p in HOLDER_ATTRS)][:limit]
    for n in range(1, len(spots) + 1):
        for drop in itertools.combinations(spots, n):
            yield ".".join(p for i, p in enumerate(parts) if i not in drop)


def match_keys(state: Mapping[str, torch.Tensor], model: nn.Module
               ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(entries renamed to `model`'s own keys, entries that name nothing in it).

    A key is taken as it is when it names an entry of the model (written with or without the
    model's own wrappers); only a key that names nothing has wrapper segments removed, and only
    when the result names an entry no other key of the file already filled."""
    by_clean = clean_key_names(model)
    own = set(by_clean.values())
    matched: dict[str, torch.Tensor] = {}
    pending = []
    for key, value in state.items():
        target = by_clean.get(key, key if key in own else None)
        if target is not None and target not in matched:
            matched[target] = value
        else:
            pending.append((key, value))
    unexpected: dict[str, torch.Tensor] = {}
    for key, value in pending:
        target = next((by_clean[c] for c in _unwrapped_candidates(key)
                       if c in by_clean and by_clean[c] not in matched), None)
        if target is None:
            unexpected[key] = value
        else:
            matched[target] = value
    return matched, unexpected


def strip_wrapper_prefixes(state: Mapping[str, torch.Tensor], model: nn.Module | None = None
                           ) -> dict[str, torch.Tensor]:
    """`state` with the keys a wrapper changed put back. With `model`: renamed to fit its keys (see
    match_keys; what fits nothing is kept as it is). Without a model only what must be a wrapper's
    goes: a leading 'module.' / '_orig_mod.' ... that every key shares (a whole wrapped model)."""
    if model is not None:
        matched, unexpected = match_keys(state, model)
        return {**matched, **unexpected}
    state = dict(state)
    while state:
        first = next(iter(state)).split(".", 1)[0] + "."
        if first not in WRAPPER_PREFIXES or not all(k.startswith(first) for k in state):
            return state
        state = {k[len(first):]: v for k, v in state.items()}
    return state


def model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """A state dict ready for safetensors: no wrapper segments, contiguous, no two entries sharing memory."""
    paths = _wrapper_paths(model)
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for key, tensor in model.state_dict().items():
        t = tensor.detach()
        ident = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else None
        # safetensors refuses tensors that share storage (tied weights); store a copy instead.
        if ident is not None and ident in seen:
            t = t.clone()
        elif ident is not None:
            seen.add(ident)
        out[_drop_segments(key, paths)] = t.contiguous()
    return out


def save_model(model: nn.Module, path: str | Path, metadata: Mapping[str, Any] | None = None) -> Path:
    """Write the model's weights as safetensors (atomically). `metadata` values are stored as JSON strings."""
    _require_module(model, "save_model(model, path)")
    return save_state_dict(model_state_dict(model), path, metadata)


def _require_module(model: Any, call: str) -> None:
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{call} needs the model as a torch.nn.Module.", values={"model": type(model).__name__},
                          fix="Pass the network itself (build it first, e.g. model = MyNet()); for a path, see the "
                              "order of the arguments: " + call + ".")


def save_state_dict(state: Mapping[str, torch.Tensor], path: str | Path,
                    metadata: Mapping[str, Any] | None = None, *, root: str | Path | None = None) -> Path:
    """Write `state` as it is named (keys are renamed only by save_model, which knows the wrappers;
    loading fits a wrapped model's keys to the target). The file gets the umask's mode, like any
    file the user writes. `root`: the run folder `path` lies in (never written through a link out of it)."""
    from safetensors.torch import save_file

    from torchwise.files import atomic_write_path

    path = Path(path)
    meta = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items()}
    with atomic_write_path(path, root=Path(root) if root is not None else None) as tmp:
        save_file(tensors, str(tmp), metadata=meta or None)
    return path


# --------------------------------------------------------------------------- reading a weights file

def _refuse(what: str, path: Path, fix: str, **values: Any) -> CheckpointError:
    return CheckpointError(what, values={"path": str(path), **values}, fix=fix)


_RESAVE = ("re-save the weights from the code that trained them with torchwise.save_model(model, "
           "'model.safetensors') or torch.save(model.state_dict(), 'model.pt')")
_DAMAGED = ("the file was cut off while being written or copied (a stopped save, a full disk, an "
            "interrupted download): use an earlier checkpoint (RUN/checkpoints/step-...) or copy the file again")


def resolve_weights_path(path: str | Path) -> Path:
    """A weights file: `path` itself, or the model.safetensors of a checkpoint or run directory."""
    path = Path(path)
    if path.is_dir():
        for candidate in ("model.safetensors", "final/model.safetensors"):
            if (path / candidate).is_file():
                return path / candidate
        raise CheckpointError(
            "No weights file found in this directory.",
            values={"directory": str(path), "looked for": "model.safetensors, final/model.safetensors"},
            fix="Point to a .safetensors/.pt file, a checkpoint directory or a run directory.",
        )
    if not path.exists():
        raise _refuse("Weights file not found.", path, "Check the path.")
    if not path.is_file():
        raise _refuse("The weights path is not a regular file.", path, "Point to a .safetensors or .pt file.")
    return path


def _describe_foreign(head: bytes) -> str | None:
    """What a file that is not weights looks like it is, from its first bytes."""
    if head.startswith(b"\x08") and len(head) > 2:
        return "an ONNX model (torchwise predict reads it; it holds no trainable weights)"
    sample = head[:512]
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text and all(c.isprintable() or c in "\r\n\t" for c in text):
        first = text.strip().splitlines()[0][:60] if text.strip() else ""
        return f"a text file (it begins with {first!r})"
    return None


def sniff_weights_file(path: Path) -> str:
    """'safetensors', 'torch-zip' or 'torch-pickle' from the file's bytes (not its name), or a
    CheckpointError saying what the file is instead: empty, truncated, text, ONNX, unknown."""
    size = path.stat().st_size
    if size == 0:
        raise _refuse("The weights file is empty (0 bytes).", path, _DAMAGED)
    with path.open("rb") as handle:
        head = handle.read(4096)
    if head.startswith(b"PK\x03\x04"):
        import zipfile

        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, OSError):
            raise _refuse(f"The weights file is truncated or damaged: a torch.save archive without its end "
                          f"({size} bytes).", path, _DAMAGED) from None
        return "torch-zip"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "torch-pickle"  # torch.save(..., _use_new_zipfile_serialization=False)
    if size >= 8 and head[8:9] == b"{":
        header_len = int.from_bytes(head[:8], "little")
        if 8 + header_len > size:
            raise _refuse(f"The weights file is truncated or not a safetensors file ({size} bytes; its "
                          f"header alone needs {8 + header_len}).", path, _DAMAGED)
        with path.open("rb") as handle:
            handle.seek(8)
            raw = handle.read(header_len)
        try:
            header = json.loads(raw)
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise _refuse(f"The weights file is truncated or not a safetensors file ({size} bytes; its "
                          "header is not valid).", path, _DAMAGED) from None
        needed = 8 + header_len + max(ends, default=0)
        if size < needed:
            raise _refuse(f"The weights file is truncated ({size} bytes; its header describes {needed}).",
                          path, _DAMAGED, tensors=len(ends))
        return "safetensors"
    kind = _describe_foreign(head)
    raise _refuse(f"This is not a weights file: it is {kind}." if kind else
                  f"The file is truncated or not a weights file (safetensors or torch.save) ({size} bytes, "
                  f"it begins with {head[:8].hex(' ')}).", path,
                  "pass a .safetensors file written by torchwise (RUN/final/model.safetensors) or a state "
                  "dict saved with torch.save(model.state_dict(), path)")


def _unpickle_refusal(path: Path, exc: Exception) -> CheckpointError:
    """Our own words for torch's weights_only refusal (whose advice, unpickling anyway, we do not give)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    name = found.group(1) if found else None
    is_model = bool(name) and (name.startswith("torch.nn.") or _names_a_module_class(name))
    holds = (f"a whole pickled model object ({name})" if is_model else
             f"pickled Python objects (it names {name})" if name else "pickled Python objects")
    return CheckpointError(
        f"This file cannot be loaded as plain weights: it holds {holds}, not only tensors.",
        values={"path": str(path), "why refused": "unpickling it would run code named in the file; torchwise "
                "reads tensors only (torch.load weights_only=True)"},
        fix=f"{_RESAVE}. If you trust the file and have the code of its classes, convert it once yourself: "
            "model = torch.load(path, weights_only=False); torchwise.save_model(model, 'model.safetensors')",
    )


def _names_a_module_class(dotted: str) -> bool:
    import sys

    module_name, _, attr = dotted.rpartition(".")
    obj = getattr(sys.modules.get(module_name), attr, None)  # only modules already imported: no import runs
    return isinstance(obj, type) and issubclass(obj, nn.Module)


def _state_dict_in(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(obj, Mapping):
        # common containers: {"state_dict": ...}, {"model": ...}, {"model_state_dict": ...}
        for key in ("state_dict", "model_state_dict", "model"):
            if key in obj and isinstance(obj[key], Mapping):
                obj = obj[key]
                break
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return dict(obj)
        if not obj:
            return {}
        others = sorted({type(v).__name__ for v in obj.values() if not isinstance(v, torch.Tensor)})
        raise _refuse("The file holds no state dict of tensors: a dict with other values.", path,
                      "Save weights with torch.save(model.state_dict(), path) or torchwise.save_model(model, path).",
                      keys=", ".join(map(str, list(obj)[:8])), **{"value types": ", ".join(others)})
    raise _refuse("The file holds no state dict of tensors.", path,
                  "Save weights with torch.save(model.state_dict(), path) or torchwise.save_model(model, path).",
                  found=type(obj).__name__)


def load_state_dict(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Read weights from .safetensors, or from a .pt/.pth file without executing pickled code.

    The format is decided by the file's content, not its name (both readers are safe)."""
    path = resolve_weights_path(path)
    kind = sniff_weights_file(path)
    if kind == "safetensors":
        from safetensors.torch import load_file

        try:
            with utf8_reachable(path) as name:  # (a file or folder named in Latin-1: Rust takes UTF-8 names only)
                return load_file(name, device=str(map_location))
        except Exception as exc:  # SafetensorError, OSError: damaged in a way the size check cannot see
            raise _refuse("The safetensors file is damaged and cannot be read.", path, _DAMAGED,
                          reason=str(exc).splitlines()[0][:200], size=f"{path.stat().st_size} bytes") from None
    try:
        with path.open("rb") as handle:  # a handle: torch.load must not choose a reader by the file's name
            obj = torch.load(handle, map_location=map_location, weights_only=True)
    except Exception as exc:
        if isinstance(exc, pickle.UnpicklingError) and "Weights only load failed" in str(exc):
            raise _unpickle_refusal(path, exc) from None
        raise _refuse("This file cannot be loaded as plain weights: torch.load cannot read it (damaged, or "
                      "not written by torch.save).", path, f"{_DAMAGED}; or {_RESAVE}",
                      reason=_first_line(exc), size=f"{path.stat().st_size} bytes") from None
    return _state_dict_in(obj, path)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


# --------------------------------------------------------------------------- loading into a model

def apply_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor], *, source: str = "the checkpoint",
                     strict: bool = True) -> nn.Module:
    """Load `state` into `model`, explaining a mismatch in plain words instead of PyTorch's wall of keys."""
    matched, unexpected_entries = match_keys(state, model)
    by_clean = clean_key_names(model)
    expected = model.state_dict()
    missing = [clean for clean, own in by_clean.items() if own not in matched]
    unexpected = list(unexpected_entries)
    shape_mismatch = [
        f"{clean}: file {tuple(matched[own].shape)} vs model {tuple(expected[own].shape)}"
        for clean, own in by_clean.items()
        if own in matched and tuple(matched[own].shape) != tuple(expected[own].shape)
    ]
    if shape_mismatch or (strict and (missing or unexpected)):
        raise CheckpointError(
            f"The weights in {source} do not fit this model.",
            values={
                "missing in file": _short_list(missing),
                "unexpected in file": _short_list(unexpected),
                "shape mismatches": _short_list(shape_mismatch),
                "likely cause": likely_cause(missing, unexpected, shape_mismatch),
            },
            fix="Build the model with the same architecture and number of classes as when the weights were "
            "saved; to load a backbone only (transfer learning) use strict=False and replace the head.",
        )
    model.load_state_dict(matched, strict=False)
    return model


def load_model(path: str | Path, model: nn.Module, *, strict: bool = True,
               map_location: str | torch.device = "cpu") -> nn.Module:
    """Load weights from `path` (file, checkpoint dir or run dir) into `model` and return it."""
    _require_module(model, "load_model(path, model)")
    return apply_state_dict(model, load_state_dict(path, map_location), source=str(path), strict=strict)


def _short_list(items: list[str], limit: int = 8) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown + (f" ... and {len(items) - limit} more" if len(items) > limit else "")


def likely_cause(missing: list[str], unexpected: list[str], shapes: list[str]) -> str:
    if shapes and not missing and not unexpected:
        return "same architecture, different sizes (e.g. another number of classes or input channels)"
    if missing and unexpected and len(missing) == len(unexpected):
        return "same number of tensors under different names: a renamed layer or a different wrapper"
    if missing and not unexpected:
        return "the file holds only part of the model (a backbone without a head?)"
    if unexpected and not missing:
        return "the file is from a bigger model, or holds extra entries"
    return "the file comes from a different model architecture"
