"""Derive the cross-release index (``rules/releases/index.json``) from release tables."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from packaging.version import Version

from kvtool.releases.model import Gate, ReleaseFacts, ReleaseIndex

# Per release: name -> deprecated?
Presence = dict[str, bool]


def _gates(
    versions: list[str],
    presence: Mapping[str, Presence],
    replacements: Mapping[str, str],
) -> dict[str, Gate]:
    names = sorted({n for p in presence.values() for n in p})
    gates: dict[str, Gate] = {}
    for name in names:
        present = [v for v in versions if name in presence[v]]
        first, last = present[0], present[-1]
        after_last = versions[versions.index(last) + 1 :]
        gone_at = after_last[0] if after_last else None
        deprecated_since = None
        for v in reversed(present):
            if not presence[v][name]:
                break
            deprecated_since = v
        gates[name] = Gate(
            first_seen=first,
            gone_at=gone_at,
            deprecated_since=deprecated_since,
            replacement=replacements.get(name),
        )
    return gates


def _collect(
    tables: list[ReleaseFacts], items: Callable[[ReleaseFacts], Iterable[tuple[str, bool]]]
) -> dict[str, Presence]:
    return {t.version: dict(items(t)) for t in tables}


def _flag_spellings(table: ReleaseFacts) -> Iterable[tuple[str, bool]]:
    for flag in table.flags:
        for spelling in (flag.name, *flag.aliases, flag.negative):
            if spelling:
                yield spelling, flag.deprecated


def build_index(tables: list[ReleaseFacts], curated: Mapping[str, str]) -> ReleaseIndex:
    """``curated`` maps a flag / env var / connector / tier name to its replacement; it
    wins over a replacement read from source (a deprecated env read names a config
    field, the curated row names the flag a user types)."""
    tables = sorted(tables, key=lambda t: Version(t.version))
    versions = [t.version for t in tables]
    from_source = {
        e.name: e.replacement for t in tables for e in t.env_vars if e.replacement is not None
    }
    env_replacements = {**from_source, **curated}
    return ReleaseIndex(
        versions=tuple(versions),
        wheels={t.version: t.wheel.sha256 for t in tables},
        flags=_gates(versions, _collect(tables, _flag_spellings), curated),
        env_vars=_gates(
            versions,
            _collect(tables, lambda t: ((e.name, e.deprecated) for e in t.env_vars)),
            env_replacements,
        ),
        connectors=_gates(
            versions, _collect(tables, lambda t: ((c.name, False) for c in t.connectors)), curated
        ),
        tiers=_gates(
            versions, _collect(tables, lambda t: ((n, False) for n in t.offload_tiers)), curated
        ),
        load_formats=_gates(
            versions, _collect(tables, lambda t: ((n, False) for n in t.load_formats)), curated
        ),
    )
