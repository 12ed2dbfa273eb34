"""What the doctor reports: one `Check` per item, the `DoctorReport` of a run, and its text.

Every check returns a `Check` with a verdict: ok, warning (works, but something costs you speed or
will bite later), problem (something is broken; `fix` says what to do) or info (not applicable).
"""
from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from typing import Any

OK, WARNING, PROBLEM, INFO = "ok", "warning", "problem", "info"


@dataclass
class Check:
    name: str
    status: str
    summary: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    checks: list[Check]
    environment: dict[str, Any]
    elapsed_s: float

    @property
    def counts(self) -> dict[str, int]:
        counts = {OK: 0, WARNING: 0, PROBLEM: 0, INFO: 0}
        for check in self.checks:
            counts[check.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return self.counts[PROBLEM] == 0

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts,
            "environment": self.environment,
            "checks": [asdict(c) for c in self.checks],
            "elapsed_s": round(self.elapsed_s, 3),
        }


def format_report(report: DoctorReport) -> str:
    env = report.environment
    lines = [f"torchwise doctor: torch {env.get('torch', '?')} on {env.get('platform', platform.platform())}, "
             f"Python {env.get('python', '?')}", ""]
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        lines.append(f"  {check.status:<8} {check.name:<{width}}  {check.summary}")
        if check.fix and check.status in (WARNING, PROBLEM):
            lines.append(f"  {'':<8} {'':<{width}}  fix: {check.fix}")
    counts = report.counts
    verdict = "OK" if counts[PROBLEM] == 0 and counts[WARNING] == 0 else ("PROBLEMS FOUND" if counts[PROBLEM] else "WORKS, WITH WARNINGS")
    lines += ["", f"verdict: {verdict}: {counts[OK]} ok, {counts[WARNING]} warning(s), {counts[PROBLEM]} problem(s)"
                  f" ({report.elapsed_s:.1f} s)"]
    return "\n".join(lines)
