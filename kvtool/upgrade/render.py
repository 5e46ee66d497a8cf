"""Text, JSON and SARIF renderings of an :class:`~kvtool.upgrade.plan.UpgradeReport`.

JSON schema version 1::

    {"schema_version": 1, "tool": {...}, "to_version": "0.32.0", "breaks": bool,
     "invocations": [{"label", "file", "current": {"vllm_version", "source", "warning"},
                      "target": {...}, "image", "new_image", "breaks",
                      "steps": [{"version", "changes": [{"kind", "severity", "message",
                                 "code", "subject", "location", "fix", "touches"}]}],
                      "entered": [{"code", "severity", "message", "flag", "location"}],
                      "at_target": [...same fields...], "broken_now": [...]}]}

``breaks`` is true while the invocation does not start at the target release, whichever
release its errors entered at; ``at_target`` lists every finding there, ``entered`` those
the upgrade adds and ``broken_now`` the errors it already has at its current release.
SARIF carries every finding at the target release through the audit's own SARIF renderer.
The JSON Schema is ``docs/schemas/upgrade.schema.json``, generated from the records below.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.console import Console

from kvtool import __version__
from kvtool.audit.engine import AuditReport, InvocationReport, Target
from kvtool.audit.model import Finding, Location, Severity
from kvtool.output.kinds import ReportKind
from kvtool.termsafe import terminal_line
from kvtool.upgrade.plan import InvocationUpgrade, Step, UpgradeReport

SCHEMA_VERSION = 1
_MARKS = {"error": "E", "warning": "W", "info": "-"}


class EnteredFinding(msgspec.Struct, kw_only=True):
    """A finding of the invocation at a release (what ``entered``, ``at_target`` and
    ``broken_now`` list)."""

    code: str
    severity: Severity
    message: str
    flag: str | None
    location: Location | None


class InvocationDocument(msgspec.Struct, kw_only=True):
    label: str
    file: str | None
    current: Target
    target: Target
    image: str | None
    new_image: str | None
    breaks: bool
    steps: tuple[Step, ...]
    entered: list[EnteredFinding]
    at_target: list[EnteredFinding]
    broken_now: list[EnteredFinding]


class UpgradeDocument(msgspec.Struct, kw_only=True):
    tool: dict[str, str]
    to_version: str
    breaks: bool
    invocations: list[InvocationDocument]


def _invocation(inv: InvocationUpgrade) -> InvocationDocument:
    return InvocationDocument(
        label=inv.label,
        file=inv.file,
        current=inv.current,
        target=inv.target,
        image=inv.image,
        new_image=inv.new_image,
        breaks=inv.breaks,
        steps=inv.steps,
        entered=_documented(inv.entered),
        at_target=_documented(inv.at_target),
        broken_now=_documented(inv.broken_now),
    )


def _documented(findings: tuple[Finding, ...]) -> list[EnteredFinding]:
    return [
        EnteredFinding(
            code=f.code, severity=f.severity, message=f.message, flag=f.flag, location=f.location
        )
        for f in findings
    ]


def _document(report: UpgradeReport) -> dict[str, Any]:
    document: dict[str, Any] = msgspec.to_builtins(
        UpgradeDocument(
            tool={"name": "kvtool", "version": __version__},
            to_version=report.to_version,
            breaks=report.breaks,
            invocations=[_invocation(inv) for inv in report.invocations],
        )
    )
    return document


def as_audit_report(report: UpgradeReport) -> AuditReport:
    """Every finding each invocation has at the target, as an audit report (what
    ``--fix`` fixes and SARIF carries)."""
    return AuditReport(
        invocations=[
            InvocationReport(
                label=inv.label,
                file=inv.file,
                kind=inv.kind,
                target=inv.target,
                findings=list(inv.at_target),
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


def _verdict(inv: InvocationUpgrade) -> str:
    errors = inv.target_errors
    if not errors:
        return "starts as written"
    before = {(f.code, f.flag) for f in inv.broken_now}
    already = sum((f.code, f.flag) in before for f in errors)
    why = (
        f"{already} of them already fail at {inv.current.vllm_version}"
        if already
        else "all of them entered on the way"
    )
    return f"DOES NOT START as written: {len(errors)} error(s) at {inv.target.vllm_version} ({why})"


def text_report(report: UpgradeReport) -> str:
    lines: list[str] = []
    for inv in report.invocations:
        lines.append(
            f"{inv.label}: vLLM {inv.current.vllm_version} ({inv.current.source}) -> "
            f"{inv.target.vllm_version}: {_verdict(inv)}"
        )
        if inv.new_image:
            lines.append(f"  image: {inv.image} -> {inv.new_image}")
        if inv.at_target:
            lines.append(f"  at {inv.target.vllm_version} (what the audit reports there)")
            for finding in inv.at_target:
                mark = _MARKS[finding.severity.value]
                lines.append(f"    {mark} {finding.code} {finding.message}{_where(finding)}")
                fix = finding.fix
                if fix is not None and fix.applicability == "safe":
                    lines.append(f"        fix (safe, --fix): {fix.description}")
        for step in inv.steps:
            lines.append(f"  {step.version}")
            others = sum(not c.touches for c in step.changes)
            for change in (c for c in step.changes if c.touches):
                code = f"{change.code} " if change.code else ""
                mark = _MARKS[change.severity.value]
                lines.append(f"    {mark} {code}{change.message}{_where(change)}")
            if others:
                lines.append(
                    f"    - {others} more change(s) in this release that touch nothing this "
                    "invocation uses (--output-format json lists them)"
                )
        if not inv.steps:
            lines.append("  nothing changes for this invocation")
        lines.append("")
    # Labels, images and messages carry file names and flag values: each line is shown
    # as one line with its control characters escaped, never obeyed by the terminal.
    return "\n".join(map(terminal_line, lines))


def _print_text(report: UpgradeReport, console: Console) -> None:
    # Plain text as written: flag names and fixes are not rich markup.
    console.file.write(text_report(report))


UPGRADE: ReportKind[UpgradeReport] = ReportKind(
    name="upgrade",
    title="kvtool upgrade JSON report",
    schema_version=SCHEMA_VERSION,
    text=_print_text,
    document=_document,
    schema=lambda: msgspec.json.schema(UpgradeDocument),
    formats={"sarif": render_sarif},
)
