"""The JSON report (``--output-format json``), versioned by ``schema_version``.

Schema version 1::

    {"schema_version": 1,
     "tool": {"name": "kvtool", "version": "..."},
     "target": {"vllm_version", "source", "warning", "origin", "exact"} | null,  # the first's
     "invocations": [{"label", "file", "kind", "target": {...}, "notes": [...]}],
     "findings": [{"code", "name", "severity", "message", "flag",
                   "location": {"file", "line", "column", "end_line", "end_column"} | null,
                   "fix": {"applicability", "description", "replacement_args"} | null,
                   "invocation", "docs", "references": [...], "evidence": {...}}],
     "summary": {"error", "warning", "info", "suppressed", "baselined", "unrendered"},
     "skipped": [{"file", "reason", "problem", "unrendered"}]}

``source`` is one of flag, settings, pip, build, image, annotation, dockerfile,
requirement, newest (the precedence is :mod:`kvtool.audit.vllm_release`'s); ``origin``
says where in words, and ``exact`` is false when the table only stands in for a release
kvtool cannot place. ``replacement_args`` are the words
that replace the finding's tokens (null when the fix removes or cannot be applied).
The JSON Schema generated from these records is docs/schemas/audit.schema.json.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

from kvtool import __version__
from kvtool.audit.engine import AuditReport, Target
from kvtool.audit.model import Finding, InputKind, Location, Severity
from kvtool.audit.registry import registry
from kvtool.audit.ruledocs import anchor
from kvtool.project import repository_file_url
from kvtool.releases.target import TargetSource

SCHEMA_VERSION = 1


class _Out(msgspec.Struct, frozen=True, kw_only=True):
    """One object of the report; field order is the order keys are printed."""


class JsonFix(_Out, frozen=True, kw_only=True):
    applicability: Literal["safe", "unsafe", "display"]
    description: str
    replacement_args: list[str] | None


class JsonFinding(_Out, frozen=True, kw_only=True):
    code: str
    name: str
    severity: Severity
    message: str
    flag: str | None
    location: Location | None
    fix: JsonFix | None
    invocation: str | None
    docs: str
    references: list[str]
    evidence: dict[str, Any]


class JsonTarget(_Out, frozen=True, kw_only=True):
    vllm_version: str
    source: TargetSource
    warning: str | None
    # Where the release was read ("image tag vllm/vllm-openai:v0.9.2", "pip install
    # vllm==0.11.2 at Dockerfile:4", "newest table").
    origin: str | None = None
    # False: the table stands in for a release kvtool cannot place; findings that depend
    # on the release were left out.
    exact: bool = True


class JsonInvocation(_Out, frozen=True, kw_only=True):
    label: str
    file: str | None
    kind: InputKind
    target: JsonTarget
    notes: list[str]


class JsonSkipped(_Out, frozen=True, kw_only=True):
    file: str
    reason: str
    problem: bool  # could not be read at all (fails the run like a finding)
    # A chart template that was not rendered: not audited (fails the run unless
    # --allow-unrendered).
    unrendered: bool = False
    never_read: bool = False  # a kind of file kvtool does not open (documentation, media)


class JsonReport(_Out, frozen=True, kw_only=True):
    schema_version: int
    tool: dict[str, str]
    target: JsonTarget | None
    invocations: list[JsonInvocation]
    findings: list[JsonFinding]
    summary: dict[str, int]
    # Files read but not audited: no server, chart templates, unreadable.
    skipped: list[JsonSkipped] = []


RULE_DOCS = "docs/rules.md"


def docs_anchor(code: str, name: str) -> str:
    """The public URL of the finding's section in the generated rule docs."""
    return repository_file_url(RULE_DOCS, anchor(code, name))


def _finding(finding: Finding) -> JsonFinding:
    rule = registry.get(finding.code)
    fix = None
    if finding.fix is not None:
        fix = JsonFix(
            applicability=finding.fix.applicability,
            description=finding.fix.description,
            replacement_args=list(finding.fix.replacement) if finding.fix.remove_tokens else None,
        )
    return JsonFinding(
        code=finding.code,
        name=finding.name,
        severity=finding.severity,
        message=finding.message,
        flag=finding.flag,
        location=finding.location,
        fix=fix,
        invocation=finding.invocation,
        docs=docs_anchor(finding.code, finding.name),
        references=[ref.url for ref in rule.references] if rule else [],
        evidence=finding.evidence,
    )


def _target(target: Target) -> JsonTarget:
    return JsonTarget(
        vllm_version=target.vllm_version,
        source=target.source,
        warning=target.warning,
        origin=target.origin,
        exact=target.exact,
    )


def build(report: AuditReport) -> JsonReport:
    invocations = [
        JsonInvocation(
            label=i.label, file=i.file, kind=i.kind, target=_target(i.target), notes=i.notes
        )
        for i in report.invocations
    ]
    return JsonReport(
        schema_version=SCHEMA_VERSION,
        tool={"name": "kvtool", "version": __version__},
        target=_target(report.invocations[0].target) if report.invocations else None,
        invocations=invocations,
        findings=[_finding(f) for f in report.findings],
        summary={
            **report.counts(),
            "suppressed": report.suppressed,
            "baselined": report.baselined,
            "unrendered": len(report.unrendered),
        },
        skipped=[
            JsonSkipped(
                file=s.file,
                reason=s.reason,
                problem=s.problem,
                unrendered=s.unrendered,
                never_read=s.never_read,
            )
            for s in report.skipped
        ],
    )


def render(report: AuditReport) -> str:
    return json.dumps(msgspec.to_builtins(build(report)), indent=2, sort_keys=False) + "\n"
