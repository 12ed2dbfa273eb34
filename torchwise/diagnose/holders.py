"""Who keeps an object alive: the user's variable, attribute or container that holds it, found by walking the
garbage collector's referrers up from the object.

A finding that says "your program keeps X" must show who keeps it. Two answers matter:
* a container that can grow (a list, dict, deque or set, wherever it lives): one more item per step is memory
  that grows with the run, the harm `loss-retains-graph` needs;
* a name bound to the object itself (a local or global variable, an attribute): it keeps one object until the
  name is bound again at the next pass through the loop, which costs one step's memory, not a leak.
Objects held only by torchwise's own structures, or by nothing found within the walk, have no user holder.

gc.get_referrers scans every object the collector tracks, so the walk is for a few suspects per run, never for
every step.
"""
from __future__ import annotations

import gc
import os
import sys
import types
from collections import deque
from dataclasses import dataclass
from typing import Any

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_GROWING = (list, dict, deque, set)
_DEPTH = 4


@dataclass
class Holder:
    growing: bool   # a container that can grow holds the object (directly or through tuples)
    name: str       # how a person finds it: "list `loss_history` (global in train.py)"


def _ours(obj: Any) -> bool:
    """An object that belongs to torchwise itself (our frames, and what our modules hold)."""
    if isinstance(obj, types.FrameType):
        return os.path.abspath(obj.f_code.co_filename).startswith(_PACKAGE)
    return type(obj).__module__.startswith("torchwise.")


def _name_in(mapping: dict, obj: Any) -> str | None:
    for k, v in mapping.items():
        if v is obj:
            return str(k)
    return None


def _namespace_name(container: Any, referrer: Any, ours: list) -> str | None:
    """The name under which a namespace (a frame's locals, a module's globals, an object's __dict__) holds
    `container`; None when `referrer` is no namespace or does not name it."""
    if isinstance(referrer, types.FrameType):
        name = _name_in(referrer.f_locals, container)
        if name is None:
            return None
        where = f"{os.path.basename(referrer.f_code.co_filename)}:{referrer.f_lineno}"
        return f"`{name}` (a local of {referrer.f_code.co_name}, {where})"
    if not isinstance(referrer, dict):
        return None
    if any(referrer is d for d in ours):
        return None
    module = referrer.get("__name__") if "__builtins__" in referrer else None
    if isinstance(module, str):
        name = _name_in(referrer, container)
        return f"`{name}` (a global of {module})" if name is not None else None
    owners = [o for o in gc.get_referrers(referrer) if getattr(o, "__dict__", None) is referrer]
    if owners and _ours(owners[0]):
        ours.append(referrer)  # (kept for the rest of this walk: an identity list, dicts are not hashable)
        return None
    if owners:
        name = _name_in(referrer, container)
        return f"`{type(owners[0]).__name__}.{name}` (an attribute)" if name is not None else None
    return None


def _holds(ref: Any, item: Any) -> bool:
    if isinstance(ref, types.FrameType):
        return any(v is item for v in ref.f_locals.values())
    if isinstance(ref, dict):
        return any(v is item for v in ref.values())
    if isinstance(ref, (list, tuple, deque, set)):
        return any(v is item for v in ref)
    if isinstance(ref, types.CellType):
        return ref.cell_contents is item
    return False


def holder_of(obj: Any) -> Holder | None:
    """The user's holder of `obj`, or None when only torchwise (or nothing found) holds it. One heap scan per
    level of the walk (gc.get_referrers of the whole level at once)."""
    me = sys._getframe()
    seen = {id(obj), id(me)}
    level: list[tuple[Any, bool]] = [(obj, False)]  # (an object on the way up, whether a growing container is below)
    bound: Holder | None = None
    ours: list = []  # the __dict__s of torchwise's own objects met on the way up
    try:
        for _ in range(_DEPTH):
            nxt: list[tuple[Any, bool]] = []
            refs = [r for r in gc.get_referrers(*[item for item, _ in level])
                    if id(r) not in seen and r is not level and not _ours(r)]
            for ref in refs:
                seen.add(id(ref))
                for item, grows in level:
                    if not _holds(ref, item):
                        continue
                    name = _namespace_name(item, ref, ours)
                    if any(ref is d for d in ours):
                        break  # one of torchwise's own objects holds it: not the user's
                    if name is not None:
                        kind = "variable" if item is obj else type(item).__name__
                        if grows:
                            return Holder(True, f"{kind} {name}")
                        bound = bound or Holder(False, f"{kind} {name}")
                    elif isinstance(ref, _GROWING):
                        nxt.append((ref, True))
                    elif isinstance(ref, (tuple, types.CellType)):
                        nxt.append((ref, grows))
                    break
            if not nxt:
                break
            level = nxt
        return bound
    finally:
        del me
