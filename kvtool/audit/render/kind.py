"""The audit's and ``kvtool rule``'s report kinds (see :mod:`kvtool.output.kinds`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from rich.console import Console

from kvtool.audit import ruledocs
from kvtool.audit.engine import AuditReport
from kvtool.audit.registry import Rule, RuleMeta
from kvtool.audit.render import json_report, text
from kvtool.output.kinds import ReportKind


def _sarif(report: AuditReport) -> str:
    from kvtool.audit.render import sarif  # imported by the runs that ask for it (hashlib)

    return sarif.render(report)


def _github(report: AuditReport) -> str:
    from kvtool.audit.render import github

    return github.render(report)


def _audit_document(report: AuditReport) -> dict[str, Any]:
    document: dict[str, Any] = msgspec.to_builtins(json_report.build(report))
    return document


AUDIT: ReportKind[AuditReport] = ReportKind(
    name="audit",
    title="kvtool audit JSON report",
    schema_version=json_report.SCHEMA_VERSION,
    text=text.print_report,
    document=_audit_document,
    schema=lambda: msgspec.json.schema(json_report.JsonReport),
    formats={"sarif": _sarif, "github": _github},
)


@dataclass(frozen=True)
class RuleSelection:
    """The rules ``kvtool rule`` shows; ``detailed`` for one rule, a one-line index for
    ``--all``."""

    rules: tuple[Rule, ...]
    detailed: bool


class _RuleDocument(msgspec.Struct, frozen=True):
    rules: list[RuleMeta]


def _rule_text(selection: RuleSelection, console: Console) -> None:
    # Plain text as written (rich would expand tabs and read nothing else in it).
    for rule in selection.rules:
        if selection.detailed:
            console.file.write(ruledocs.rule_text(rule))
        else:
            console.file.write(f"{rule.code} {rule.name}: {rule.meta.summary}\n")


def _rule_markdown(selection: RuleSelection) -> str:
    if selection.detailed:
        return "".join(ruledocs.rule_markdown(rule).rstrip() + "\n" for rule in selection.rules)
    return ruledocs.markdown()


RULE: ReportKind[RuleSelection] = ReportKind(
    name="rule",
    title="kvtool rule JSON document",
    schema_version=1,
    text=_rule_text,
    document=lambda selection: {"rules": [rule.meta.as_dict() for rule in selection.rules]},
    schema=lambda: msgspec.json.schema(_RuleDocument),
    formats={"markdown": _rule_markdown},
)
