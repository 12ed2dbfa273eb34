"""Which frames are the user's code: the line a finding points at, and who called a hook.

A finding names a line of the user's script, never one inside torch, the standard library, an installed
package or torchwise itself. Everything in the checker that names a line (the watcher's hooks, the
library-call probes, the detectors, the script runner) asks this module; it imports nothing of the
checker, so any of them may.
"""
from __future__ import annotations

import inspect
import os
import sys
import sysconfig
from typing import Any

import torch

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # torchwise/


def library_dirs() -> tuple[str, ...]:
    """The folders whose files are never the user's: torch, torchwise, the standard library, installed packages."""
    dirs = {os.path.dirname(torch.__file__), _PACKAGE_DIR}
    # "scripts": console scripts (.venv/bin/torchwise) are entry points, never the line a finding is about
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
        try:
            dirs.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    for p in sys.path:
        if p.endswith(("site-packages", "dist-packages")):
            dirs.add(p)
    return tuple(sorted(os.path.realpath(d) + os.sep for d in dirs if d))


_LIB_DIRS = library_dirs()
_USER_CACHE: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    """Whether code in `filename` is the user's (not a library's, not ours; '<string>' and co. are not)."""
    hit = _USER_CACHE.get(filename)
    if hit is None:
        if filename.startswith("<"):
            hit = False
        else:
            real = os.path.realpath(filename)
            hit = not real.startswith(_LIB_DIRS)
        _USER_CACHE[filename] = hit
    return hit


def show_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies below it, else as given."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def user_where(skip: int = 1) -> str | None:
    """'file.py:LINE' of the innermost frame that belongs to the user's code (not torch, not us)."""
    frame = sys._getframe(skip)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return f"{show_path(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def where_defined(obj: Any) -> str | None:
    """'file.py:LINE' where a class (its __init__) or function is defined, if it is user code.

    Works for classes defined in a script run as __main__ under runpy, where inspect cannot find
    the source module: the line comes from the code object of one of the class's functions.
    """
    if inspect.isclass(obj):
        funcs = [obj.__dict__.get(n) for n in ("__init__", "forward")] + list(vars(obj).values())
        func = next((f for f in funcs if inspect.isfunction(f)), None)
        if func is None:
            return None
    elif inspect.isfunction(obj) or inspect.ismethod(obj):
        func = obj
    else:
        return where_defined(type(obj))
    code = getattr(func, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    return f"{show_path(code.co_filename)}:{code.co_firstlineno}"


_TORCH_DIR = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep
_OWN_PACKAGE = os.path.realpath(_PACKAGE_DIR) + os.sep
# the checker's own folder: the watcher's hooks run from its modules, between a forward and its caller
_CHECKER_DIR = os.path.realpath(os.path.dirname(os.path.abspath(__file__))) + os.sep
_CALLER_CACHE: dict[str, str] = {}


def called_by_torchwise(skip: int = 1) -> bool:
    """Whether the innermost caller that is neither torch nor the checker's hooks belongs to torchwise itself:
    a forward made by the Trainer's loop (or lr-find), not by the script it watches."""
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_code.co_filename
        kind = _CALLER_CACHE.get(name)
        if kind is None:
            real = os.path.realpath(name) if not name.startswith("<") else name
            kind = ("skip" if real.startswith((_CHECKER_DIR, _TORCH_DIR)) else
                    "own" if real.startswith(_OWN_PACKAGE) else "other")
            _CALLER_CACHE[name] = kind
        if kind != "skip":
            return kind == "own"
        frame = frame.f_back
    return False
