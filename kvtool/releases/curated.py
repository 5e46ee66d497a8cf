"""Hand-curated tables in ``rules/curated/``: only what a wheel's source cannot say.

Every row carries ``source`` (a URL, ``owner/repo#number`` or a reference-document
section) so a reviewer can check it. Version ranges are half-open: ``introduced``
is the first affected release, ``fixed`` the first release that is not affected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir
from kvtool.versions import InvalidVersion, Version


class _Row(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: Annotated[str, msgspec.Meta(min_length=3)]  # URL, repo#number or reference §


_RowT = TypeVar("_RowT", bound=_Row)


def _check_versions(**fields: str | None) -> None:
    """Raise ``ValueError`` naming the first field that is not a release version."""
    for name, value in fields.items():
        if value is not None:
            try:
                Version(value)
            except InvalidVersion as exc:
                raise ValueError(f"{name}: not a release version: {value!r}") from exc


def _in_range(version: str, low: str | None, high: str | None) -> bool:
    v = Version(version)
    if low is not None and v < Version(low):
        return False
    return not (high is not None and v >= Version(high))


class VersionRange(_Row, frozen=True, kw_only=True):
    """Releases ``introduced <= v < fixed`` (either end open when None)."""

    introduced: str | None = None
    fixed: str | None = None

    def __post_init__(self) -> None:
        _check_versions(introduced=self.introduced, fixed=self.fixed)

    def contains(self, version: str) -> bool:
        return _in_range(version, self.introduced, self.fixed)


class Span(_Row, frozen=True, kw_only=True):
    """Releases ``since <= v < until`` over which a fact holds (either end open)."""

    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        _check_versions(since=self.since, until=self.until)

    def contains(self, version: str) -> bool:
        return _in_range(version, self.since, self.until)


class FlagReplacement(_Row, frozen=True, kw_only=True):
    """What to use instead of a removed or deprecated flag, env var, connector or tier."""

    name: str  # "--calculate-kv-scales", "VLLM_...", "P2pNcclConnector", "fs_python"
    replacement: str  # spelled as the user would write it, or a short instruction
    min_version: str | None = None  # the replacement needs at least this release

    def __post_init__(self) -> None:
        _check_versions(min_version=self.min_version)


class SecurityAdvisory(VersionRange, frozen=True, kw_only=True):
    """A published vulnerability in vLLM itself, with the first fixed release."""

    id: str  # CVE id
    aliases: tuple[str, ...] = ()  # GHSA ids
    summary: str
    # As the advisory rates it; None where the cited source gives no rating.
    severity: Literal["low", "moderate", "high", "critical"] | None = None
    applies_when: str = ""  # exposure condition in words ("video models only")


class BundlingPin(Span, frozen=True, kw_only=True):
    """A KV-connector package version tied to vLLM releases (build pin or image content)."""

    package: str  # lmcache, nixl, mooncake-transfer-engine, cupy-cuda13x
    requirement: str  # PEP 440 specifier, e.g. "==0.4.4", ">=0.3.9"
    where: str  # "requirements/kv_connectors_cu12.txt", "image vllm/vllm-openai:v0.29.0"
    verified: bool = False  # False: stated by a source kvtool could not check itself


class BackendConnectorRow(Span, frozen=True, kw_only=True):
    """How ``--kv-offloading-backend`` turns into a KV connector over a release range."""

    backend: Literal["native", "lmcache"]
    connector: str
    # e.g. {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}
    when_env: dict[str, str] = msgspec.field(default_factory=dict)
    activation: Literal["backend", "size"]  # which flag being set triggers the conversion
    size_passed_on: bool  # whether --kv-offloading-size reaches the connector
    size_scope: Literal["total", "ignored"]  # how vLLM reads the user's number
    replaces_extra_config: bool  # the conversion replaces kv_connector_extra_config wholesale
    notes: str = ""


class SemanticFact(Span, frozen=True, kw_only=True):
    """A behaviour read from code that is not a presence check (HMA decisions, ...)."""

    key: str  # stable identifier consumers look up, e.g. "hma.decision"
    statement: str
    value: str | None = None  # a machine-usable value where one exists


def _curated_path(name: str) -> Path:
    return rules_dir() / "curated" / name


@cache
def _rows(name: str) -> list[dict[str, Any]]:
    rows = read_table(_curated_path(name)).get("rows", [])
    if not isinstance(rows, list):
        raise KvtoolError(f"curated table {_curated_path(name)}: 'rows' must be a list")
    return rows


def _load(name: str, model: type[_RowT]) -> tuple[_RowT, ...]:
    out = []
    for i, row in enumerate(_rows(name)):
        try:
            out.append(msgspec.convert(row, type=model))
        except msgspec.ValidationError as exc:
            raise KvtoolError(f"curated table {_curated_path(name)}: row {i + 1}: {exc}") from exc
    return tuple(out)


@cache
def replacements() -> tuple[FlagReplacement, ...]:
    return _load("replacements.toml", FlagReplacement)


def flag_replacements() -> dict[str, str]:
    """Name (flag, env var or connector) -> replacement text."""
    return {r.name: r.replacement for r in replacements()}


@cache
def security_floor() -> tuple[SecurityAdvisory, ...]:
    return _load("security.toml", SecurityAdvisory)


@cache
def bundling_pins() -> tuple[BundlingPin, ...]:
    return _load("bundling.toml", BundlingPin)


@cache
def backend_connector_map() -> tuple[BackendConnectorRow, ...]:
    return _load("backend_connector.toml", BackendConnectorRow)


@cache
def semantic_facts() -> tuple[SemanticFact, ...]:
    return _load("semantics.toml", SemanticFact)


def backend_connector(
    backend: str, version: str, env: Mapping[str, str] | None = None
) -> BackendConnectorRow | None:
    """The mapping row for ``--kv-offloading-backend backend`` at ``version`` under ``env``."""
    rows = [r for r in backend_connector_map() if r.backend == backend and r.contains(version)]
    return choose_backend_row(rows, env or {})


def choose_backend_row(
    rows: Iterable[BackendConnectorRow], env: Mapping[str, str]
) -> BackendConnectorRow | None:
    """Of the rows covering one backend and release, the one that applies under ``env``.

    A row with a ``when_env`` condition wins over unconditional rows when every variable
    it names is set to its value (compared case-insensitively).
    """
    for row in sorted(rows, key=lambda r: not r.when_env):
        if all(env.get(k, "").lower() == v.lower() for k, v in row.when_env.items()):
            return row
    return None


def semantic(key: str, version: str) -> SemanticFact | None:
    """The fact ``key`` as it holds at ``version`` (None when no row covers it)."""
    return next((r for r in semantic_facts() if r.key == key and r.contains(version)), None)
