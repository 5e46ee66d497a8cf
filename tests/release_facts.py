"""Release facts the tests need, looked up in the release index instead of typed in."""

from __future__ import annotations

from packaging.version import Version

from kvtool.releases import available_versions, load_release, release_index


def removed_value_flags(gone_by: str | None = None) -> list[str]:
    """Canonical flags that take a value and are gone at or before ``gone_by`` (default: the
    newest release): the audit reports each as an error there."""
    versions = available_versions()
    limit = Version(gone_by or versions[-1])
    names = []
    for name, gate in sorted(release_index().flags.items()):
        if gate.gone_at is None or name.startswith("--no-") or Version(gate.gone_at) > limit:
            continue
        last = versions[versions.index(gate.gone_at) - 1]
        fact = next((f for f in load_release(last).flags if f.name == name), None)
        if fact is not None and fact.value == "required":
            names.append(name)
    return names
