"""What a rule sees: one normalised serve config plus everything known about its target release.

The context is built once per invocation by the engine and handed to every rule.
It holds only data (no I/O happens after construction); the derived views rules
share (the connector vLLM will actually load, TP x PP, the merged connector extra
config) are computed here once so no two rules disagree about them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import msgspec

from kvtool.audit.model import EnvAssignment, Location, ServeConfig, ServeOption
from kvtool.models import ModelIdentity
from kvtool.releases.curated import (
    BackendConnectorRow,
    SecurityAdvisory,
    SemanticFact,
    Span,
    choose_backend_row,
)
from kvtool.releases.model import (
    ConnectorFact,
    EnvVarFact,
    FlagFact,
    Gate,
    ReleaseFacts,
    ReleaseIndex,
)

if TYPE_CHECKING:
    from kvtool.audit.component_release import ComponentRelease

_T = TypeVar("_T")

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


GateKind = Literal["flag", "env_var", "connector", "tier"]


class ChoiceMigration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A choice value a release stopped accepting, and what replaces it."""

    flag: str
    value: str
    replacement: str
    source: str


HmaMode = Literal["transfer-config-forces-off", "transfer-config-disables", "per-connector"]
# ``hma.decision`` values of rules/curated/semantics.toml -> how the audit models them.
# Up to 0.12 the flag was a plain bool and any --kv-transfer-config overwrote it with True,
# whatever the user passed ("transfer-config-forces-off"); 0.13-0.21 made it tri-state, so
# only an unset flag is turned off ("transfer-config-disables"). In both, --kv-offloading-*
# became a connector only after the decision. Later releases decide per connector. Which
# releases are which is in the table rows, not here.
# The generated ``ReleaseFacts.hma.mode`` (read from VllmConfig in the wheel) -> the same.
_GENERATED_HMA_MODES: dict[str, HmaMode] = {
    "forces_off": "transfer-config-forces-off",
    "when_unset": "transfer-config-disables",
    "per_connector": "per-connector",
}
_HMA_MODES: dict[str, HmaMode] = {
    "forced_off_with_connector": "transfer-config-forces-off",
    "off_with_any_connector": "transfer-config-disables",
    "auto_off_for_non_hma_connector": "per-connector",
}


@dataclass(frozen=True)
class Semantics:
    """Curated facts read from code that flag presence cannot tell; every row cites its source.

    Release semantics (HMA decisions, backend -> connector, offload activation, security
    floor) are the release loader's curated tables (``rules/curated/``); the
    audit-only rows (LMCache MP keys, choice migrations, offload connector names) are
    ``rules/audit/semantics.toml``.
    """

    facts: tuple[SemanticFact, ...]
    backend_connectors: tuple[BackendConnectorRow, ...]
    retention_interval_block_multiple: Span
    offload_connectors: tuple[str, ...]
    # Offload connectors that find KV again through vLLM's prefix-cache block hashes, so
    # they hit nothing with prefix caching off (LMCache's connectors hash tokens themselves).
    prefix_cache_connectors: tuple[str, ...]
    lmcache_connectors: tuple[str, ...]
    lmcache_mp_keys: tuple[str, ...]
    lazy_offload_policies: tuple[str, ...]
    choice_migrations: tuple[ChoiceMigration, ...] = ()
    security_floor: tuple[SecurityAdvisory, ...] = ()

    # Per-version answers, memoised: rows compare parsed versions, which is the
    # hot spot when one process audits many files.
    _memo: dict[tuple[str, str, str], Any] = field(default_factory=dict, compare=False, repr=False)

    def _memoized(self, key: tuple[str, str, str], compute: Callable[[], _T]) -> _T:
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(_T, self._memo[key])

    def fact(self, key: str, version: str) -> SemanticFact | None:
        """The row of ``key`` covering ``version`` (None: the behaviour does not hold there)."""
        return self._memoized(
            ("fact", key, version),
            lambda: next((f for f in self.facts if f.key == key and f.contains(version)), None),
        )

    def choice_migration(self, flag: str, value: str) -> ChoiceMigration | None:
        """What replaces ``value`` of ``flag`` where a release stopped accepting it."""
        return next(
            (m for m in self.choice_migrations if m.flag == flag and m.value == value), None
        )

    def backend_rows(self, backend: str, version: str) -> tuple[BackendConnectorRow, ...]:
        """Backend -> connector rows for ``backend`` that cover ``version``."""
        return self._memoized(
            ("backend", backend, version),
            lambda: tuple(
                row
                for row in self.backend_connectors
                if row.backend == backend and row.contains(version)
            ),
        )

    def advisories_at(self, version: str) -> tuple[SecurityAdvisory, ...]:
        """Security advisories whose affected range covers ``version``."""
        return self._memoized(
            ("security", "", version),
            lambda: tuple(r for r in self.security_floor if r.contains(version)),
        )

    def holds(self, key: str, version: str) -> bool:
        return self.fact(key, version) is not None

    def hma_mode(self, version: str) -> HmaMode | None:
        """The curated decision mode (used where a release table has no ``hma`` fact)."""
        row = self.fact("hma.decision", version)
        return _HMA_MODES.get(row.value or "") if row is not None else None

    def hma_warning_names_connector(self, version: str) -> bool:
        row = self.fact("hma.warning_names_connector", version)
        return row is not None and row.value == "true"


class ModelFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the audit knows about the served model, when the model is known."""

    name: str
    hybrid: bool  # more than one KV cache group kind (sliding window, chunked, state layers)
    mamba: bool  # has Mamba/SSM/Gated DeltaNet/linear-attention state layers next to attention
    sliding_window: bool = False
    chunked_local: bool = False
    traits: frozenset[str] = frozenset()  # kvtool.models.TRAITS
    source: str | None = None  # the config.json or family row the facts were read from

    @classmethod
    def from_identity(cls, identity: ModelIdentity) -> ModelFacts:
        return cls(
            name=identity.name,
            hybrid=identity.hybrid,
            mamba=identity.has_state,
            sliding_window=identity.sliding_window,
            chunked_local=identity.chunked_local,
            traits=identity.traits,
            source=identity.source,
        )


class EffectiveConnector(msgspec.Struct, frozen=True):
    """The KV connector vLLM will instantiate for this config (None name: no connector)."""

    name: str
    via: Literal["kv-transfer-config", "kv-offloading-backend"]
    option: ServeOption | None
    children: tuple[str, ...] = ()  # MultiConnector's child connector names, in order

    @property
    def names(self) -> tuple[str, ...]:
        """This connector and MultiConnector's children, in order, each name once."""
        return tuple(dict.fromkeys((self.name, *self.children)))


_Named = TypeVar("_Named", FlagFact, ConnectorFact, EnvVarFact)
# Rows of a release table by name, built once per table (every engine of an audit that
# checks against one release shares it): id of the rows -> (the rows, kept alive, map).
_BY_NAME: dict[int, tuple[tuple[Any, ...], Mapping[str, Any]]] = {}


def _by_name(rows: tuple[_Named, ...]) -> Mapping[str, _Named]:
    known = _BY_NAME.get(id(rows))
    if known is not None and known[0] is rows:
        return cast(Mapping[str, _Named], known[1])
    table = MappingProxyType({row.name: row for row in rows})
    _BY_NAME[id(rows)] = (rows, table)
    return table


@dataclass(frozen=True)
class RuleContext:
    config: ServeConfig
    facts: ReleaseFacts
    index: ReleaseIndex
    semantics: Semantics
    host_ram_gib: float | None = None
    # The LMCache release next to vLLM, when the settings or the input say
    # (kvtool.audit.lmcache_release), and where it was read ("image tag ...").
    lmcache_version: str | None = None
    lmcache_origin: str | None = None
    # The releases of the stack's other components the input shows, by component
    # (kvtool.audit.component_release); a component missing here is not known.
    component_releases: Mapping[str, ComponentRelease] = field(default_factory=dict)
    known_model: ModelFacts | None = None
    # Looks the served model up (sizing catalog, local config.json) only when a rule asks:
    # most configs never need it, and reading the catalog is the slowest part of a run.
    model_lookup: Callable[[str], ModelFacts | None] | None = None
    # Facts from outside the config that optional rules read, e.g. inspect-image verdicts.
    extras: Mapping[str, Any] = field(default_factory=dict)
    # The other engines of the same input file (a prefill/decode pair in one manifest),
    # for rules about engines that must agree; empty for a lone command.
    siblings: tuple[RuleContext, ...] = ()

    @cached_property
    def model(self) -> ModelFacts | None:
        """Facts about the served model, when known."""
        if self.known_model is not None:
            return self.known_model
        if self.model_lookup is None or not self.config.model:
            return None
        return self.model_lookup(self.config.model)

    @property
    def version(self) -> str:
        return self.facts.version

    @property
    def hma_mode(self) -> HmaMode | None:
        """How this release decides HMA for a --kv-transfer-config: the release table's
        fact read from the wheel, else the curated row."""
        if self.facts.hma is not None:
            return _GENERATED_HMA_MODES[self.facts.hma.mode]
        return self.semantics.hma_mode(self.version)

    @property
    def hma_warning_names_connector(self) -> bool:
        if self.facts.hma is not None:
            return self.facts.hma.warning_names_connector
        return self.semantics.hma_warning_names_connector(self.version)

    def gate(self, kind: GateKind, name: str) -> Gate | None:
        """When ``name`` existed across all release tables; None when no release had it."""
        table: dict[str, Gate] = getattr(self.index, kind + "s")
        return table.get(name)

    def at_least(self, version: str) -> bool:
        return vtuple(self.version) >= vtuple(version)

    # -- options -----------------------------------------------------------------
    @cached_property
    def _flag_facts(self) -> Mapping[str, FlagFact]:
        return _by_name(self.facts.flags)

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
            number = float(str(opt.value))
        except ValueError:
            return None
        return number if math.isfinite(number) else None  # "inf" or "nan" sizes nothing

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

    @cached_property
    def _connector_facts(self) -> Mapping[str, ConnectorFact]:
        return _by_name(self.facts.connectors)

    def connector_fact(self, name: str) -> ConnectorFact | None:
        return self._connector_facts.get(name)

    @cached_property
    def env_var_facts(self) -> Mapping[str, EnvVarFact]:
        """The env vars the target release reads, by name."""
        return _by_name(self.facts.env_vars)

    @cached_property
    def offload_requested(self) -> bool:
        """``--kv-offloading-size`` or ``--kv-offloading-backend`` is given."""
        return (
            self.option(KV_OFFLOADING_SIZE) is not None
            or self.option(KV_OFFLOADING_BACKEND) is not None
        )

    @cached_property
    def backend_mapping(self) -> BackendConnectorRow | None:
        """The curated row turning the configured (or default) offload backend into a connector.

        None when no offload flag is set, or when the set flag does not trigger the
        conversion at this release (on 0.11.1-0.13.x only the backend does).
        """
        if not self.offload_requested:
            return None
        backend_opt = self.option(KV_OFFLOADING_BACKEND)
        backend = str(backend_opt.value) if backend_opt is not None else "native"
        # A row gated on env vars (VLLM_USE_SIMPLE_KV_OFFLOAD=1) wins when they are all set.
        env = {name: a.value for name, a in self.config.env.items() if a.value is not None}
        row = choose_backend_row(self.semantics.backend_rows(backend, self.version), env)
        if row is None:
            return None
        triggered = backend_opt if row.activation == "backend" else self.option(KV_OFFLOADING_SIZE)
        return row if triggered is not None else None

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
        """MultiConnector's ``connectors``; only MultiConnector (or a class loaded by module
        path, which may subclass it) reads that key."""
        connectors = self.extra_config.get("connectors")
        name = self.kv_transfer_config.get("kv_connector")
        if not isinstance(connectors, list) or not (
            name == "MultiConnector" or _module_path(self.kv_transfer_config)
        ):
            return ()
        return tuple(
            str(child["kv_connector"])
            for child in connectors
            if isinstance(child, dict) and isinstance(child.get("kv_connector"), str)
        )

    @cached_property
    def connector_extra_configs(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """``(connector name, the kv_connector_extra_config it reads)`` for the connector
        from ``--kv-transfer-config`` and, for MultiConnector, each child's own extra config
        (children never see the parent's keys)."""
        conn = self.connector
        if conn is None or conn.via != "kv-transfer-config":
            return ()
        pairs: list[tuple[str, dict[str, Any]]] = [(conn.name, self.extra_config)]
        connectors = self.extra_config.get("connectors") if conn.children else None
        for child in connectors if isinstance(connectors, list) else ():
            if isinstance(child, dict) and isinstance(child.get("kv_connector"), str):
                extra = child.get("kv_connector_extra_config")
                pairs.append((child["kv_connector"], extra if isinstance(extra, dict) else {}))
        return tuple(pairs)

    def supports_hma(self, name: str) -> bool | None:
        """SupportsHMA of ``name`` at this release; None when decided at import time or unknown."""
        fact = self.connector_fact(name)
        return fact.supports_hma if fact is not None else None

    @property
    def connector_location(self) -> Location | None:
        """Where the option that chose the effective connector was written, when known."""
        conn = self.connector
        return conn.option.location if conn is not None and conn.option is not None else None

    @cached_property
    def connector_names(self) -> tuple[str, ...]:
        """Every connector vLLM instantiates (MultiConnector: itself and its children), each
        once, in order; empty when there is no connector."""
        return self.connector.names if self.connector is not None else ()

    @cached_property
    def external_connectors(self) -> tuple[str, ...]:
        """Connectors of ``--kv-transfer-config`` that vLLM loads from their own
        ``kv_connector_module_path`` (the connector itself, MultiConnector children), in order.

        Their classes are not the release's registered ones (the module path wins over the
        registry), so the release tables cannot say what they support.
        """
        conn = self.connector
        if conn is None or conn.via != "kv-transfer-config":
            return ()
        found: list[str] = []
        if _module_path(self.kv_transfer_config):
            found.append(conn.name)
        connectors = self.extra_config.get("connectors")
        for child in connectors if isinstance(connectors, list) else ():
            if isinstance(child, dict) and _module_path(child):
                found.append(str(child.get("kv_connector")))
        return tuple(dict.fromkeys(found))

    def non_hma_connectors(self) -> list[str]:
        """Registered connectors of the effective config that lack SupportsHMA
        (MultiConnector: its children too); classes loaded by module path are not judged."""
        external = set(self.external_connectors)
        return [
            name
            for name in self.connector_names
            if name not in external and self.supports_hma(name) is False
        ]


def _module_path(connector_config: Mapping[str, Any]) -> bool:
    """True when a (child) transfer config loads its class from ``kv_connector_module_path``."""
    path = connector_config.get("kv_connector_module_path")
    return isinstance(path, str) and bool(path)
