"""`torchwise check`: run your own training script and report the silent mistakes in it.

    torchwise check [--max-steps N] [--report FILE.json] [--overfit] [--] python train.py [args]
    torchwise check train.py [args]

Exit status: 0 nothing found, 1 findings, 2 the script itself failed.
"""
from __future__ import annotations

import argparse
import os
import sys

DEFAULT_MAX_STEPS = 300  # mirrors torchwise.diagnose.runner.DEFAULT_MAX_STEPS (kept light: no import here)


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
    import json

    from torchwise.diagnose.runner import run_script

    result = run_script(script, script_args, max_steps=args.max_steps, module=module, overfit=args.overfit)
    sys.stdout.flush()
    out = sys.stderr
    print("", file=out)
    if result.failed:
        print(f"torchwise check: {script} failed:", file=out)
        print(result.traceback.rstrip(), file=out)
        if result.translation:
            print(result.translation, file=out)
        print("", file=out)
    if result.failed:
        how = (f"failed after {result.steps} optimizer steps; any findings cover only what ran before the failure, "
               "the rest of the script was not checked")
    elif result.stopped_early:
        how = f"stopped after {result.steps} optimizer steps (--max-steps {args.max_steps}; --max-steps 0 runs to the end)"
    else:
        how = f"ran to the end: {result.steps} optimizer steps"
    print(f"torchwise check: {script} {how}.", file=out)
    if result.overfit is not None:
        o = result.overfit
        if o.get("ok") is None:
            print(f"overfit-one-batch: skipped ({o.get('skipped')})", file=out)
        else:
            print(f"overfit-one-batch: loss {o['initial_loss']:.4g} -> {o['final_loss']:.4g} in {o['steps']} steps "
                  f"on {o['batch']} samples: {'ok' if o['ok'] else 'FAILED'}", file=out)
    if result.findings:
        print("", file=out)
        for f in result.findings:
            print(f.render(), file=out)
            print("", file=out)
        errors = sum(f.severity == "error" for f in result.findings)
        scope = f" in the {result.steps} optimizer steps before the failure" if result.failed else ""
        print(f"torchwise check: {len(result.findings)} finding(s){scope}: {errors} error(s), "
              f"{len(result.findings) - errors} warning(s).", file=out)
    elif result.failed:
        print(f"torchwise check: no silent mistakes found in the {result.steps} optimizer steps before the failure "
              "(the rest of the script was not checked).", file=out)
    else:
        print("torchwise check: no silent mistakes found.", file=out)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump(result.report | {"script": script}, fh, indent=2)
    if result.failed:
        return 2
    return 1 if result.findings else 0
