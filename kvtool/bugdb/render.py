"""The bug records as ``kvtool rule`` shows them: a one-line-per-record list or one record."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from kvtool.bugdb.model import BugRecord
from kvtool.bugdb.store import proof_of


def _range(bug: BugRecord) -> str:
    low = bug.introduced or "*"
    high = bug.fixed or "(open)"
    return f"{bug.component} {low} .. {high}"


def as_data(bug: BugRecord) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(bug)
    proof = proof_of(bug)
    data["severity"] = bug.impact.severity.value
    data["range_proven"] = proof is not None
    data["proof"] = msgspec.to_builtins(proof) if proof is not None else None
    return data


def listing(bugs: tuple[BugRecord, ...], output_format: str) -> str:
    if output_format == "json":
        return json.dumps([as_data(b) for b in bugs], indent=2) + "\n"
    lines = []
    for bug in bugs:
        proven = "proven" if proof_of(bug) is not None else "may affect"
        lines.append(
            f"{bug.id:<18} {bug.impact.value:<18} {_range(bug):<28} {proven:<10} {bug.title}"
        )
    return "\n".join(lines) + "\n"


def detail(bug: BugRecord, output_format: str) -> str:
    if output_format == "json":
        return json.dumps(as_data(bug), indent=2) + "\n"
    proof = proof_of(bug)
    lines = [
        f"{bug.id}: {bug.title}",
        f"  component: {bug.component}; affected: {_range(bug)}; state: {bug.state}",
        f"  impact: {bug.impact.value} ({bug.impact.words}); severity: {bug.impact.severity.value}",
        f"  report: {bug.report}",
        f"  fix: {bug.fix or 'none merged'}",
        f"  avoid: {bug.avoidance}",
    ]
    if bug.fix_flag:
        lines.append(f"  fix flag: {bug.fix_flag}")
    trigger = {k: v for k, v in msgspec.to_builtins(bug.trigger).items() if v}
    lines.append(f"  trigger: {json.dumps(trigger, sort_keys=True)}")
    if proof is not None:
        lines.append("  range proven from the wheels:")
        lines += [
            f"    {c.release}: marker {'present' if c.present else 'absent'} in {c.wheel}"
            f" (sha256 {c.sha256})"
            for c in proof.checks
        ]
    else:
        lines.append(f"  range not proven from source (may affect): {bug.unproven or 'stale'}")
    return "\n".join(lines) + "\n"
