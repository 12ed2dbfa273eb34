"""Run a user's training script, unmodified, under a Watcher.

    result = run_script("train.py", ["--epochs", "3"], max_steps=300)
    result.findings, result.steps, result.error (the script's own exception, if it failed)
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from torchwise.diagnose.catalog import Finding

DEFAULT_MAX_STEPS = 300


@dataclass
class RunResult:
    script: str
    findings: list[Finding]
    steps: int
    stopped_early: bool
    error: BaseException | None = None
    traceback: str | None = None
    translation: str | None = None
    exit_code: int | None = None
    report: dict[str, Any] = field(default_factory=dict)
    overfit: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def run_script(script: str, args: list[str] | None = None, *, max_steps: int | None = DEFAULT_MAX_STEPS,
               module: bool = False, overfit: bool = False) -> RunResult:
    """Run `script` (a path, or a module name with module=True) as __main__ under a Watcher."""
    from torchwise.diagnose.errors import translate
    from torchwise.diagnose.watch import StopScript, Watcher

    args = list(args or [])
    watcher = Watcher(check_mode=True, max_steps=max_steps or None)
    watcher.capture_overfit = overfit
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    sys.argv = [script] + args
    if not module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    error = tb = translation = None
    stopped = False
    exit_code = None
    watcher.attach()
    try:
        if module:
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except StopScript:
        stopped = True
    except SystemExit as exc:
        code = exc.code
        exit_code = 0 if code is None else code if isinstance(code, int) else 1
        if exit_code != 0:
            error = exc
            tb = f"the script exited with status {code!r}\n"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the script's own failure: report it, do not crash the checker
        error = exc
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        translation = translate(exc, watcher=watcher)
    finally:
        watcher.detach()
        sys.argv, sys.path[:] = saved_argv, saved_path
        if os.getcwd() != saved_cwd:
            os.chdir(saved_cwd)
    findings = watcher.findings()
    overfit_result = None
    if overfit:
        from torchwise.diagnose.sanity import overfit_from_capture
        overfit_result = overfit_from_capture(watcher.overfit_capture)
        if overfit_result.get("finding") is not None:
            findings = findings + [overfit_result["finding"]]
    report = watcher.report()
    report["findings"] = [f.to_dict() for f in findings]
    report["stopped_early"] = stopped
    report["script_failed"] = error is not None
    if overfit_result is not None:
        report["overfit"] = {k: v for k, v in overfit_result.items() if k != "finding"}
    return RunResult(script=script, findings=findings, steps=watcher.steps, stopped_early=stopped, error=error,
                     traceback=tb, translation=translation, exit_code=exit_code, report=report,
                     overfit=overfit_result)
