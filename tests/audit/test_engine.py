"""The engine with in-memory tables: selection, severity overrides, suppression scopes."""

from __future__ import annotations

import msgspec

from kvtool.audit.context import ModelFacts
from kvtool.audit.engine import Auditor, Target
from kvtool.audit.model import Invocation, Location, SourceToken, Suppression
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables

FILE = "run.sh"


class FixedTables(ShippedTables):
    """The shipped tables pinned to one release; counts model lookups to show they are lazy."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.model_lookups = 0

    def target(
        self, requested: str | None, image: str | None, *, origin: str = "--vllm-version"
    ) -> Target:
        return Target(
            vllm_version=requested or self.version, source="flag" if requested else "newest"
        )

    def model(self, name: str) -> ModelFacts | None:
        self.model_lookups += 1
        return None


def invocation(*words: str, suppressions: tuple[Suppression, ...] = ()) -> Invocation:
    tokens = tuple(
        SourceToken(
            text=w, location=Location(file=FILE, line=2 + i, column=3, end_column=3 + len(w))
        )
        for i, w in enumerate(words)
    )
    return Invocation(
        kind="shell", label=f"{FILE}:2", file=FILE, tokens=tokens, suppressions=suppressions
    )


def run(
    inv: Invocation, settings: AuditSettings | None = None
) -> list[tuple[str, str, int | None]]:
    auditor = Auditor(
        FixedTables("0.32.0"), normalize, settings or AuditSettings(vllm_version="0.32.0")
    )
    report = auditor.run([inv])
    return [
        (f.code, f.severity.value, f.location.line if f.location else None) for f in report.findings
    ]


def test_findings_are_sorted_by_line_and_carry_the_invocation_label() -> None:
    inv = invocation("m", "--swap-space", "4", "--calculate-kv-scales")
    assert run(inv) == [("VG002", "error", 3), ("VG002", "error", 5)]


def test_severity_override_and_ignore() -> None:
    inv = invocation("m", "--swap-space", "4")
    settings = msgspec.convert(
        {"vllm-version": "0.32.0", "severity": {"VG002": "info"}}, type=AuditSettings
    )
    assert run(inv, settings) == [("VG002", "info", 3)]
    assert run(inv, AuditSettings(vllm_version="0.32.0", ignore=("VG",))) == []


def test_file_scope_suppression_and_unused_reporting_can_be_ignored() -> None:
    where = Location(file=FILE, line=1, column=1)
    file_wide = Suppression(codes=("removed-flag",), reason="tracked", location=where, scope="file")
    stale = Suppression(codes=("SZ001",), reason="old", location=where, scope="line", target_line=3)
    inv = invocation("m", "--swap-space", "4", suppressions=(file_wide, stale))
    assert run(inv) == [("KV000", "warning", 1)]
    assert run(inv, AuditSettings(vllm_version="0.32.0", ignore=("unused-suppression",))) == []


def test_model_facts_are_only_looked_up_when_a_rule_needs_them() -> None:
    tables = FixedTables("0.32.0")
    Auditor(tables, normalize, AuditSettings(vllm_version="0.32.0")).run(
        [invocation("m", "--swap-space", "4")]
    )
    assert tables.model_lookups == 0
    needs_model = invocation("m", "--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1"}')
    Auditor(tables, normalize, AuditSettings(vllm_version="0.32.0")).run([needs_model])
    assert tables.model_lookups == 1


def test_one_auditor_gives_the_same_report_on_every_run() -> None:
    where = Location(file=FILE, line=1, column=1)
    stale = Suppression(codes=("SZ001",), reason="", location=where, scope="file")
    inv = invocation("m", "--swap-space", "4", suppressions=(stale,))
    auditor = Auditor(FixedTables("0.32.0"), normalize, AuditSettings(vllm_version="0.32.0"))
    first = [(f.code, f.message) for f in auditor.run([inv]).findings]
    assert {code for code, _ in first} == {"KV000", "KV001", "VG002"}
    assert [(f.code, f.message) for f in auditor.run([inv]).findings] == first
