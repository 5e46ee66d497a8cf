"""Load the generated release tables (``rules/releases/``) and the cross-release index.

Loading is the audit's cold-start path: one table plus the index, each parsed and
validated in one ``msgspec.json.decode`` call straight into typed records, cached per
process.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import msgspec

from kvtool.errors import KvtoolError
from kvtool.releases.model import Gate, ReleaseFacts, ReleaseIndex
from kvtool.resources import rules_dir
from kvtool.versions import Version

_INDEX = "index.json"


def releases_dir() -> Path:
    return rules_dir() / "releases"


def _parse_version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except ValueError as exc:  # InvalidVersion, or digits past the int_digits limit
        raise KvtoolError(f"{what}: {text!r} is not a vLLM release version") from exc


@cache
def available_versions() -> list[str]:
    """Every release with a table, oldest first (sorted by PEP 440 order)."""
    names = [p.stem for p in releases_dir().glob("*.json") if p.name != _INDEX]
    return sorted(names, key=Version)


@cache
def load_release(version: str) -> ReleaseFacts:
    """The table for exactly ``version``; ``KvtoolError`` when there is none."""
    wanted = _parse_version(version.lstrip("vV"), "vLLM version")
    known = available_versions()
    match = next((v for v in known if Version(v) == wanted), None)  # "0.32" == "0.32.0"
    if match is None:
        span = f"{known[0]}..{known[-1]}" if known else "none"
        raise KvtoolError(f"no release table for vLLM {version} (tables cover {span})")
    path = releases_dir() / f"{match}.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=ReleaseFacts)
    except msgspec.DecodeError as exc:
        raise KvtoolError(f"release table {path} is corrupt: {exc}") from exc


@cache
def release_index() -> ReleaseIndex:
    """Gates (first_seen / gone_at / deprecated_since / replacement) across releases."""
    path = releases_dir() / _INDEX
    try:
        return msgspec.json.decode(path.read_bytes(), type=ReleaseIndex)
    except FileNotFoundError as exc:
        raise KvtoolError(f"release index {path} is missing from this installation") from exc
    except msgspec.DecodeError as exc:
        raise KvtoolError(f"release index {path} is corrupt: {exc}") from exc


def flag_gate(spelling: str) -> Gate | None:
    """Gate of a flag spelling (canonical, alias or ``--no-`` form) in any release."""
    return release_index().flags.get(spelling)


def env_var_gate(name: str) -> Gate | None:
    return release_index().env_vars.get(name)


def connector_gate(name: str) -> Gate | None:
    return release_index().connectors.get(name)


def tier_gate(name: str) -> Gate | None:
    return release_index().tiers.get(name)
