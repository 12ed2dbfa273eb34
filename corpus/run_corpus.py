"""Run the checker's corpus: every program plainly and under `torchwise check`, then the table and totals.

    python corpus/run_corpus.py                     # every program
    python corpus/run_corpus.py --only NAME ...     # some of them
    python corpus/run_corpus.py --quick             # the ones marked "quick" (what make test runs)
    python corpus/run_corpus.py --full              # check with --max-steps 0: the slowdown is comparable
    python corpus/run_corpus.py --install-needs     # pip install the extra packages the programs need first
    python corpus/run_corpus.py --json results.json

Each run happens in a fresh temporary copy of the program's folder, so nothing is written into the
repository. The format of a program's folder is in corpus/README.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
_IMPORT_NAMES = {"pytorch-ignite": "ignite", "scikit-learn": "sklearn", "labml-nn": "labml_nn", "scikit-image": "skimage",
                 "faiss-cpu": "faiss", "box2d": "Box2D", "pytorch-lightning": "pytorch_lightning", "pyyaml": "yaml",
                 "ipython": "IPython", "opencv-python-headless": "cv2", "gitpython": "git", "pillow": "PIL"}


@dataclasses.dataclass
class Program:
    name: str
    folder: Path
    kind: str
    expect: list[str]
    info_ok: dict[str, str]
    args: list[str]
    max_steps: int
    quick: bool
    needs: list[str]
    timeout_s: int
    compare_output: bool = True  # false (with "why_not_compared") where two plain runs print other text
    repo: str = ""               # the upstream repository, owner/name: it decides the program's half
    kinds: list[str] = dataclasses.field(default_factory=list)  # what kind of training it is (free tags)

    @property
    def split(self) -> str:
        return split_of(self.repo)


def split_of(repo: str) -> str:
    """The corpus's two halves, fixed once and by repository (every program of one repository is in the same
    half): "tune", which the checker may be changed against, and "heldout", measured only to report. A
    program without a repository is in neither ("-")."""
    if not repo:
        return "-"
    import hashlib
    return "tune" if hashlib.sha256(repo.strip().lower().encode()).digest()[0] % 2 == 0 else "heldout"


@dataclasses.dataclass
class Outcome:
    program: Program
    plain_rc: int | None = None
    plain_s: float = 0.0
    check_rc: int | None = None
    check_s: float = 0.0
    # CPU seconds (user + system) of each run and its children: on a loaded machine the wall times mostly
    # measure the other load, the CPU times still measure the work
    plain_cpu: float = 0.0
    check_cpu: float = 0.0
    findings: list[dict] = dataclasses.field(default_factory=list)
    coverage: dict = dataclasses.field(default_factory=dict)
    output_changed: bool = False
    skipped: str | None = None
    note: str = ""
    stopped: bool = False  # check stopped the program before its end (--max-steps): no slowdown from it

    @property
    def warnings(self) -> list[str]:
        return sorted({f["id"] for f in self.findings if f.get("severity") in ("error", "warning")})

    @property
    def infos(self) -> list[str]:
        return sorted({f["id"] for f in self.findings if f.get("severity") == "info"})

    @property
    def broken(self) -> bool:
        if self.skipped:
            return False
        # 3 is "no training was seen, nothing judged": honest for a script that trains nothing (evolution
        # strategies), broken where check stopped the script before its first step
        return (self.plain_rc == 0 and self.check_rc not in (0, 1, 3)) or self.output_changed or (
            self.check_rc == 3 and self.stopped)

    @property
    def not_judged(self) -> bool:
        return not self.skipped and not self.broken and self.check_rc == 3

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.broken:
            return "BROKEN"
        if self.not_judged:
            return "not judged (no training seen)"
        if self.program.kind == "buggy":
            return "caught" if set(self.program.expect) <= set(self.warnings) else "MISSED"
        if self.warnings:
            return "FALSE ALARM"
        unexplained = [i for i in self.infos if i not in self.program.info_ok]
        return "clean" if not unexplained else "clean (unlisted info: " + ", ".join(unexplained) + ")"


def load_programs(only: list[str] | None = None, quick: bool = False, root: Path | None = None,
                  split: str | None = None) -> list[Program]:
    progs = []
    for cfg in sorted((root or PROGRAMS).glob("*/corpus.json")):
        d = json.loads(cfg.read_text(encoding="utf-8"))
        p = Program(name=cfg.parent.name, folder=cfg.parent, kind=d["kind"], expect=list(d.get("expect", [])),
                    info_ok=dict(d.get("info_ok", {})), args=[str(a) for a in d.get("args", [])],
                    max_steps=int(d.get("max_steps", 300)), quick=bool(d.get("quick", False)),
                    needs=list(d.get("needs", [])), timeout_s=int(d.get("timeout_s", 180)),
                    compare_output=bool(d.get("compare_output", True)), repo=str(d.get("repo", "")),
                    kinds=[str(k) for k in d.get("kinds", [])])
        if not p.compare_output and not d.get("why_not_compared"):
            raise SystemExit(f"{cfg}: compare_output false needs why_not_compared (why two plain runs differ)")
        if p.kind not in ("correct", "buggy"):
            raise SystemExit(f"{cfg}: kind must be 'correct' or 'buggy', not {p.kind!r}")
        if only and p.name not in only:
            continue
        if quick and not p.quick:
            continue
        if split and p.split != split:
            continue
        progs.append(p)
    if only:
        missing = set(only) - {p.name for p in progs}
        if missing:
            raise SystemExit(f"no such corpus program(s): {', '.join(sorted(missing))}")
    return progs


def _missing_needs(p: Program) -> list[str]:
    out = []
    for pkg in p.needs:
        mod = _IMPORT_NAMES.get(pkg, pkg.split("[")[0].split("=")[0].split(">")[0].replace("-", "_"))
        if importlib.util.find_spec(mod) is None:
            out.append(pkg)
    return out


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_HEX_ID = re.compile(r"\b[0-9a-f]{8,}\b")  # run ids, hashes
_NUMBER = re.compile(r"[-+]?(\d[\d,_]*\.?\d*|\.\d+)([eE][-+]?\d+)?|nan|inf")
# a progress bar printed as lines (fastprogress or tqdm without a terminal): which updates are printed depends on
# how fast the run goes (they are throttled by time), so two runs of the same code print different ones; rich's
# bars (Lightning's RichProgressBar, HF's) are a run of heavy lines whose filled part is drawn as time allows
_PROGRESS_BAR = re.compile(r"\|[^|]{10,}\|\s*[\d.]+%|\d+%\|[^|]*\||[━╸╺]{5,}")


def _shape(text: str, folder: str) -> list[str]:
    """What a program printed, without what differs from run to run of the same code: numbers (timings,
    an unseeded program's values), run ids, colour codes, the folder it ran in, progress bars redrawn
    with carriage returns and repeated progress lines."""
    out: list[str] = []
    for line in text.replace(folder, "<dir>").splitlines():
        line = _ANSI.sub("", line.rsplit("\r", 1)[-1])
        if _PROGRESS_BAR.search(line):
            continue
        line = "".join(_NUMBER.sub("#", _HEX_ID.sub("<id>", line)).split())  # tensors pad numbers to a width
        if line.strip() and (not out or out[-1] != line):
            out.append(line)
    return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               WANDB_MODE="disabled", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"))
    env.pop("TORCHWISE_CHECK_STRICT", None)
    return env


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str], cwd: Path, timeout: int, env: dict) -> tuple[int | None, float, str, str]:
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
        return r.returncode, time.perf_counter() - t0, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return None, time.perf_counter() - t0, text(exc.stdout), text(exc.stderr) + f"\n[timed out after {timeout} s]"


def run_program(p: Program, *, full: bool = False, strict: bool = True, keep: Path | None = None) -> Outcome:
    out = Outcome(program=p)
    missing = _missing_needs(p)
    if missing:
        out.skipped = f"needs {', '.join(missing)} (make corpus installs it)"
        return out
    env = _env()
    with tempfile.TemporaryDirectory(prefix=f"corpus-{p.name}-") as tmp:
        plain_dir, check_dir = Path(tmp) / "plain", Path(tmp) / "check"
        shutil.copytree(p.folder, plain_dir)
        shutil.copytree(p.folder, check_dir)
        cpu0 = _children_cpu()
        rc, secs, stdout_plain, err_plain = _run([sys.executable, "train.py", *p.args], plain_dir, p.timeout_s, env)
        out.plain_rc, out.plain_s, out.plain_cpu = rc, secs, _children_cpu() - cpu0
        if rc != 0:
            out.note = f"the plain run exits {rc}: " + (err_plain.strip().splitlines() or [""])[-1][:200]
        report = Path(tmp) / "report.json"
        max_steps = 0 if full else p.max_steps
        check_env = dict(env)
        if strict:
            check_env["TORCHWISE_CHECK_STRICT"] = "1"  # a detector's own failure fails the run (issue 15)
        cmd = [sys.executable, "-m", "torchwise", "check", "--max-steps", str(max_steps), "--report", str(report),
               "--", "python", "train.py", *p.args]
        cpu0 = _children_cpu()
        rc, secs, stdout_check, err_check = _run(cmd, check_dir, p.timeout_s * 2 + 60, check_env)
        out.check_rc, out.check_s, out.check_cpu = rc, secs, _children_cpu() - cpu0
        if report.exists():
            data = json.loads(report.read_text(encoding="utf-8"))
            out.findings = data.get("findings", [])
            out.coverage = data.get("coverage", {})
            stopped = data.get("stopped_early", False)
            out.stopped = bool(stopped)
        else:
            stopped = False
            out.note = (out.note + "; " if out.note else "") + "no report: " + \
                (err_check.strip().splitlines() or [""])[-1][:200]
        if rc == 2 and out.plain_rc == 0:
            tail = "\n".join(err_check.strip().splitlines()[-6:])
            out.note = (out.note + "; " if out.note else "") + "check exits 2: " + tail[:400]
        plain_lines, check_lines = _shape(stdout_plain, str(plain_dir)), _shape(stdout_check, str(check_dir))
        if out.plain_rc == 0 and rc in (0, 1) and p.compare_output:
            same = check_lines == plain_lines if not stopped else check_lines == plain_lines[:len(check_lines)]
            if not same:
                out.output_changed = True
                first = next((i for i, (a, b) in enumerate(zip(plain_lines, check_lines)) if a != b),
                             min(len(plain_lines), len(check_lines)))
                out.note = (out.note + "; " if out.note else "") + (
                    f"output differs at line {first + 1}: plain {plain_lines[first:first + 1]!r} "
                    f"vs check {check_lines[first:first + 1]!r}")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{p.name}.check.stderr").write_text(err_check, encoding="utf-8")
            (keep / f"{p.name}.plain.stdout").write_text(stdout_plain, encoding="utf-8")
            (keep / f"{p.name}.check.stdout").write_text(stdout_check, encoding="utf-8")
    return out


def table(outcomes: list[Outcome]) -> str:
    rows = [("program", "half", "kind", "objectives", "expected", "found (warning/error)", "info", "verdict",
             "plain s", "check s")]
    for o in outcomes:
        p = o.program
        objectives = ",".join(sorted(set((o.coverage.get("objectives") or {}).values()))) or "-"
        rows.append((p.name, p.split, p.kind, objectives, ",".join(p.expect) or "-", ",".join(o.warnings) or "-",
                     ",".join(o.infos) or "-", o.verdict if not o.skipped else f"skipped: {o.skipped}",
                     f"{o.plain_s:.1f}", f"{o.check_s:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return "\n".join(lines)


def totals(outcomes: list[Outcome], full: bool) -> dict:
    ran = [o for o in outcomes if not o.skipped]
    correct = [o for o in ran if o.program.kind == "correct"]
    buggy = [o for o in ran if o.program.kind == "buggy"]
    timed = [o for o in ran if o.plain_s > 0 and o.plain_rc == 0 and o.check_rc in (0, 1) and not o.stopped]
    ratios = sorted(o.check_s / o.plain_s for o in timed)
    cpu_ratios = sorted(o.check_cpu / o.plain_cpu for o in timed if o.plain_cpu > 0)
    return {
        "programs": len(outcomes), "skipped": len(outcomes) - len(ran),
        "correct": len(correct), "correct_with_warning": sum(bool(o.warnings) for o in correct),
        "buggy": len(buggy), "buggy_caught": sum(o.verdict == "caught" for o in buggy),
        "broken": sum(o.broken for o in ran), "not_judged": sum(o.not_judged for o in ran),
        "median_check_over_plain": ratios[len(ratios) // 2] if ratios else None,
        "median_check_over_plain_cpu": cpu_ratios[len(cpu_ratios) // 2] if cpu_ratios else None,
        "slowdown_runs": len(ratios),  # programs check ran to their end: their times compare
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", metavar="DIR", help=f"the corpus folder (default {PROGRAMS})")
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--split", choices=["tune", "heldout"], help="one half of the corpus (by repository)")
    ap.add_argument("--full", action="store_true", help="check with --max-steps 0 (comparable slowdown)")
    ap.add_argument("--install-needs", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--keep", metavar="DIR", help="write each run's output there")
    args = ap.parse_args(argv)
    progs = load_programs(args.only, args.quick, Path(args.programs) if args.programs else None, args.split)
    if not progs:
        print(f"no corpus programs under {args.programs or PROGRAMS} (corpus/README.md says how they are kept)")
        return 0
    if args.install_needs:
        needs = sorted({n for p in progs for n in p.needs})
        if needs:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *needs], check=True)
    outcomes = []
    for p in progs:
        o = run_program(p, full=args.full, keep=Path(args.keep) if args.keep else None)
        outcomes.append(o)
        print(f"  {p.name}: {o.verdict}  ({o.plain_s:.1f} s plain, {o.check_s:.1f} s check; CPU {o.plain_cpu:.1f} s, "
              f"{o.check_cpu:.1f} s)"
              + (f"  [{o.note}]" if o.note else ""), flush=True)
    print()
    print(table(outcomes))
    t = totals(outcomes, args.full)
    print()
    med = t["median_check_over_plain"]
    print(f"correct programs: {t['correct']}, with a warning or error: {t['correct_with_warning']}")
    print(f"buggy programs: {t['buggy']}, caught with the right id: {t['buggy_caught']}")
    print(f"broken by the checker: {t['broken']}; skipped: {t['skipped']}")
    if med is not None:
        print(f"median check time / plain time: {med:.2f} over the {t['slowdown_runs']} programs check ran to "
              "their end (both times include starting Python and importing torch)")
    if t["median_check_over_plain_cpu"] is not None:
        print(f"median check CPU time / plain CPU time: {t['median_check_over_plain_cpu']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"totals": t, "programs": [
            {"name": o.program.name, "split": o.program.split, "repo": o.program.repo, "kind": o.program.kind, "expect": o.program.expect, "found": o.warnings,
             "info": o.infos, "verdict": o.verdict, "plain_s": o.plain_s, "check_s": o.check_s,
             "plain_cpu": o.plain_cpu, "check_cpu": o.check_cpu,
             "plain_rc": o.plain_rc, "check_rc": o.check_rc, "note": o.note, "coverage": o.coverage}
            for o in outcomes]}, indent=2), encoding="utf-8")
    bad = t["broken"] or t["correct_with_warning"] > 1 or (t["buggy"] and t["buggy_caught"] < 0.9 * t["buggy"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
