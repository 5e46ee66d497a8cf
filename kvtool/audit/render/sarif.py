"""SARIF 2.1.0 (``--output-format sarif``) for GitHub code scanning and other viewers.

Rule metadata comes from the registry (one ``reportingDescriptor`` per rule, the
docstring as help text). A finding without a file (bare argv) is emitted without a
location; GitHub code scanning cannot annotate such a result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kvtool import __version__
from kvtool.audit.engine import AuditReport
from kvtool.audit.model import Finding, Severity
from kvtool.audit.registry import registry

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {Severity.error: "error", Severity.warning: "warning", Severity.info: "note"}


def _rules() -> tuple[list[dict[str, Any]], dict[str, int]]:
    descriptors: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for position, rule in enumerate(registry):
        meta = rule.meta
        help_text = "\n\n".join(f"{title}\n{meta.sections[title]}" for title in meta.sections)
        descriptors.append(
            {
                "id": meta.code,
                "name": meta.name,
                "shortDescription": {"text": meta.summary},
                "fullDescription": {"text": meta.sections.get("What", meta.summary)},
                "help": {"text": help_text},
                "defaultConfiguration": {"level": LEVELS[meta.default_severity]},
                "properties": {"references": list(meta.references), "fix": meta.fix_applicability},
            }
        )
        index[meta.code] = position
    return descriptors, index


def _result(finding: Finding, rule_index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVELS[finding.severity],
        "message": {"text": finding.message},
        "properties": {
            "name": finding.name,
            "flag": finding.flag,
            "invocation": finding.invocation,
        },
    }
    if finding.code in rule_index:
        result["ruleIndex"] = rule_index[finding.code]
    loc = finding.location
    if loc is not None and loc.file:
        region: dict[str, int] = {}
        if loc.line:
            region["startLine"] = loc.line
            if loc.column:
                region["startColumn"] = loc.column
            if loc.end_line:
                region["endLine"] = loc.end_line
            if loc.end_column:
                region["endColumn"] = loc.end_column
        physical: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(loc.file)}}
        if region:
            physical["region"] = region
        result["locations"] = [{"physicalLocation": physical}]
    return result


def artifact_uri(file: str) -> str:
    """A SARIF ``uri`` for ``file``: relative to the working directory when inside it
    (GitHub code scanning places results by repository-relative path), else a
    ``file://`` URI; either way percent-encoded, as a URI reference must be."""
    path = Path(file)
    if not path.is_absolute():
        return quote(path.as_posix())
    try:
        return quote(path.relative_to(Path.cwd()).as_posix())
    except ValueError:
        return path.as_uri()


def build(report: AuditReport) -> dict[str, Any]:
    descriptors, rule_index = _rules()
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {"name": "kvtool", "version": __version__, "rules": descriptors}
                },
                "results": [_result(f, rule_index) for f in report.findings],
                # Files that could not be read: tool notifications, not results.
                "invocations": [
                    {
                        "executionSuccessful": True,
                        "toolExecutionNotifications": [
                            {
                                "level": "error",
                                "message": {"text": f"not read: {s.reason}"},
                                "locations": [
                                    {
                                        "physicalLocation": {
                                            "artifactLocation": {"uri": artifact_uri(s.file)}
                                        }
                                    }
                                ],
                            }
                            for s in report.unreadable
                        ],
                    }
                ],
                "properties": {
                    "targets": [
                        {
                            "invocation": i.label,
                            "vllm_version": i.target.vllm_version,
                            "source": i.target.source,
                        }
                        for i in report.invocations
                    ]
                },
            }
        ],
    }


def render(report: AuditReport) -> str:
    return json.dumps(build(report), indent=2) + "\n"
