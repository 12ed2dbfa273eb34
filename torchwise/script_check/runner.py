"""Run a user's training script, unmodified, under a Watcher.

    result = run_script("train.py", ["--epochs", "3"], max_steps=300)
    result.findings, result.steps, result.coverage, result.error (the script's own exception, if it failed)

How a run can end, and what each means for the verdict:
- the script returns, or calls sys.exit() (any status: the script's own decision, reported with the
  line; sys.exit at the end is not a failure in the middle, but a non-zero status is never turned into
  check's 0: it exits 2, the script failed);
- the script calls os._exit(): the process ends at once, so what was seen is reported first, then the
  process ends (with check's status, or 2 for a non-zero one);
- a process the script forked with os.fork() runs the rest of the script in the child too: the child
  ends as Python would end it (its own status), with no report, and leaves the parent's files alone;
- check stops it (StopScript) once it has seen enough (--max-steps), or when it keeps running model
  forwards without training (an endless inference loop);
- the script raises: it failed, and only what ran before is judged;
- Ctrl-C: what was seen so far is still judged and reported.
Worker processes the script starts (torch.multiprocessing.spawn, multiprocessing.Process) are checked
too, each under its own Watcher (script_check/follow.py); their findings and steps are merged here.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

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
    exit_code: int | None = None          # the status the script gave sys.exit(), if it called it
    exit_where: str | None = None         # where it called it
    hard_exit: bool = False               # it called os._exit(): the process ended there
    interrupted: bool = False             # Ctrl-C
    stop_reason: str | None = None
    coverage: dict[str, Any] = field(default_factory=dict)
    internal_errors: list[dict] = field(default_factory=list)
    strict: bool = False                  # TORCHWISE_CHECK_STRICT=1: the checker's own failures fail the check
    report: dict[str, Any] = field(default_factory=dict)
    overfit: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def mistakes(self) -> list[Finding]:
        """Errors and warnings: what counts in the exit status (info hints do not)."""
        return [f for f in self.findings if f.counts]

    @property
    def hints(self) -> list[Finding]:
        return [f for f in self.findings if not f.counts]

    @property
    def training_seen(self) -> bool:
        return self.steps > 0

    def exit_status(self) -> int:
        """0 training seen and nothing found; 1 mistakes found; 2 the script failed; 3 no training seen, so
        nothing could be judged; 4 (strict mode) the checker itself failed; 130 interrupted, nothing found."""
        if self.failed or self.exit_code not in (None, 0):
            return 2  # the script's own non-zero status says it failed, whatever check saw before
        if self.strict and self.internal_errors:
            return 4
        if self.mistakes:
            return 1
        if self.interrupted:
            return 130
        if not self.training_seen:
            return 3
        return 0


def _exit_where(exc: BaseException) -> str | None:
    from torchwise.diagnose.user_code import is_user_file, show_path
    where = None
    tb = exc.__traceback__
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            where = f"{show_path(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _tap_output(watcher) -> list:
    """sys.stdout and sys.stderr keep what the script prints (the epoch's loss it reports: see OutputTap)."""
    from torchwise.diagnose.watch import OutputTap
    taps = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is not None:
            tap = OutputTap(stream, watcher)
            setattr(sys, name, tap)
            taps.append((name, tap, stream))
    return taps


def _untap_output(taps: list) -> None:
    for name, tap, stream in taps:
        tap.stop_recording()  # a stream the script kept (a logging handler) still writes through, unrecorded
        if getattr(sys, name, None) is tap:  # the script's own replacement stays, as it would without check
            setattr(sys, name, stream)


def run_script(script: str, args: list[str] | None = None, *, max_steps: int | None = DEFAULT_MAX_STEPS,
               module: bool = False, overfit: bool = False,
               finish: Callable[[RunResult], int] | None = None) -> RunResult:
    """Run `script` (a path, or a module name with module=True) as __main__ under a Watcher.

    finish(result) -> exit status: called (then the process exits) when the script keeps swallowing
    check's stop (a bare `except:` around its loop), so that what was seen is still reported."""
    from torchwise.script_check import follow
    from torchwise.diagnose.watch import Watcher

    watcher = Watcher(check_mode=True, max_steps=max_steps or None)
    watcher.inputs.capture_overfit = overfit
    state: dict[str, Any] = {"error": None, "tb": None, "translation": None, "stopped": False,
                             "exit_code": None, "exit_where": None, "interrupted": False, "hard_exit": False}
    workers = follow.Followed(watcher, max_steps=max_steps or None)
    ends = _RunEnds(watcher, workers, state, lambda: _result(script, watcher, workers, state, overfit), finish)
    sys.argv = [script] + list(args or [])
    if not module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    ends.start()
    try:
        _run_as_main(script, module, watcher, workers, state)
    finally:
        ends.restore()
    if ends.in_forked_child:
        _end_forked_child(state)
    return _result(script, watcher, workers, state, overfit)


class _RunEnds:
    """What a checked run changes in this process (argv, path, cwd, streams, hooks, os._exit) and its one undo,
    shared by every way the run can end: the script returns; check stops it for good (a script that swallows the
    stop); the script calls os._exit(), which ends the process at once, so what was seen is reported first; or
    the code runs on in a child the script forked, which must leave the parent's worker folder alone."""

    def __init__(self, watcher: Any, workers: Any, state: dict[str, Any], result: Callable[[], RunResult],
                 finish: Callable[[RunResult], int] | None):
        self.watcher, self.workers, self.state, self.result, self.finish = watcher, workers, state, result, finish
        self.saved = (sys.argv[:], sys.path[:], os.getcwd())
        self.main_pid, self.real_exit = os.getpid(), os._exit
        self.taps: list = []

    @property
    def in_forked_child(self) -> bool:
        return os.getpid() != self.main_pid

    def start(self) -> None:
        self.watcher.health.on_force_stop = self.force_stop
        self.watcher.attach()
        self.workers.install()
        self.taps = _tap_output(self.watcher)
        os._exit = self.script_exit

    def restore(self) -> None:
        os._exit = self.real_exit
        _untap_output(self.taps)
        if not self.in_forked_child:  # (a forked child must not read or delete the parent's worker folder)
            self.workers.uninstall()
        self.watcher.detach()
        argv, path, cwd = self.saved
        sys.argv, sys.path[:] = argv, path
        if os.getcwd() != cwd:
            os.chdir(cwd)

    def report_and_exit(self) -> None:
        """End the process now (check's forced stop, the script's os._exit), with what was seen reported first."""
        self.restore()
        result = self.result()
        code = self.finish(result) if self.finish is not None else result.exit_status()
        sys.stdout.flush()
        sys.stderr.flush()
        self.real_exit(code)

    def force_stop(self) -> None:  # the script swallowed the stop again and again: report, then end the process
        self.state["stopped"] = True
        self.report_and_exit()

    def script_exit(self, status: int = 0) -> None:  # os._exit() in the script: the process ends here
        if self.in_forked_child or self.state["hard_exit"]:
            self.real_exit(status)  # a forked child's own end (multiprocessing's workers end so), or a second call
        from torchwise.diagnose.user_code import user_where
        self.state.update(hard_exit=True, exit_code=status, exit_where=user_where())
        self.report_and_exit()


def _end_forked_child(state: dict[str, Any]) -> None:
    """A child the script made with os.fork() ran the rest of the script: it ends as Python would end it (its
    traceback and status 1 after an exception, else its own status), with no report: the parent reports."""
    if state["error"] is not None and not isinstance(state["error"], SystemExit):
        sys.stderr.write(state["tb"] or "")
        raise SystemExit(1)
    if state["interrupted"]:
        raise SystemExit(130)
    raise SystemExit(state["exit_code"] or 0)


def _run_as_main(script: str, module: bool, watcher, workers, state: dict[str, Any]) -> None:
    """Run the script as __main__ and keep in `state` how it ended: check's stop, its own exit status, Ctrl-C,
    or its own failure (reported, never a crash of the checker)."""
    from torchwise.diagnose.error_translation import translate
    from torchwise.diagnose.watch import StopScript

    try:
        if module:
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except StopScript:
        state["stopped"] = True
    except SystemExit as exc:
        code = exc.code
        state["exit_code"] = 0 if code is None else code if isinstance(code, int) else 1
        state["exit_where"] = _exit_where(exc)
        if isinstance(code, str):
            print(code, file=sys.stderr)  # what Python prints for sys.exit("message")
        if state["exit_code"] != 0 and watcher.steps == 0 and not workers.started:
            # gave up before any training (bad arguments, missing data): the script failed; after training,
            # a status is the script's own verdict at its end, not a failure in the middle
            state["error"] = exc
            where = f" at {state['exit_where']}" if state["exit_where"] else ""
            state["tb"] = f"the script exited with status {code!r}{where} before any training was seen\n"
    except KeyboardInterrupt:
        state["interrupted"] = True
    except BaseException as exc:  # the script's own failure: report it, do not crash the checker
        state["error"] = exc
        state["tb"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        state["translation"] = translate(exc, watcher=watcher)


def _result(script: str, watcher, workers, state: dict, overfit: bool) -> RunResult:
    from torchwise.diagnose import checks

    findings = watcher.findings()
    overfit_result = None
    if overfit:
        from torchwise.script_check.sanity import overfit_from_capture
        overfit_result = overfit_from_capture(watcher.inputs.overfit_capture)
        if overfit_result.get("finding") is not None:
            findings = findings + [overfit_result["finding"]]
    findings = workers.merge_findings(findings)
    steps = watcher.steps + workers.steps
    errors = list(watcher.health.internal_errors) + workers.internal_errors
    coverage = checks.coverage(watcher, workers=workers.summaries, stop_reason=watcher.health.stop_reason,
                               internal_errors=len(errors))
    coverage["processes_unseen"] = max(0, workers.started - len(workers.summaries))  # killed, or crashed early
    report = watcher.report(findings)
    report["findings"] = [f.to_dict() for f in findings]
    report["steps"] = steps
    report["stopped_early"] = state["stopped"]
    report["script_failed"] = state["error"] is not None
    report["script_exit_status"] = state["exit_code"]
    report["script_hard_exit"] = state["hard_exit"]
    report["interrupted"] = state["interrupted"]
    report["coverage"] = coverage
    report["checker_errors"] = [{k: v for k, v in e.items() if k != "traceback"} for e in errors]
    if overfit_result is not None:
        report["overfit"] = {k: v for k, v in overfit_result.items() if k != "finding"}
    return RunResult(script=script, findings=findings, steps=steps, stopped_early=state["stopped"],
                     error=state["error"], traceback=state["tb"], translation=state["translation"],
                     exit_code=state["exit_code"], exit_where=state["exit_where"], hard_exit=state["hard_exit"],
                     interrupted=state["interrupted"], stop_reason=watcher.health.stop_reason, coverage=coverage,
                     internal_errors=errors, strict=watcher.health.strict, report=report, overfit=overfit_result)
