"""A Finding: one mistake found in one place, worded from its catalog entry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchwise.diagnose.catalog.detected_by import DETECTED_BY
from torchwise.diagnose.catalog.entries import CATALOG
from torchwise.diagnose.catalog.entry import SEVERITIES


@dataclass
class Finding:
    """One mistake found in one place, worded for a person."""

    id: str
    message: str                       # one sentence with the numbers
    where: str | None = None           # "train.py:42" in the user's code
    evidence: dict[str, Any] = field(default_factory=dict)
    severity: str = ""
    title: str = ""
    fix: str = ""
    why: str = ""
    maybe_fine: str = ""               # an "info" hint: why this may be by design

    def __post_init__(self) -> None:
        entry = CATALOG[self.id]
        self.severity = self.severity or entry.severity
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        self.title = self.title or entry.title
        self.fix = self.fix or entry.fix
        self.why = self.why or entry.why
        if self.severity == "info" and not self.maybe_fine:
            self.maybe_fine = entry.maybe_fine

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "title": self.title, "message": self.message,
                "where": self.where, "evidence": _jsonable(self.evidence), "why": self.why, "fix": self.fix,
                "detected_by": DETECTED_BY.get(self.id), "maybe_fine": self.maybe_fine or None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        """The inverse of to_dict (a finding reported by another process: a spawned worker, a rank)."""
        return cls(id=d["id"], message=d.get("message", ""), where=d.get("where"),
                   evidence=dict(d.get("evidence") or {}), severity=d.get("severity", ""),
                   title=d.get("title", ""), fix=d.get("fix", ""), why=d.get("why", ""),
                   maybe_fine=d.get("maybe_fine") or "")

    @property
    def counts(self) -> bool:
        """Whether it is a mistake (error/warning) rather than a hint that may be by design."""
        return self.severity != "info"

    def render(self) -> str:
        lines = [f"[{self.severity}] {self.id}: {self.title}"]
        if self.where:
            lines.append(f"  at {self.where}")
        lines.append(f"  {self.message}")
        if self.evidence:
            ev = ", ".join(f"{k}={_short(v)}" for k, v in self.evidence.items())
            lines.append(f"  evidence: {ev}")
        lines.append(f"  why it matters: {self.why}")
        if self.maybe_fine:
            lines.append(f"  may be fine: {self.maybe_fine}")
        lines.append("  fix:")
        lines.extend("      " + line for line in self.fix.splitlines())
        return "\n".join(lines)


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        items = [_short(x) for x in list(v)[:8]]
        return "[" + ", ".join(items) + (", ..." if len(v) > 8 else "") + "]"
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else str(v)
    if isinstance(v, (int, str, bool)) or v is None:
        return v
    return str(v)
