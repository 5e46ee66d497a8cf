"""The bug records as OSV documents (https://ossf.github.io/osv-schema/, schema 1.6.0).

One document per record: ``affected[].ranges[]`` is an ``ECOSYSTEM`` range over the
component's PyPI package with ``introduced``/``fixed`` events (``introduced: "0"`` for a
range open at the bottom), ``references`` hold the report and the fix, and
``database_specific`` carries what OSV has no field for: the trigger, the impact and
severity, the avoidance and whether the range was proven from the wheels.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from kvtool.bugdb.model import BugRecord
from kvtool.bugdb.store import proof_of, records

SCHEMA_VERSION = "1.6.0"


def osv_document(bug: BugRecord, modified: str) -> dict[str, Any]:
    events: list[dict[str, str]] = [{"introduced": bug.introduced or "0"}]
    if bug.fixed is not None:
        events.append({"fixed": bug.fixed})
    references = [{"type": "REPORT", "url": bug.report}]
    if bug.fix is not None:
        references.append({"type": "FIX", "url": bug.fix})
    proof = proof_of(bug)
    affected: dict[str, Any] = {"ranges": [{"type": "ECOSYSTEM", "events": events}]}
    if bug.package is not None:
        affected["package"] = {"ecosystem": "PyPI", "name": bug.package}
    else:
        affected["package"] = {"name": bug.component}
        affected["ranges"][0]["type"] = "SEMVER"
    return {
        "schema_version": SCHEMA_VERSION,
        "id": bug.id,
        "modified": modified,
        "summary": bug.title[:120],
        "details": f"{bug.title}. Impact: {bug.impact.words}. Avoid: {bug.avoidance}",
        "affected": [affected],
        "references": references,
        "database_specific": {
            "component": bug.component,
            "state": bug.state,
            "impact": bug.impact.value,
            "severity": bug.impact.severity.value,
            "trigger": msgspec.to_builtins(bug.trigger),
            "avoidance": bug.avoidance,
            "fix_flag": bug.fix_flag,
            "range_proven": proof is not None,
            "proof": (
                [
                    {"release": c.release, "sha256": c.sha256, "marker_present": c.present}
                    for c in proof.checks
                ]
                if proof is not None
                else None
            ),
            "unproven": bug.unproven,
        },
    }


def export(directory: Path, modified: str | None = None) -> list[Path]:
    """Write ``<id>.json`` per record into ``directory``; the paths written."""
    stamp = modified or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for bug in records():
        path = directory / f"{bug.id}.json"
        path.write_text(json.dumps(osv_document(bug, stamp), indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written
