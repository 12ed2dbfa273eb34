"""What the loggers of other tools (MLflow, Weights & Biases) share: their package, which may be missing,
and the id of their run, kept in the run folder so that a resumed run continues the same one."""
from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from torchwise.errors import TorchwiseError
from torchwise.files import write_text


def missing_package(logger: str, module: str, install: str) -> TorchwiseError:
    return TorchwiseError(f"The {logger!r} logger needs the {module!r} package, which is not installed.",
                          values={"logger": logger, "package": module},
                          fix=f"Install it ({install}), or drop {logger!r} from loggers.")


def require_installed(logger: str, module: str, install: str) -> None:
    """Checked before anything is written, so a missing package does not leave half a run folder."""
    if importlib.util.find_spec(module) is None:
        raise missing_package(logger, module, install)


def import_package(logger: str, module: str, install: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_package(logger, module, install) from exc


def stored_run(run_dir: Path | None, filename: str) -> dict[str, Any]:
    """The run kept by a logger in the run folder ({} when there is none, or it cannot be read)."""
    if run_dir is None or not (run_dir / filename).is_file():
        return {}
    try:
        data = json.loads((run_dir / filename).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def store_run(run_dir: Path | None, filename: str, data: dict[str, Any]) -> None:
    if run_dir is None:
        return
    # atomic: a crash while it is written leaves the previous id, never half a file (nor a file out of the run folder)
    write_text(run_dir / filename, json.dumps(data, indent=2, sort_keys=True) + "\n", root=run_dir)
