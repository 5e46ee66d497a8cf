"""``kvtool flag``: histories agree with the release tables they are computed from.

Expected values are found in the tables by each test (which flag was removed, whose
default changed), never typed in, so the tests follow new tables.
"""

from __future__ import annotations

import itertools
import json

from kvtool.flag.history import History, Unknown, history
from kvtool.releases import available_versions, load_release, release_index


def _names(version: str) -> set[str]:
    facts = load_release(version)
    return {s for f in facts.flags for s in (f.name, f.negative, *f.aliases) if s}


def _removed_deprecated_flag() -> str:
    flags = release_index().flags
    return next(n for n, g in sorted(flags.items()) if g.gone_at and g.deprecated_since)


def _default_change() -> tuple[str, str, object, object]:
    versions = available_versions()
    for older, newer in itertools.pairwise(versions):
        before = {f.name: f.default for f in load_release(older).flags}
        for flag in load_release(newer).flags:
            if flag.name in before and before[flag.name] != flag.default:
                return flag.name, newer, before[flag.name], flag.default
    raise AssertionError("no default changes between any two release tables")


def test_a_removed_flag_is_gone_after_its_last_release() -> None:
    name = _removed_deprecated_flag()
    found = history(name)
    assert isinstance(found, History) and found.kind == "flag"
    versions = available_versions()
    assert found.last_seen == versions[versions.index(found.gone_at or "") - 1]
    assert name in _names(found.last_seen) and name not in _names(found.gone_at or "")
    assert found.present[-1].last == found.last_seen
    removals = [c for c in found.changes if c.attribute == "present" and not c.after]
    assert removals[-1].version == found.gone_at


def test_every_present_release_has_the_name_and_no_other_does() -> None:
    found = history("--kv-offloading-size")
    assert isinstance(found, History)
    versions = available_versions()
    covered = {
        v
        for span in found.present
        for v in versions[versions.index(span.first) : versions.index(span.last) + 1]
    }
    assert covered == {v for v in versions if "--kv-offloading-size" in _names(v)}
    assert found.first_seen == min(covered, key=versions.index)


def test_a_default_change_is_reported_at_its_release() -> None:
    name, version, before, after = _default_change()
    found = history(name)
    assert isinstance(found, History)
    assert any(
        c.version == version and c.attribute == "default" and (c.before, c.after) == (before, after)
        for c in found.changes
    )


def test_negative_and_underscore_spellings_resolve_to_the_flag() -> None:
    newest = load_release(available_versions()[-1])
    flag = next(f for f in newest.flags if f.negative)
    found = history(flag.negative or "")
    assert isinstance(found, History) and found.canonical == flag.name
    underscored = history("--" + flag.name[2:].replace("-", "_"))
    assert isinstance(underscored, History) and underscored.name == flag.name


def test_env_var_connector_and_tier_are_found_by_kind() -> None:
    index = release_index()
    for kind, gates in (
        ("env_var", index.env_vars),
        ("connector", index.connectors),
        ("tier", index.tiers),
    ):
        name, gate = next((n, g) for n, g in sorted(gates.items()) if g.gone_at)
        found = history(name)
        assert isinstance(found, History), name
        assert (found.kind, found.first_seen, found.gone_at) == (
            kind,
            gate.first_seen,
            gate.gone_at,
        )
        assert found.replacement == gate.replacement


def test_deprecation_text_and_its_promise_come_from_vllm() -> None:
    name = _removed_deprecated_flag()
    found = history(name)
    assert isinstance(found, History) and found.deprecated_since
    last = next(f for f in load_release(found.last_seen or "").flags if f.name == name)
    assert found.deprecation_message == last.deprecation_message


def test_a_name_that_never_existed_gets_the_nearest_real_names() -> None:
    real = "--kv-offloading-size"
    found = history(real.replace("offloading", "offload"))
    assert isinstance(found, Unknown)
    assert real in found.nearest


def test_cli_text_and_json(kvtool_cli) -> None:  # type: ignore[no-untyped-def]
    name = _removed_deprecated_flag()
    text = kvtool_cli("flag", name)
    assert text.exit_code == 0 and text.stdout.startswith(name)
    assert history(name).gone_at in text.stdout  # type: ignore[union-attr]
    result = kvtool_cli("flag", name, "--output-format", "json")
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["found"] is True
    assert document["gone_at"] == release_index().flags[name].gone_at


def test_cli_unknown_name_exits_1_with_suggestions(kvtool_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "flag.json"
    result = kvtool_cli("flag", "--kv-offload-size", "--output-format", "json", "-o", str(out))
    assert result.exit_code == 1 and result.stdout == ""
    document = json.loads(out.read_text())
    assert document["found"] is False and "--kv-offloading-size" in document["nearest"]
