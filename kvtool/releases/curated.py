"""Hand-curated tables in ``rules/curated/``: only what a wheel's source cannot say.

Every row carries ``source`` (a URL, ``owner/repo#number`` or a reference-document
section) so a reviewer can check it. Version ranges are half-open: ``introduced``
is the first affected release, ``fixed`` the first release that is not affected.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvtool.errors import KvtoolError
from kvtool.resources import rules_dir

try:  # libyaml's loader is several times faster; fall back to pure Python
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=3, description="URL, repo#number or reference § it comes from")


_RowT = TypeVar("_RowT", bound=_Row)


def _check_version(value: str | None) -> str | None:
    if value is not None:
        try:
            Version(value)
        except InvalidVersion as exc:
            raise ValueError(f"not a release version: {value!r}") from exc
    return value


class VersionRange(_Row):
    """Releases ``introduced <= v < fixed`` (either end open when None)."""

    introduced: str | None = None
    fixed: str | None = None

    _versions = field_validator("introduced", "fixed")(_check_version)

    def contains(self, version: str) -> bool:
        v = Version(version)
        if self.introduced is not None and v < Version(self.introduced):
            return False
        return not (self.fixed is not None and v >= Version(self.fixed))


class FlagReplacement(_Row):
    """What to use instead of a removed or deprecated flag, env var or connector."""

    name: str  # "--calculate-kv-scales", "VLLM_...", "P2pNcclConnector"
    replacement: str  # spelled as the user would write it, or a short instruction
    min_version: str | None = None  # the replacement needs at least this release

    _versions = field_validator("min_version")(_check_version)


class SecurityAdvisory(VersionRange):
    """A published vulnerability in vLLM itself, with the first fixed release."""

    id: str  # CVE or GHSA id
    summary: str
    severity: Literal["low", "moderate", "high", "critical"] | None = None


class KnownBug(VersionRange):
    """A bug that a serve configuration can trigger, and how to avoid it."""

    id: str  # repository#number
    title: str
    # Audit matching: every listed key must hold (flags spelled as vLLM spells them).
    when_flags: tuple[str, ...] = ()
    when_connectors: tuple[str, ...] = ()
    avoidance: str


class BundlingPin(VersionRange):
    """Which KV-connector package versions a vLLM release's own build pins."""

    package: str  # lmcache, nixl, mooncake-transfer-engine
    requirement: str  # PEP 440 specifier as pinned
    where: str  # e.g. "requirements/kv_connectors.txt (git repository, not the wheel)"


class BackendConnectorRow(VersionRange):
    """How ``--kv-offloading-backend`` turns into a KV connector over a release range."""

    backend: str  # "native" or "lmcache"
    connector: str
    size_passed_on: bool  # whether --kv-offloading-size reaches the connector
    size_scope: Literal["total", "per_rank", "ignored"]
    activation: str  # which flags trigger the conversion in this range
    notes: str = ""


class SemanticFact(VersionRange):
    """A behaviour read from code that is not a presence check (HMA decisions, ...)."""

    key: str  # stable identifier consumers look up, e.g. "hma.auto_disable_non_hma"
    statement: str
    value: str | None = None  # a machine-usable value where one exists


def _curated_path(name: str) -> Path:
    return rules_dir() / "curated" / name


@cache
def _rows(name: str) -> list[dict[str, Any]]:
    path = _curated_path(name)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    except FileNotFoundError as exc:
        raise KvtoolError(f"curated table {path} is missing from this installation") from exc
    except yaml.YAMLError as exc:
        raise KvtoolError(f"curated table {path} is not valid YAML: {exc}") from exc
    rows = (data or {}).get("rows", [])
    if not isinstance(rows, list):
        raise KvtoolError(f"curated table {path}: 'rows' must be a list")
    return rows


def _load(name: str, model: type[_RowT]) -> tuple[_RowT, ...]:
    out = []
    for i, row in enumerate(_rows(name)):
        try:
            out.append(model.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise KvtoolError(
                f"curated table {_curated_path(name)}: row {i + 1}: {where}: {first['msg']}"
            ) from exc
    return tuple(out)


@cache
def replacements() -> tuple[FlagReplacement, ...]:
    return _load("replacements.yaml", FlagReplacement)


def flag_replacements() -> dict[str, str]:
    """Name (flag, env var or connector) -> replacement text."""
    return {r.name: r.replacement for r in replacements()}


@cache
def security_floor() -> tuple[SecurityAdvisory, ...]:
    return _load("security.yaml", SecurityAdvisory)


@cache
def known_bugs() -> tuple[KnownBug, ...]:
    return _load("known_bugs.yaml", KnownBug)


@cache
def bundling_pins() -> tuple[BundlingPin, ...]:
    return _load("bundling.yaml", BundlingPin)


@cache
def backend_connector_map() -> tuple[BackendConnectorRow, ...]:
    return _load("backend_connector.yaml", BackendConnectorRow)


@cache
def semantic_facts() -> tuple[SemanticFact, ...]:
    return _load("semantics.yaml", SemanticFact)


def backend_connector(backend: str, version: str) -> BackendConnectorRow | None:
    """The mapping row for ``--kv-offloading-backend backend`` at ``version``."""
    return next(
        (r for r in backend_connector_map() if r.backend == backend and r.contains(version)),
        None,
    )


def semantic(key: str, version: str) -> SemanticFact | None:
    """The fact ``key`` as it holds at ``version`` (None when no row covers it)."""
    return next((r for r in semantic_facts() if r.key == key and r.contains(version)), None)
