"""Follow the worker processes a checked script starts, so that training done there is checked too.

The classic DDP tutorial trains in `torch.multiprocessing.spawn(train, nprocs=N)` workers, Hogwild in
`mp.Process(target=train)` processes: the process `torchwise check` runs does no training at all.
While the script runs, `multiprocessing`'s Process gets its target wrapped in a `_Worker` (picklable,
so it travels to spawned children as well as forked ones). In the child the wrapper attaches a Watcher
of its own, runs the target, and writes what it saw (steps, findings, its own failures) as JSON into a
folder the parent reads when the script is over.

Only targets that are the user's code (or torch.multiprocessing's spawn wrapper around it) are
followed: DataLoader workers, Manager servers and other library processes are left alone.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from torchwise.diagnose.catalog import CATALOG, Finding

_ACTIVE: Any = None  # the parent's Watcher, so that a forked child can detach its inherited copy


def _spawn_wrap():
    """torch.multiprocessing.spawn's per-process wrapper (the package's `spawn` attribute is the function,
    so the module is taken from sys.modules)."""
    import sys
    module = sys.modules.get("torch.multiprocessing.spawn")
    return getattr(module, "_wrap", None)


def _is_user_target(target: Any) -> bool:
    from torchwise.diagnose.user_code import is_user_file
    if target is _spawn_wrap():
        return True
    code = getattr(target, "__code__", None) or getattr(getattr(target, "__func__", None), "__code__", None)
    return code is not None and is_user_file(code.co_filename)


class _Worker:
    """The target of a followed process: run the user's target under a Watcher, then write the evidence."""

    def __init__(self, target: Any, out_dir: str, max_steps: int | None, label: str):
        self.target, self.out_dir, self.max_steps, self.label = target, out_dir, max_steps, label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torchwise.diagnose import checks
        from torchwise.diagnose.watch import StopScript, Watcher

        inherited = _ACTIVE
        if inherited is not None:  # forked: the parent's Watcher came along; one Watcher per process
            inherited.detach()
        label = self.label
        if self.target is _spawn_wrap() and len(args) >= 2:
            label = f"spawned worker {args[1]}"  # _wrap(fn, i, args, error_queue)
        w = Watcher(check_mode=True, max_steps=self.max_steps)
        w.attach()
        stopped = False
        try:
            return self.target(*args, **kwargs)
        except StopScript:
            stopped = True
            return None
        finally:
            w.detach()
            found = w.findings()
            data = {"label": label, "pid": os.getpid(), "steps": w.steps, "stopped": stopped,
                    "stop_reason": w.health.stop_reason, "findings": [f.to_dict() for f in found],
                    "internal_errors": [{k: v for k, v in e.items() if k != "traceback"}
                                        for e in w.health.internal_errors],
                    "coverage": checks.coverage(w, workers=[], stop_reason=w.health.stop_reason,
                                                internal_errors=len(w.health.internal_errors))}
            path = os.path.join(self.out_dir, f"worker-{os.getpid()}.json")
            try:
                with open(path + ".tmp", "w", encoding="utf-8") as fh:
                    json.dump(data, fh)
                os.replace(path + ".tmp", path)
            except OSError:
                pass  # the parent then reports this worker as not seen


class Followed:
    """Installed around a checked script by the runner: wraps worker targets, then merges their evidence."""

    def __init__(self, watcher: Any, max_steps: int | None):
        self.watcher = watcher
        self.max_steps = max_steps
        self.out_dir: str | None = None
        self.summaries: list[dict] = []
        self.started = 0
        self._original = None

    def install(self) -> None:
        global _ACTIVE
        import multiprocessing.process as mpp

        self.out_dir = tempfile.mkdtemp(prefix="torchwise-check-workers-")
        original = mpp.BaseProcess.__init__
        follow = self

        def __init__(proc, group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None):
            try:
                if target is not None and _is_user_target(target):
                    follow.started += 1
                    target = _Worker(target, follow.out_dir, follow.max_steps,
                                     f"process {name or follow.started}")
            except Exception as exc:
                follow.watcher.health.internal_error("process follower", exc)
            original(proc, group, target, name, args, kwargs if kwargs is not None else {}, daemon=daemon)

        mpp.BaseProcess.__init__ = __init__
        self._original = original
        _ACTIVE = self.watcher

    def uninstall(self) -> None:
        global _ACTIVE
        import multiprocessing.process as mpp

        if self._original is not None:
            mpp.BaseProcess.__init__ = self._original
            self._original = None
        _ACTIVE = None
        if self.out_dir is None:
            return
        for name in sorted(os.listdir(self.out_dir)):
            if name.endswith(".json"):
                try:
                    with open(os.path.join(self.out_dir, name), encoding="utf-8") as fh:
                        self.summaries.append(json.load(fh))
                except (OSError, ValueError):
                    pass
        shutil.rmtree(self.out_dir, ignore_errors=True)
        self.out_dir = None

    @property
    def steps(self) -> int:
        return sum(int(s.get("steps", 0)) for s in self.summaries)

    @property
    def internal_errors(self) -> list[dict]:
        return [dict(e, process=s["label"]) for s in self.summaries for e in s.get("internal_errors", [])]

    def merge_findings(self, findings: list[Finding]) -> list[Finding]:
        """The parent's findings and every worker's, one per (id, place), with the processes that saw it."""
        merged: dict[tuple, Finding] = {(f.id, f.where): f for f in findings}
        seen_in: dict[tuple, list[str]] = {}
        for s in self.summaries:
            for d in s.get("findings", []):
                if d.get("id") not in CATALOG:
                    continue
                key = (d["id"], d.get("where"))
                seen_in.setdefault(key, []).append(s["label"])
                if key not in merged:
                    merged[key] = Finding.from_dict(d)
        for key, labels in seen_in.items():
            merged[key].evidence["processes"] = ", ".join(sorted(set(labels)))
        order = list(CATALOG)
        return sorted(merged.values(), key=lambda f: ({"error": 0, "warning": 1}.get(f.severity, 2),
                                                      order.index(f.id)))
