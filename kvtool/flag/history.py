"""The history of one name across every generated release table.

A name is a ``vllm serve`` flag spelling (canonical, alias or ``--no-`` form), an
environment variable, a KV connector or an offload tier type. Gates (first seen, gone
at, deprecated since, replacement) come from the release index; what changed in between
(defaults, choices, SupportsHMA, deprecation text) is read release by release from the
tables themselves, by one probe per kind of name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from kvtool.releases import available_versions, load_release, release_index
from kvtool.releases.model import Gate, ReleaseFacts
from kvtool.versions import Version

NameKind = Literal["flag", "env_var", "connector", "tier"]

# What one release says about a name: attribute -> value; None when the release lacks it.
Snapshot = dict[str, Any]
Probe = Callable[[ReleaseFacts, str], Snapshot | None]

# "will be removed in v0.19", "removed in 0.33.0": the release a deprecation promised.
_PROMISE = re.compile(r"removed in v?(\d+\.\d+(?:\.\d+)?)", re.I)
_NEAREST = 5  # how many near names an unknown name is offered
_NEAREST_CUTOFF = 0.6  # difflib similarity below which a name is not "near"


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One attribute of the name that differs from the release before ``version``."""

    version: str
    attribute: str  # "present", "deprecated", "default", "choices", "supports_hma", ...
    before: Any
    after: Any


class Span(msgspec.Struct, frozen=True, kw_only=True):
    """Consecutive releases that have the name: ``first`` to ``last`` inclusive."""

    first: str
    last: str


class History(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # as looked up (a flag spelling is normalised to dashes)
    kind: NameKind
    canonical: str | None  # the canonical flag when ``name`` is an alias or --no- form
    oldest_table: str  # first_seen equal to this means "at or before"
    newest_table: str
    first_seen: str
    gone_at: str | None
    last_seen: str | None  # the last release that has it, when it is gone
    deprecated_since: str | None
    deprecation_message: str | None  # vLLM's own text, as the last deprecated release has it
    promised_removal: str | None  # the release the deprecation text names
    replacement: str | None
    present: tuple[Span, ...]
    changes: tuple[Change, ...]


class Unknown(msgspec.Struct, frozen=True, kw_only=True):
    """A name no release table has, with the nearest names that exist."""

    name: str
    oldest_table: str
    newest_table: str
    nearest: tuple[str, ...]


def _flag_probe(facts: ReleaseFacts, spelling: str) -> Snapshot | None:
    for flag in facts.flags:
        if spelling in (flag.name, flag.negative, *flag.aliases):
            return {
                "canonical": flag.name,
                "default": flag.default,
                # The config dataclass's default where the call site replaced it.
                "config_default": flag.config_default if flag.cli_default_overridden else None,
                "choices": list(flag.choices) if flag.choices is not None else None,
                "known_values": list(flag.known_values) if flag.known_values else None,
                "deprecated": flag.deprecated,
                "deprecation_message": flag.deprecation_message,
            }
    return None


def _env_probe(facts: ReleaseFacts, name: str) -> Snapshot | None:
    for env in facts.env_vars:
        if env.name == name:
            return {"deprecated": env.deprecated, "replacement": env.replacement}
    return None


def _connector_probe(facts: ReleaseFacts, name: str) -> Snapshot | None:
    for connector in facts.connectors:
        if connector.name == name:
            return {
                "supports_hma": connector.supports_hma,
                "hma_note": connector.hma_note,
                "module": connector.module,
            }
    return None


def _tier_probe(facts: ReleaseFacts, name: str) -> Snapshot | None:
    return {} if name in facts.offload_tiers else None


def _gates(kind: NameKind) -> Mapping[str, Gate]:
    index = release_index()
    return {
        "flag": index.flags,
        "env_var": index.env_vars,
        "connector": index.connectors,
        "tier": index.tiers,
    }[kind]


# One registry of name kinds, in lookup order: the probe that reads a release table.
PROBES: dict[NameKind, Probe] = {
    "flag": _flag_probe,
    "env_var": _env_probe,
    "connector": _connector_probe,
    "tier": _tier_probe,
}


def _spellings(name: str) -> list[str]:
    """The ways ``name`` may be meant: as written, and as a flag the way vLLM's parser
    rewrites it (underscores to dashes; ``kv-offloading-size`` with its dashes added)."""
    text = name.strip()
    out = [text]
    if text.startswith("-"):
        dashes = len(text) - len(text.lstrip("-"))
        out.append(text[:dashes] + text[dashes:].replace("_", "-"))
    elif re.fullmatch(r"[a-z][a-z0-9_-]*", text):
        out.append("--" + text.replace("_", "-"))
    return list(dict.fromkeys(out))


def find_kind(name: str) -> tuple[NameKind, str] | None:
    """The kind of ``name`` and its spelling in the index, or None when no release has it."""
    for spelling in _spellings(name):
        for kind in PROBES:
            if spelling in _gates(kind):
                return kind, spelling
    return None


def _spans(present: list[str]) -> tuple[Span, ...]:
    versions = available_versions()
    spans: list[Span] = []
    for version in present:
        position = versions.index(version)
        if spans and versions.index(spans[-1].last) == position - 1:
            spans[-1] = Span(first=spans[-1].first, last=version)
        else:
            spans.append(Span(first=version, last=version))
    return tuple(spans)


def _changes(snapshots: list[tuple[str, Snapshot | None]]) -> tuple[Change, ...]:
    """Release-by-release differences; the first appearance is no change unless a release
    table without the name comes before it."""
    changes: list[Change] = []
    previous: Snapshot | None = None
    for position, (version, snapshot) in enumerate(snapshots):
        if position and (previous is None) != (snapshot is None):
            attribute = (
                "present"
                if snapshot is None or any(s is not None for _, s in snapshots[:position])
                else "first_seen"
            )
            changes.append(
                Change(
                    version=version,
                    attribute=attribute,
                    before=previous is not None,
                    after=snapshot is not None,
                )
            )
        if previous is not None and snapshot is not None:
            for key, value in snapshot.items():
                if previous.get(key) != value:
                    changes.append(
                        Change(
                            version=version, attribute=key, before=previous.get(key), after=value
                        )
                    )
        if snapshot is not None:
            previous = snapshot
        elif position:
            previous = None
    return tuple(changes)


def history(name: str) -> History | Unknown:
    """Everything the release tables say about ``name``, or the nearest names that exist."""
    versions = available_versions()
    found = find_kind(name)
    if found is None:
        return Unknown(
            name=name,
            oldest_table=versions[0],
            newest_table=versions[-1],
            nearest=nearest_names(name),
        )
    kind, spelling = found
    gate = _gates(kind)[spelling]
    probe = PROBES[kind]
    snapshots = [(v, probe(load_release(v), spelling)) for v in versions]
    present = [v for v, s in snapshots if s is not None]
    messages = [s.get("deprecation_message") for _, s in snapshots if s and s.get("deprecated")]
    message = next((m for m in reversed(messages) if m), None)
    promise = _PROMISE.search(message) if message else None
    newest = next(s for _, s in reversed(snapshots) if s is not None)
    canonical = newest.get("canonical")
    return History(
        name=spelling,
        kind=kind,
        canonical=canonical if canonical != spelling else None,
        oldest_table=versions[0],
        newest_table=versions[-1],
        first_seen=gate.first_seen,
        gone_at=gate.gone_at,
        last_seen=present[-1] if gate.gone_at else None,
        deprecated_since=gate.deprecated_since,
        deprecation_message=message,
        promised_removal=promise.group(1) if promise else None,
        replacement=gate.replacement or newest.get("replacement"),
        present=_spans(present),
        changes=_changes(snapshots),
    )


def nearest_names(name: str) -> tuple[str, ...]:
    """The names of every kind closest to ``name`` (flags compared without their dashes)."""
    candidates = [n for kind in PROBES for n in _gates(kind)]
    key = name.strip().lstrip("-").replace("_", "-").lower()
    keyed: dict[str, list[str]] = {}
    for candidate in candidates:
        keyed.setdefault(candidate.lstrip("-").replace("_", "-").lower(), []).append(candidate)
    close = difflib.get_close_matches(key, keyed, n=_NEAREST, cutoff=_NEAREST_CUTOFF)
    return tuple(dict.fromkeys(c for k in close for c in sorted(keyed[k])))[:_NEAREST]


def removal_kept(found: History) -> bool | None:
    """Whether the deprecation's promised removal release is when it really went:
    None when no release was promised."""
    if found.promised_removal is None:
        return None
    return found.gone_at is not None and Version(found.gone_at) == Version(found.promised_removal)
