"""What a rule sees: one normalised serve config plus everything known about its target release.

The context is built once per invocation by the engine and handed to every rule.
It holds only data (no I/O happens after construction); the derived views rules
share (the connector vLLM will actually load, TP x PP, the merged connector extra
config) are computed here once so no two rules disagree about them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kvtool.audit.model import EnvAssignment, Location, ServeConfig, ServeOption
from kvtool.releases.curated import KnownBug, SecurityAdvisory
from kvtool.releases.model import ConnectorFact, FlagFact, Gate, ReleaseFacts, ReleaseIndex

KV_TRANSFER_CONFIG = "--kv-transfer-config"
KV_OFFLOADING_SIZE = "--kv-offloading-size"
KV_OFFLOADING_BACKEND = "--kv-offloading-backend"


def vtuple(version: str) -> tuple[int, ...]:
    """``"0.32.0"`` -> ``(0, 32, 0)``; release tables only hold plain X.Y.Z versions.

    A local or pre-release suffix (``0.32.0+cu129``, ``0.33.0rc1``) is cut at the first
    non-digit of each part: gates compare releases, not builds.
    """
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits or 0))
    return tuple(parts)


class VersionRange(BaseModel):
    """Releases ``since <= v < until``; either end may be open (None)."""

    model_config = ConfigDict(frozen=True)

    since: str | None = None
    until: str | None = None

    def contains(self, version: str) -> bool:
        v = vtuple(version)
        if self.since is not None and v < vtuple(self.since):
            return False
        return not (self.until is not None and v >= vtuple(self.until))

    def describe(self) -> str:
        if self.since and self.until:
            return f"{self.since} up to (not including) {self.until}"
        if self.since:
            return f"{self.since} and later"
        if self.until:
            return f"releases before {self.until}"
        return "every release"


GateKind = Literal["flag", "env_var", "connector", "tier"]


class BackendMapping(BaseModel):
    """Which connector ``--kv-offloading-backend`` turns into, and what happens to the size."""

    model_config = ConfigDict(frozen=True)

    backend: str
    connector: str
    releases: VersionRange
    env: str | None = None  # env var that must be "1" for this row (VLLM_USE_SIMPLE_KV_OFFLOAD)
    size: Literal["total", "per-rank", "ignored"]
    source: str


class HmaDecision(BaseModel):
    """How vLLM decides the hybrid KV cache manager (HMA) when the flag is left unset.

    ``mode``: ``transfer-config-disables`` (any ``--kv-transfer-config`` turns HMA off;
    ``--kv-offloading-*`` is converted to a connector after the decision, so HMA stays on
    and the factory raises for connectors without HMA) or ``per-connector`` (HMA is
    turned off only for connectors that lack ``SupportsHMA``).
    """

    model_config = ConfigDict(frozen=True)

    releases: VersionRange
    mode: Literal["transfer-config-disables", "per-connector"]
    warning_names_connector: bool
    source: str


class ChoiceMigration(BaseModel):
    """A choice value a release stopped accepting, and what replaces it."""

    model_config = ConfigDict(frozen=True)

    flag: str
    value: str
    replacement: str
    source: str


class Semantics(BaseModel):
    """Curated facts read from code, not derivable from flag presence (each row cites its "
    "source)."""

    model_config = ConfigDict(frozen=True)

    backend_connectors: tuple[BackendMapping, ...]
    size_needs_backend: VersionRange
    size_overwrites_kv_transfer_config: VersionRange
    hma_decisions: tuple[HmaDecision, ...]
    p2p_requires_pythonhashseed: VersionRange
    retention_interval_block_multiple: VersionRange
    mamba_requires_hma: VersionRange
    offload_connectors: tuple[str, ...]
    choice_migrations: tuple[ChoiceMigration, ...] = ()
    security_floor: tuple[SecurityAdvisory, ...] = ()
    known_bugs: tuple[KnownBug, ...] = ()
    lmcache_connectors: tuple[str, ...] = ("LMCacheConnectorV1", "LMCacheMPConnector")
    lmcache_mp_keys: tuple[str, ...] = ()
    lazy_offload_policies: tuple[str, ...] = ()

    def hma_decision(self, version: str) -> HmaDecision | None:
        return next((d for d in self.hma_decisions if d.releases.contains(version)), None)


@dataclass(frozen=True)
class ModelFacts:
    """What the audit knows about the served model, when the model is known."""

    name: str
    hybrid: bool  # more than one KV cache group kind (sliding window, Mamba/SSM, linear attention)
    mamba: bool  # has Mamba/SSM state layers: vLLM refuses to start them without HMA (>= 0.23)
    architecture: str | None = None


@dataclass(frozen=True)
class EffectiveConnector:
    """The KV connector vLLM will instantiate for this config (None name: no connector)."""

    name: str
    via: Literal["kv-transfer-config", "kv-offloading-backend"]
    option: ServeOption | None
    children: tuple[str, ...] = ()  # MultiConnector's child connector names, in order
    size_handling: Literal["total", "per-rank", "ignored"] | None = None


@dataclass(frozen=True)
class RuleContext:
    config: ServeConfig
    facts: ReleaseFacts
    index: ReleaseIndex
    semantics: Semantics
    target_source: str = "flag"
    host_ram_gib: float | None = None
    model: ModelFacts | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.facts.version

    def gate(self, kind: GateKind, name: str) -> Gate | None:
        """When ``name`` existed across all release tables; None when no release had it."""
        table: dict[str, Gate] = getattr(self.index, kind + "s")
        return table.get(name)

    def at_least(self, version: str) -> bool:
        return vtuple(self.version) >= vtuple(version)

    # -- options -----------------------------------------------------------------
    @cached_property
    def _flag_facts(self) -> dict[str, FlagFact]:
        return {fact.name: fact for fact in self.facts.flags}

    def flag_fact(self, flag: str) -> FlagFact | None:
        """The release table's fact for a canonical flag name (``--no-X`` resolves to ``--X``)."""
        fact = self._flag_facts.get(flag)
        if fact is None and flag.startswith("--no-"):
            fact = self._flag_facts.get("--" + flag[len("--no-") :])
        return fact

    def option(self, flag: str) -> ServeOption | None:
        return self.config.option(flag)

    def int_option(self, flag: str, default: int) -> int:
        """The option's integer value, or ``default`` when absent or not an integer."""
        opt = self.option(flag)
        if opt is None:
            return default
        try:
            return int(str(opt.value))
        except ValueError:
            return default

    def float_option(self, flag: str) -> float | None:
        opt = self.option(flag)
        if opt is None or isinstance(opt.value, bool):
            return None
        try:
            return float(str(opt.value))
        except ValueError:
            return None

    def bool_option(self, flag: str) -> bool | None:
        """True/False when the flag (or its ``--no-`` form) is given, None when absent."""
        opt = self.option(flag)
        if opt is None:
            return None
        if isinstance(opt.value, bool):
            return opt.value
        return str(opt.value).lower() not in ("false", "0", "no", "off")

    def location_of(self, flag: str) -> Location | None:
        opt = self.option(flag)
        return opt.location if opt is not None else None

    @cached_property
    def tp(self) -> int:
        return max(1, self.int_option("--tensor-parallel-size", 1))

    @cached_property
    def pp(self) -> int:
        return max(1, self.int_option("--pipeline-parallel-size", 1))

    @property
    def world(self) -> int:
        return self.tp * self.pp

    @property
    def prefix_caching_off(self) -> bool:
        """True only when the config turns prefix caching off explicitly (it is on by default)."""
        return self.bool_option("--enable-prefix-caching") is False

    # -- env ---------------------------------------------------------------------
    def env(self, name: str) -> EnvAssignment | None:
        return self.config.env.get(name)

    def env_value(self, name: str) -> str | None:
        assignment = self.env(name)
        return assignment.value if assignment is not None else None

    # -- KV transfer config ------------------------------------------------------
    @cached_property
    def kv_transfer_config(self) -> dict[str, Any]:
        value = self.config.json_values.get(KV_TRANSFER_CONFIG)
        if value is None:
            opt = self.option(KV_TRANSFER_CONFIG)
            value = opt.value if opt is not None and isinstance(opt.value, dict) else {}
        return value

    @cached_property
    def extra_config(self) -> dict[str, Any]:
        extra = self.kv_transfer_config.get("kv_connector_extra_config")
        return extra if isinstance(extra, dict) else {}

    def connector_fact(self, name: str) -> ConnectorFact | None:
        return next((c for c in self.facts.connectors if c.name == name), None)

    @cached_property
    def offload_requested(self) -> bool:
        """``--kv-offloading-size`` or ``--kv-offloading-backend`` is given."""
        return (
            self.option(KV_OFFLOADING_SIZE) is not None
            or self.option(KV_OFFLOADING_BACKEND) is not None
        )

    @cached_property
    def backend_mapping(self) -> BackendMapping | None:
        """The row mapping the configured (or default) offload backend at this release."""
        if not self.offload_requested:
            return None
        backend_opt = self.option(KV_OFFLOADING_BACKEND)
        if backend_opt is None:
            if self.semantics.size_needs_backend.contains(self.version):
                return None  # the size alone does nothing here (default backend None)
            backend = "native"
        else:
            backend = str(backend_opt.value)
        rows = [
            row
            for row in self.semantics.backend_connectors
            if row.backend == backend and row.releases.contains(self.version)
        ]
        # A row gated on an env var (VLLM_USE_SIMPLE_KV_OFFLOAD=1) wins when that var is set.
        for row in rows:
            if row.env is not None and self.env_value(row.env) == "1":
                return row
        return next((row for row in rows if row.env is None), None)

    @cached_property
    def connector(self) -> EffectiveConnector | None:
        """The connector vLLM instantiates: the offload backend's (it overwrites
        ``--kv-transfer-config``) or else ``kv_connector`` from ``--kv-transfer-config``."""
        mapping = self.backend_mapping
        if mapping is not None:
            return EffectiveConnector(
                name=mapping.connector,
                via="kv-offloading-backend",
                option=self.option(KV_OFFLOADING_BACKEND) or self.option(KV_OFFLOADING_SIZE),
                size_handling=mapping.size,
            )
        name = self.kv_transfer_config.get("kv_connector")
        if not isinstance(name, str) or not name:
            return None
        return EffectiveConnector(
            name=name,
            via="kv-transfer-config",
            option=self.option(KV_TRANSFER_CONFIG),
            children=self._multi_children(),
        )

    def _multi_children(self) -> tuple[str, ...]:
        connectors = self.extra_config.get("connectors")
        if not isinstance(connectors, list):
            return ()
        return tuple(
            str(child["kv_connector"])
            for child in connectors
            if isinstance(child, dict) and isinstance(child.get("kv_connector"), str)
        )

    def supports_hma(self, name: str) -> bool | None:
        """SupportsHMA of ``name`` at this release; None when decided at import time or unknown."""
        fact = self.connector_fact(name)
        return fact.supports_hma if fact is not None else None

    def non_hma_connectors(self) -> list[str]:
        """Connectors of the effective config that lack SupportsHMA (MultiConnector: its "
        "children)."""
        conn = self.connector
        if conn is None:
            return []
        names = dict.fromkeys([conn.name, *conn.children])
        return [name for name in names if self.supports_hma(name) is False]
