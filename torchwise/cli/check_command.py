"""`torchwise check`: run your own training script and report the silent mistakes in it.

    torchwise check [--max-steps N] [--report FILE.json] [--overfit] [--] python train.py [args]
    torchwise check train.py [args]

Exit status: 0 training was seen and nothing found, 1 findings (errors or warnings; info hints do not
count), 2 the script itself failed (or ended with a non-zero status of its own), 3 no training was seen (nothing judged), 4 the checker itself failed
(only with TORCHWISE_CHECK_STRICT=1, for tests), 130 interrupted with nothing found.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # annotations only: the command keeps its heavy imports inside run()
    from torchwise.diagnose.catalog import Finding
    from torchwise.script_check.runner import RunResult

DEFAULT_MAX_STEPS = 300  # mirrors torchwise.script_check.runner.DEFAULT_MAX_STEPS (kept light: no import here)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS, metavar="N",
                        help=f"stop the script after N optimizer steps (default {DEFAULT_MAX_STEPS}); if no validation "
                             "has run yet and no epoch has ended, wait for one up to 2N steps; 0 runs it to the end")
    parser.add_argument("--report", metavar="FILE.json", help="also write the findings as JSON")
    parser.add_argument("--overfit", action="store_true",
                        help="also check that the model can fit its first batch (overfit-one-batch sanity test)")
    parser.add_argument("--list", action="store_true", help="list the mistakes torchwise check looks for, and exit")
    parser.add_argument("script_command", nargs=argparse.REMAINDER, metavar="[--] [python] script.py [args]",
                        help="the training script and its arguments")


def _split_command(command: list[str]) -> tuple[str, list[str], bool]:
    from torchwise.errors import TorchwiseError

    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if cmd and (os.path.basename(cmd[0]).startswith("python") or cmd[0] == sys.executable):
        cmd = cmd[1:]
        while cmd and cmd[0].startswith("-") and cmd[0] != "-m":
            cmd = cmd[1:]  # interpreter flags such as -u
        if cmd and cmd[0] == "-m":
            if len(cmd) < 2:
                raise TorchwiseError("`-m` needs a module name", fix="torchwise check -- python -m mypkg.train")
            return cmd[1], cmd[2:], True
    if not cmd:
        raise TorchwiseError("no script given", fix="torchwise check train.py [args]   or   "
                                                    "torchwise check -- python train.py [args]")
    script = cmd[0]
    if not os.path.isfile(script):
        raise TorchwiseError("the script does not exist", values={"script": script},
                             fix="give the path of your training script, e.g. torchwise check train.py")
    return script, cmd[1:], False


def run(args: argparse.Namespace) -> int:
    if args.list:
        from torchwise.diagnose.catalog import describe
        print(describe())
        return 0
    script, script_args, module = _split_command(args.script_command)
    if args.max_steps < 0:
        from torchwise.errors import TorchwiseError
        raise TorchwiseError("--max-steps must be >= 0", values={"max_steps": args.max_steps},
                             fix="--max-steps 300 (0 runs the script to the end)")
    from torchwise.script_check.runner import run_script

    def finish(result) -> int:
        return _report(args, script, result)

    result = run_script(script, script_args, max_steps=args.max_steps, module=module, overfit=args.overfit,
                        finish=finish)
    return finish(result)


def _report(args: argparse.Namespace, script: str, result: RunResult) -> int:
    """Print what check saw and found, write --report, and give the exit status."""
    sys.stdout.flush()  # the script's own output first: the report comes after it
    out = sys.stderr
    print("", file=out)
    if result.failed:
        _print_failure(script, result, out)
    steps = f"{result.steps} optimizer step{'s' if result.steps != 1 else ''}"
    print(f"torchwise check: {script} {_how_it_ended(args, result, steps)}.", file=out)
    print(_coverage_line(result.coverage), file=out)
    if result.overfit is not None:
        print(_overfit_line(result.overfit), file=out)
    _print_findings(result.mistakes, result.hints, out)
    if result.internal_errors:
        _print_internal_errors(result, out)
    print("", file=out)
    print(_verdict_line(result, steps), file=out)
    if args.report:
        _write_json_report(args.report, script, result)
    return result.exit_status()


def _print_failure(script: str, result: RunResult, out: TextIO) -> None:
    """The script's own traceback, and what it means when torchwise knows the error."""
    print(f"torchwise check: {script} failed:", file=out)
    print(result.traceback.rstrip(), file=out)
    if result.translation:
        print(result.translation, file=out)
    print("", file=out)


def _how_it_ended(args: argparse.Namespace, result: RunResult, steps: str) -> str:
    """How far the script ran, which is how much of it the findings cover."""
    if result.failed:
        return (f"failed after {steps}; any findings cover only what ran before the failure, "
                "the rest of the script was not checked")
    if result.interrupted:
        return f"was interrupted (Ctrl-C) after {steps}; the findings cover what ran until then"
    if result.stopped_early:
        why = result.stop_reason or f"--max-steps {args.max_steps}"
        return f"stopped after {steps} ({why}; --max-steps 0 runs to the end)"
    where = f" at {result.exit_where}" if result.exit_where else ""
    if result.hard_exit:
        return (f"ended its process with os._exit({result.exit_code}){where} after {steps}; the findings cover "
                "what ran until then")
    if result.exit_code not in (None, 0):
        return f"ran to the end and exited with status {result.exit_code} (sys.exit{where}): {steps}"
    return f"ran to the end: {steps}"


def _overfit_line(o: dict) -> str:
    """The overfit-one-batch test's result (--overfit)."""
    if o.get("ok") is None:
        return f"overfit-one-batch: skipped ({o.get('skipped')})"
    return (f"overfit-one-batch: loss {o['initial_loss']:.4g} -> {o['final_loss']:.4g} in {o['steps']} steps "
            f"on {o['batch']} samples: {'ok' if o['ok'] else 'FAILED'}")


def _print_findings(mistakes: list[Finding], hints: list[Finding], out: TextIO) -> None:
    """Each mistake in full, then the hints, under a heading that says they do not count."""
    for f in mistakes:
        print("", file=out)
        print(f.render(), file=out)
    if hints:
        print("", file=out)
        print(f"hints ({len(hints)}, not counted: each may be by design, and says why):", file=out)
        for f in hints:
            print("", file=out)
            print(f.render(), file=out)


def _print_internal_errors(result: RunResult, out: TextIO) -> None:
    """The checker's own failures: evidence lost to a torchwise bug (the traceback too under strict mode)."""
    print("", file=out)
    first = result.internal_errors[0]
    print(f"torchwise check: {len(result.internal_errors)} failure(s) inside the checker itself (a torchwise "
          f"bug, not your script's; that evidence was lost), first in {first['where']}: {first['error']}",
          file=out)
    if result.strict:
        print(first.get("traceback", "").rstrip(), file=out)


def _verdict_line(result: RunResult, steps: str) -> str:
    """The last line: how many findings, or why none is not a clean bill when the run failed or never trained."""
    mistakes, hints = result.mistakes, result.hints
    if mistakes:
        errors = sum(f.severity == "error" for f in mistakes)
        scope = f" in the {steps} before the failure" if result.failed else ""
        return (f"torchwise check: {len(mistakes)} finding(s){scope}: {errors} error(s), "
                f"{len(mistakes) - errors} warning(s)" + (f"; {len(hints)} hint(s)" if hints else "") + ".")
    if result.failed:
        return (f"torchwise check: no silent mistakes found in the {steps} before the failure "
                "(the rest of the script was not checked).")
    if result.exit_code not in (None, 0):
        return (f"torchwise check: no silent mistakes found in the {steps}, but the script exited with status "
                f"{result.exit_code}, so check exits 2 (the script failed), not 0.")
    if not result.training_seen:
        return ("torchwise check: no training was seen (no optimizer step, no hand-written update, no followed "
                "worker that trained), so nothing was judged: this is not a clean bill.")
    return "torchwise check: no silent mistakes found" + (f" ({len(hints)} hint(s) above)" if hints else "") + "."


def _write_json_report(path: str, script: str, result: RunResult) -> None:
    """--report FILE.json: the findings and coverage, with the script's path."""
    import json

    with open(path, "w", encoding="utf-8") as fh:
        json.dump(result.report | {"script": script}, fh, indent=2)


def _coverage_line(cov: dict) -> str:
    if not cov:
        return "coverage: -"
    parts = [f"{cov.get('optimizer_steps', 0)} optimizer step(s)"]
    if cov.get("manual_update_steps"):
        parts[0] += f" ({cov['manual_update_steps']} of them hand-written updates, no optimizer object)"
    if cov.get("objectives"):  # what each optimizer is trained on (the loss-curve checks judge fixed ones only)
        parts[0] += " (objective: " + ", ".join(f"{k} {v}" for k, v in cov["objectives"].items()) + ")"
    parts.append(f"{cov.get('evaluation_passes', 0)} evaluation pass(es) ({cov.get('evaluation_forwards', 0)} "
                 "evaluation forwards)")
    if cov.get("processes_followed"):
        procs = ", ".join(f"{p['label']}: {p['steps']} steps" for p in cov.get("processes", []))
        parts.append(f"{cov['processes_followed']} worker process(es) followed ({procs})")
    if cov.get("processes_unseen"):
        parts.append(f"{cov['processes_unseen']} worker process(es) started but reported nothing (killed, or "
                     "crashed before the end): their training was not checked")
    line = "coverage: " + "; ".join(parts)
    und = cov.get("undecided") or {}
    if und:
        reasons: dict[str, list[str]] = {}
        for i, why in und.items():
            reasons.setdefault(why, []).append(i)
        line += "\n  not judged: " + "\n  not judged: ".join(
            f"{', '.join(ids)}: {why}" if ids != ["*"] else why for why, ids in reasons.items())
    return line
