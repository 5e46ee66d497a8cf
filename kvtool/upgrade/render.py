"""Text, JSON and SARIF renderings of an :class:`~kvtool.upgrade.plan.UpgradeReport`.

JSON schema version 1::

    {"schema_version": 1, "tool": {...}, "to_version": "0.32.0", "breaks": bool,
     "invocations": [{"label", "file", "current": {"vllm_version", "source", "warning"},
                      "target": {...}, "image", "new_image", "breaks",
                      "steps": [{"version", "changes": [{"kind", "severity", "message",
                                 "code", "subject", "location", "fix", "touches"}]}],
                      "entered": [{"code", "severity", "message", "flag", "location"}]}]}

SARIF carries the findings the invocations gain at the target release (what breaks or
newly warns), through the audit's own SARIF renderer.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from kvtool import __version__
from kvtool.audit.engine import AuditReport, InvocationReport
from kvtool.upgrade.plan import InvocationUpgrade, UpgradeReport

SCHEMA_VERSION = 1
_MARKS = {"error": "E", "warning": "W", "info": "-"}


def _invocation(inv: InvocationUpgrade) -> dict[str, Any]:
    return {
        "label": inv.label,
        "file": inv.file,
        "current": msgspec.to_builtins(inv.current),
        "target": msgspec.to_builtins(inv.target),
        "image": inv.image,
        "new_image": inv.new_image,
        "breaks": inv.breaks,
        "steps": msgspec.to_builtins(inv.steps),
        "entered": [
            {
                "code": f.code,
                "severity": f.severity.value,
                "message": f.message,
                "flag": f.flag,
                "location": msgspec.to_builtins(f.location),
            }
            for f in inv.entered
        ],
    }


def render_json(report: UpgradeReport) -> str:
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "kvtool", "version": __version__},
        "to_version": report.to_version,
        "breaks": report.breaks,
        "invocations": [_invocation(inv) for inv in report.invocations],
    }
    return json.dumps(document, indent=2) + "\n"


def as_audit_report(report: UpgradeReport) -> AuditReport:
    """The findings each invocation gains at the target, as an audit report."""
    return AuditReport(
        invocations=[
            InvocationReport(
                label=inv.label,
                file=inv.file,
                kind=inv.kind,
                target=inv.target,
                findings=list(inv.entered),
            )
            for inv in report.invocations
        ]
    )


def render_sarif(report: UpgradeReport) -> str:
    from kvtool.audit.render.sarif import render

    return render(as_audit_report(report))


def _where(change: Any) -> str:
    loc = change.location
    return f" (line {loc.line})" if loc is not None and loc.line else ""


def render_text(report: UpgradeReport) -> str:
    lines: list[str] = []
    for inv in report.invocations:
        verdict = "BREAKS as written" if inv.breaks else "starts as written"
        lines.append(
            f"{inv.label}: vLLM {inv.current.vllm_version} ({inv.current.source}) -> "
            f"{inv.target.vllm_version}: {verdict}"
        )
        if inv.new_image:
            lines.append(f"  image: {inv.image} -> {inv.new_image}")
        for step in inv.steps:
            lines.append(f"  {step.version}")
            others = sum(not c.touches for c in step.changes)
            for change in (c for c in step.changes if c.touches):
                code = f"{change.code} " if change.code else ""
                mark = _MARKS[change.severity.value]
                lines.append(f"    {mark} {code}{change.message}{_where(change)}")
                if change.fix:
                    lines.append(f"        fix (safe, --fix): {change.fix}")
            if others:
                lines.append(
                    f"    - {others} more change(s) in this release that touch nothing this "
                    "invocation uses (--output-format json lists them)"
                )
        if not inv.steps:
            lines.append("  nothing changes for this invocation")
        lines.append("")
    return "\n".join(lines)
