"""SARIF 2.1.0 (``--output-format sarif``) for GitHub code scanning and other viewers.

Rule metadata comes from the registry (one ``reportingDescriptor`` per rule: the
docstring as help text and markdown, ``helpUri`` its section of docs/rules.md, the
references and the release that introduced it). Security rules carry the ``security``
tag and ``security-severity`` GitHub code scanning ranks alerts by. Each result has a
``partialFingerprints`` entry that survives lines moving, so code scanning keeps one
alert per problem across pushes. A finding without a file (bare argv) is emitted
without a location; GitHub code scanning cannot annotate such a result.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kvtool import __version__
from kvtool.audit.engine import AuditReport
from kvtool.audit.model import Finding, Severity
from kvtool.audit.registry import Rule, registry
from kvtool.audit.render.json_report import docs_anchor
from kvtool.audit.render.objects import object_of
from kvtool.audit.ruledocs import sections_markdown

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {Severity.error: "error", Severity.warning: "warning", Severity.info: "note"}
# GitHub's security-severity scale: 9.0+ critical, 7.0+ high, 4.0+ medium, above 0 low.
SECURITY_SEVERITY = {"critical": "9.0", "high": "7.0", "moderate": "4.0", "low": "0.1"}
FINGERPRINT_KEY = "kvtoolFinding/v1"


def security_severity() -> str:
    """The security-severity of the security rules: the worst curated advisory's rating
    (an advisory without a rating counts as high)."""
    from kvtool.releases.curated import security_floor

    ratings = [a.severity or "high" for a in security_floor()]
    order = list(SECURITY_SEVERITY)
    worst = min(ratings, key=order.index, default="high")
    return SECURITY_SEVERITY[worst]


def _descriptor(rule: Rule) -> dict[str, Any]:
    meta = rule.meta
    sections = sections_markdown(rule)
    help_text = "\n\n".join(f"{title}\n{meta.sections[title]}" for title in meta.sections)
    help_markdown = "\n\n".join(f"**{title}**\n\n{body}" for title, body in sections.items())
    properties: dict[str, Any] = {
        "references": [ref.url for ref in meta.references],
        "fix": meta.fix_text,
        "since": meta.since,
        "tags": [meta.family],
    }
    if rule.security:
        properties["tags"].append("security")
        properties["security-severity"] = security_severity()
    return {
        "id": meta.code,
        "name": meta.name,
        "shortDescription": {"text": meta.summary},
        "fullDescription": {"text": meta.sections.get("What", meta.summary)},
        "helpUri": docs_anchor(meta.code, meta.name),
        "help": {"text": help_text, "markdown": help_markdown},
        "defaultConfiguration": {"level": LEVELS[meta.default_severity]},
        "properties": properties,
    }


def _rules() -> tuple[list[dict[str, Any]], dict[str, int]]:
    descriptors: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for position, rule in enumerate(registry):
        descriptors.append(_descriptor(rule))
        index[rule.code] = position
    return descriptors, index


def fingerprint(finding: Finding) -> str:
    """What identifies a finding across pushes: the rule, the file, the flag and the
    invocation, not the line (which moves when lines are added above it)."""
    loc = finding.location
    file = (loc.file or "") if loc else ""
    parts = (finding.code, file, finding.flag or "", finding.invocation or "")
    # A file name that is not UTF-8 carries its bytes as surrogates: hash those bytes.
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _result(finding: Finding, rule_index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVELS[finding.severity],
        "message": {"text": finding.message},
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint(finding)},
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
        location: dict[str, Any] = {"physicalLocation": physical}
        named = object_of(finding)
        if named:
            location["logicalLocations"] = [{"fullyQualifiedName": named, "kind": "object"}]
        result["locations"] = [location]
    return result


def artifact_uri(file: str) -> str:
    """A SARIF ``uri`` for ``file``: relative to the working directory when inside it
    (GitHub code scanning places results by repository-relative path), else a
    ``file://`` URI; either way percent-encoded, as a URI reference must be. A name that
    is not UTF-8 is encoded byte for byte (its surrogates are the bytes it was read as)."""
    path = Path(file)
    if not path.is_absolute():
        return _quoted(path.as_posix())
    try:
        return _quoted(path.relative_to(Path.cwd()).as_posix())
    except ValueError:
        return "file://" + _quoted(path.as_posix())


def _quoted(name: str) -> str:
    return quote(os.fsencode(name))


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
