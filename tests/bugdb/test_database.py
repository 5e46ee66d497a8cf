"""The bug database as users read it: the loader's refusals, ``kvtool rule`` views, the
OSV export, and the proofs' agreement with each record's range."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kvtool.bugdb import proof_of, proofs, records
from kvtool.bugdb.model import BugRecord
from kvtool.bugdb.osv import osv_document
from kvtool.bugdb.store import parse_records
from kvtool.errors import KvtoolError
from tests.conftest import REPO_ROOT

SCHEMA = REPO_ROOT / "docs" / "schemas" / "bug-record.schema.json"
GOOD = {
    "id": "KB-VLLM-45268",
    "title": "t",
    "component": "vllm",
    "report": "https://github.com/vllm-project/vllm/issues/45268",
    "state": "open",
    "impact": "crashes-under-load",
    "avoidance": "a",
    "unproven": "open",
    "trigger": {"connectors": ["OffloadingConnector"]},
    "examples": [
        {"fires": True, "version": "0.32.0", "command": "vllm serve m"},
        {"fires": False, "version": "0.32.0", "command": "vllm serve m"},
    ],
}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"id": "KB-LMCACHE-45268"}, "KB-VLLM-<number>"),
        ({"report": "https://github.com/vllm-project/vllm/issues/1"}, "numbered as the id"),
        ({"fixed": "0.23.0"}, "state 'fixed'"),
        ({"unproven": None}, "give a marker"),
        ({"impact": "sad"}, "impact"),
        ({"trigger": {"model": "("}}, "regular expression"),
        ({"trigger": {"colour": "red"}}, "colour"),
        ({"examples": []}, "one that fires"),
    ],
)
def test_a_bad_record_is_refused_with_file_and_record_named(
    change: dict[str, Any], words: str
) -> None:
    row = {**GOOD, **change}
    row = {k: v for k, v in row.items() if v is not None}
    with pytest.raises(KvtoolError) as caught:
        parse_records([row], "rules/bugs/vllm.toml")
    message = str(caught.value)
    assert "rules/bugs/vllm.toml" in message and row["id"] in message and words in message


def test_the_good_record_loads() -> None:
    (bug,) = parse_records([GOOD], "x.toml")
    assert bug.upstream == "vllm-project/vllm#45268"


def test_the_json_schema_is_the_loader_schema() -> None:
    # docs/schemas/bug-record.schema.json is written by scripts/gen_bug_ranges.py.
    assert json.loads(SCHEMA.read_text()) == json.loads(json.dumps(msgspec.json.schema(BugRecord)))


def test_every_marked_record_has_a_proof_that_holds_for_its_range() -> None:
    marked = [b for b in records() if b.marker is not None]
    assert marked
    for bug in marked:
        proof = proofs()[bug.id]
        assert (proof.introduced, proof.fixed) == (bug.introduced, bug.fixed), bug.id
        assert all(c.present == c.expected for c in proof.checks), bug.id
        for check in proof.checks:
            assert re.fullmatch(r"[0-9a-f]{64}", check.sha256)
        # A range is proven only when a marker checks each end it sets.
        assert (proof_of(bug) is None) == bool(proof.unchecked), bug.id


def test_rule_lists_and_shows_records(kvtool_cli: Any) -> None:
    listed = kvtool_cli("rule", "--bugs", "--output-format", "json")
    assert listed.exit_code == 0
    ids = [row["id"] for row in json.loads(listed.stdout)]
    assert ids == [b.id for b in records()]
    bug = next(b for b in records() if b.marker is not None)
    shown = kvtool_cli("rule", bug.id.lower())
    assert shown.exit_code == 0 and bug.report in shown.stdout and "sha256" in shown.stdout
    missing = kvtool_cli("rule", "KB-VLLM-1")
    assert missing.exit_code == 2 and "not a bug record" in missing.stderr


def test_sc002_cites_only_records_in_the_database() -> None:
    from kvtool.audit.registry import registry

    rule = registry.get("SC002")
    assert rule is not None
    reports = {b.report for b in records()}
    for reference in rule.meta.references:
        assert reference.url in reports, reference.url


def _osv_shape_errors(doc: dict[str, Any]) -> list[str]:
    """The OSV 1.6 fields this export fills, checked as the schema requires them
    (https://github.com/ossf/osv-schema/blob/main/validation/schema.json)."""
    errors = []
    for key in ("schema_version", "id", "modified"):
        if not isinstance(doc.get(key), str):
            errors.append(f"{key} missing")
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc.get("modified", "")):
        errors.append("modified is not RFC 3339 UTC")
    for affected in doc.get("affected", []):
        for rng in affected["ranges"]:
            if rng["type"] not in ("ECOSYSTEM", "SEMVER", "GIT"):
                errors.append(f"range type {rng['type']}")
            events = rng["events"]
            if not events or "introduced" not in events[0]:
                errors.append("the first event must be introduced")
            for event in events:
                if len(event) != 1 or set(event) - {"introduced", "fixed", "last_affected"}:
                    errors.append(f"event {event}")
    for ref in doc.get("references", []):
        if ref["type"] not in (
            "ADVISORY",
            "ARTICLE",
            "DETECTION",
            "DISCUSSION",
            "REPORT",
            "FIX",
            "INTRODUCED",
            "PACKAGE",
            "EVIDENCE",
            "WEB",
        ):
            errors.append(f"reference type {ref['type']}")
    return errors


def test_osv_export_writes_one_valid_document_per_record(kvtool_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "osv"
    result = kvtool_cli("rule", "--export-osv", str(out))
    assert result.exit_code == 0, result.stderr
    written = sorted(out.glob("*.json"))
    assert len(written) == len(records())
    for path in written:
        doc = json.loads(path.read_text())
        assert _osv_shape_errors(doc) == [], path.name
    fixed = next(b for b in records() if b.fixed and b.package == "vllm")
    doc = osv_document(fixed, "2026-01-01T00:00:00Z")
    assert doc["affected"][0]["package"] == {"ecosystem": "PyPI", "name": "vllm"}
    assert {"fixed": fixed.fixed} in doc["affected"][0]["ranges"][0]["events"]
    assert {"type": "REPORT", "url": fixed.report} in doc["references"]


def test_osv_export_never_writes_into_a_folder_with_files(kvtool_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "keep.json").write_text("{}")
    result = kvtool_cli("rule", "--export-osv", str(tmp_path))
    assert result.exit_code == 2
    assert (tmp_path / "keep.json").read_text() == "{}"
    assert list(tmp_path.iterdir()) == [tmp_path / "keep.json"]


def test_the_database_refuses_a_bad_pattern_on_every_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Patterns are compiled once per change of a database file (its cached form has
    passed the check), never skipped: a file with a bad one is refused each time."""
    import tomllib

    from kvtool.bugdb import store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KVTOOL_TABLE_CACHE", raising=False)
    monkeypatch.setattr(store, "bugs_dir", lambda: tmp_path)
    good = (REPO_ROOT / "rules" / "bugs" / "vllm.toml").read_text(encoding="utf-8")
    (tmp_path / "vllm.toml").write_text(good, encoding="utf-8")
    expected = parse_records(tomllib.loads(good)["bugs"], "vllm.toml")
    for _ in range(2):  # parsed and checked, then from the cache
        store.records.cache_clear()
        assert store.records() == expected
    bad = {**GOOD, "trigger": {"model": "("}}
    (tmp_path / "vllm.toml").write_text(f"[[bugs]]\n{_toml_fields(bad)}", encoding="utf-8")
    for _ in range(2):
        store.records.cache_clear()
        with pytest.raises(KvtoolError, match="KB-VLLM-45268: not a regular expression"):
            store.records()
    store.records.cache_clear()


def _toml_fields(row: dict[str, Any]) -> str:
    """``row`` as TOML key lines (JSON values are valid TOML inline values here)."""
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in row.items())


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)
