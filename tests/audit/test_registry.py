"""The registry: every rule documented and cited, codes and names unique, bad metadata refused."""

from __future__ import annotations

from typing import ClassVar

import pytest

from kvtool.audit import rules as _rules  # noqa: F401  (registers every rule)
from kvtool.audit.model import Severity
from kvtool.audit.references import Reference
from kvtool.audit.registry import (
    DOC_SECTIONS,
    REFERENCES_SECTION,
    RegistryError,
    Rule,
    RuleRegistry,
    registry,
)

DOC = """Example rule.

What
----
w

Why
---
y

Example
-------
e

Fix
---
f

Releases
--------
r
"""


def test_every_rule_has_all_doc_sections_references_and_a_one_line_summary() -> None:
    assert len(registry) >= 40
    for rule in registry:
        assert list(rule.meta.sections) == [*DOC_SECTIONS, REFERENCES_SECTION], rule.code
        assert rule.meta.references, rule.code
        for reference in rule.meta.references:  # one source: the section lists the attribute
            assert reference.url in rule.meta.sections[REFERENCES_SECTION], rule.code
        assert "\n" not in rule.meta.summary


def test_codes_and_names_are_unique_and_resolve_both_ways() -> None:
    codes = [r.code for r in registry]
    names = [r.name for r in registry]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    for rule in registry:
        assert registry.get(rule.code) is rule
        assert registry.get(rule.name) is rule
        assert registry.get(rule.code.lower()) is rule


def test_selectors_accept_codes_names_prefixes_and_all() -> None:
    assert registry.select("VG002") == {"VG002"}
    assert registry.select("removed-flag") == {"VG002"}
    assert {"VG001", "VG002", "VG003"} <= registry.select("VG00")
    assert registry.select("ALL") == {r.code for r in registry}
    with pytest.raises(KeyError):
        registry.select("XX999")


def _rule(code: str, name: str, doc: str = DOC) -> type[Rule]:
    class Example(Rule):
        references: ClassVar[tuple[Reference, ...]] = (
            Reference("https://github.com/vllm-project/vllm/pull/1", "an example"),
        )
        since = "0.1.0"

    Example.code = code
    Example.name = name
    Example.default_severity = Severity.warning
    Example.summary = "one line"
    Example.__doc__ = doc
    return Example


def test_registry_refuses_duplicates_bad_codes_and_missing_sections() -> None:
    fresh = RuleRegistry()
    fresh.register(_rule("VG900", "example-rule"))
    with pytest.raises(RegistryError, match="duplicate rule code"):
        fresh.register(_rule("VG900", "other-rule"))
    with pytest.raises(RegistryError, match="duplicate rule name"):
        fresh.register(_rule("VG901", "example-rule"))
    with pytest.raises(RegistryError, match="family"):
        fresh.register(_rule("ZZ001", "zz-rule"))
    with pytest.raises(RegistryError, match="kebab-case"):
        fresh.register(_rule("VG902", "Not_Kebab"))
    with pytest.raises(RegistryError, match="Releases"):
        fresh.register(_rule("VG903", "no-releases", DOC.replace("Releases\n--------\nr\n", "")))
    with pytest.raises(RegistryError, match="references attribute"):
        fresh.register(_rule("VG904", "doc-references", DOC + "\nReferences\n----------\n- x\n"))


def test_a_finding_outside_the_declared_severities_or_fixes_is_refused() -> None:
    fresh = RuleRegistry()
    example = fresh.register(_rule("VG905", "declared-rule"))()
    assert example.finding("m").severity is Severity.warning
    with pytest.raises(ValueError, match="severity error is not declared"):
        example.finding("m", severity=Severity.error)


def test_rule_text_states_every_severity_and_fix_its_findings_may_have() -> None:
    from kvtool.audit.ruledocs import rule_text

    rule = registry.get("CN010")
    assert rule is not None
    assert rule_text(rule).startswith(
        f"CN010 {rule.name} (warning or info; fix: safe or unsafe; since kvtool {rule.since})"
    )
