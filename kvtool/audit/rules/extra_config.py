"""LZ009-LZ012: ``kv_connector_extra_config`` keys checked against the connector that reads them.

``kvtool.*`` keys are validated by the very schema KvtoolConnector applies at start-up
(:mod:`kvtool.connector.config`), so the audit refuses what the engine would refuse, with
the same message; so is the vLLM release the adapter loads on (LZ012). Keys that belong
to another connector are ignored where they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import LMCACHE_MP_CONNECTOR, Reference, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import did_you_mean
from kvtool.connector.series import adapter_supports, supported_text
from kvtool.project import repository_file_url

KVTOOL_CONNECTOR = "KvtoolConnector"
KVTOOL_PREFIX = "kvtool."
# Key prefix -> the connectors that read keys with it (LMCache's in-process connector reads
# `lmcache.*` overrides; the MP connector reads `lmcache.mp.*`, LZ001/LZ008 check those).
OWNERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (KVTOOL_PREFIX, (KVTOOL_CONNECTOR,)),
    ("lmcache.mp.", ("LMCacheMPConnector",)),
    ("lmcache.", ("LMCacheConnectorV1", "LMCacheMPConnector")),
)
# Bare lazy-offload keys. SimpleCPUOffloadConnector reads `lazy_offload` itself
# (vllm/distributed/kv_transfer/kv_connector/v1/simple_cpu_offload_connector.py at 0.32.0);
# OffloadingConnector reads exactly its release table's `offload_extra_config_keys`, which
# hold no `lazy_offload` in any tabled release; LMCache spells it lmcache.mp.*, kvtool kvtool.*.
BARE_LAZY = "lazy_offload"
SIMPLE_CPU_OFFLOAD = "SimpleCPUOffloadConnector"
NATIVE = "OffloadingConnector"


def _owners(key: str) -> tuple[str, ...] | None:
    return next((owners for prefix, owners in OWNERS if key.startswith(prefix)), None)


@register
class KvtoolConnectorConfigRefused(ConfigRule):
    """Reports a `kvtool.*` key or value that KvtoolConnector refuses at start-up.

    What
    ----
    `kv_connector_extra_config` of a `KvtoolConnector` (alone or as a MultiConnector child)
    has a `kvtool.*` key the connector does not know, or a value out of its range.

    Why
    ---
    The connector validates its settings when vLLM constructs it and raises
    `ConnectorConfigError` (a `ValueError`): the engine does not start. The audit runs the
    same schema (`kvtool/connector/config.py`), so the message and suggestion are the same.

    Example
    -------
    `"kvtool.cpu_bytes": "8GiB"` (the key is `kvtool.host_capacity_bytes`).

    Fix
    ---
    Use the key or value the message suggests.

    Releases
    --------
    Every release KvtoolConnector supports.
    """

    code = "LZ009"
    name = "kvtool-connector-config-refused"
    default_severity = Severity.error
    summary = "a kvtool.* extra-config key or value KvtoolConnector refuses at start-up"
    references = (
        Reference(
            repository_file_url("kvtool/connector/config.py"),
            "KvtoolConnector's config schema, the one the engine validates at start-up",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for name, extra in ctx.connector_extra_configs:
            if name != KVTOOL_CONNECTOR or not any(k.startswith(KVTOOL_PREFIX) for k in extra):
                continue
            from kvtool.connector.config import ConnectorConfig, ConnectorConfigError

            try:
                ConnectorConfig.from_extra_config(extra)
            except ConnectorConfigError as exc:
                key = next((k for k in extra if f"{k!r}" in str(exc) or f"{k}=" in str(exc)), None)
                yield self.finding(
                    f"KvtoolConnector refuses to start: {exc}",
                    flag=key or KV_TRANSFER_CONFIG,
                    location=ctx.location_of(KV_TRANSFER_CONFIG),
                )


@register
class KvtoolConnectorUnsupportedRelease(ConfigRule):
    """Reports a KvtoolConnector on a vLLM release kvtool's adapter refuses to load on.

    What
    ----
    A `KvtoolConnector` (alone or as a MultiConnector child) is configured for a target
    release outside the series `kvtool.connector.vllm` is written for
    (`kvtool/connector/series.py`, `SUPPORTED_SERIES`).

    Why
    ---
    The adapter checks `vllm.__version__` when vLLM imports it and raises
    `UnsupportedVllmError` on any other release: the hooks and block-pool internals it
    uses move between series, so the engine does not start.

    Example
    -------
    `{"kv_connector": "KvtoolConnector", "kv_connector_module_path":
    "kvtool.connector.vllm", "kv_role": "kv_both"}` on 0.20.0, outside the series the adapter
    is written for.

    Fix
    ---
    Run a release of a supported series (the message names the newest tabled one), or
    use a connector vLLM ships.

    Releases
    --------
    Every release outside the adapter's supported series.
    """

    code = "LZ012"
    name = "kvtool-connector-unsupported-release"
    default_severity = Severity.error
    summary = "a KvtoolConnector on a vLLM release kvtool's adapter refuses to load on"
    references = (
        Reference(
            repository_file_url("kvtool/connector/series.py"),
            "the vLLM series kvtool's adapter loads on (SUPPORTED_SERIES)",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if adapter_supports(ctx.version):
            return
        if not any(name == KVTOOL_CONNECTOR for name, _ in ctx.connector_extra_configs):
            return
        from kvtool.releases import available_versions

        tabled = [v for v in available_versions() if adapter_supports(v)]
        newest = f" (newest tabled: {tabled[-1]})" if tabled else ""
        yield self.finding(
            f"kvtool.connector.vllm supports vLLM {supported_text()}{newest}; on vLLM "
            f"{ctx.version} importing it raises UnsupportedVllmError and the engine does "
            "not start.",
            flag=KV_TRANSFER_CONFIG,
            location=ctx.location_of(KV_TRANSFER_CONFIG),
        )


@register
class ExtraConfigKeyOfAnotherConnector(ConfigRule):
    """Reports an extra-config key that the connector it is given to never reads.

    What
    ----
    A `kv_connector_extra_config` key belongs to another connector: `kvtool.*` outside
    KvtoolConnector, `lmcache.*` outside LMCache's connectors, or a bare `lazy_offload*`
    key given to a connector that does not read it. `lazy_offload` is read by
    SimpleCPUOffloadConnector; OffloadingConnector reads the keys its release table lists
    (`offload_extra_config_keys`, none of them `lazy_offload` up to the newest tabled
    release); LMCache spells it `lmcache.mp.lazy_offload`, kvtool `kvtool.policy`. For
    MultiConnector each child's own extra config is checked.

    Why
    ---
    vLLM passes the dictionary through unchecked, so the setting silently does nothing:
    `"lazy_offload": true` in an OffloadingConnector keeps offloading eagerly. A config
    that targets a vLLM build newer than the tables (an image built from a commit) is
    judged by the release given with `--vllm-version`.

    Example
    -------
    `{"kv_connector": "OffloadingConnector", "kv_connector_extra_config":
    {"cpu_bytes_to_use": 1e10, "lazy_offload": true}}`.

    Fix
    ---
    Move the key to the connector that reads it, or remove it.

    Releases
    --------
    Every release (`lmcache.mp.*` keys at the top level are LZ008's).
    """

    code = "LZ010"
    name = "extra-config-key-of-another-connector"
    default_severity = Severity.warning
    summary = "an extra-config key the connector it is given to never reads"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/v1/kv_offload/factory.py",
            "the offload spec factory at 0.32.0: the extra-config keys OffloadingConnector reads",
        ),
        vllm_source(
            "0.32.0",
            "vllm/distributed/kv_transfer/kv_connector/v1/simple_cpu_offload_connector.py",
            "SimpleCPUOffloadConnector at 0.32.0: reads lazy_offload from its extra config",
        ),
        LMCACHE_MP_CONNECTOR,
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        for index, (name, extra) in enumerate(ctx.connector_extra_configs):
            for key in extra:
                message = self._ignored(ctx, name, extra, key, top_level=index == 0)
                if message is not None:
                    yield self.finding(
                        message, flag=key, location=ctx.location_of(KV_TRANSFER_CONFIG)
                    )

    @staticmethod
    def _ignored(
        ctx: RuleContext, connector: str, extra: dict[str, object], key: str, *, top_level: bool
    ) -> str | None:
        if key == BARE_LAZY or key.startswith(BARE_LAZY + "_"):
            return _bare_lazy_ignored(ctx, connector, extra, key)
        owners: tuple[str, ...] | None = _owners(key)
        if owners is None or connector in owners:
            return None
        if top_level and key.startswith("lmcache.mp."):
            return None  # LZ008 reports lmcache.mp.* keys given to the wrong connector
        return (
            f"`{key}` is read by {' or '.join(owners)}, not by `{connector}`: "
            "this setting does nothing."
        )


def _bare_lazy_ignored(
    ctx: RuleContext, connector: str, extra: dict[str, object], key: str
) -> str | None:
    """Why a bare ``lazy_offload*`` key does nothing in ``connector``, or None when it may be
    read (SimpleCPUOffloadConnector's own key; an OffloadingConnector key its release reads
    or a custom spec may read; a connector loaded by module path)."""
    if connector == SIMPLE_CPU_OFFLOAD and key == BARE_LAZY:
        return None
    if connector in ctx.external_connectors:
        return None  # its own class, from kv_connector_module_path: it may read anything
    where = "`lmcache.mp.lazy_offload` (LMCacheMPConnector), `kvtool.policy` (KvtoolConnector)"
    if key == BARE_LAZY:
        where = f"`{BARE_LAZY}` (SimpleCPUOffloadConnector), " + where
    if connector == NATIVE:
        read = ctx.facts.offload_extra_config_keys
        if not read or key in read or "spec_module_path" in extra:
            return None  # no fact to judge by, the release reads it, or a custom spec may
        return (
            f"OffloadingConnector in vLLM {ctx.version} does not read `{key}` (its "
            f"offload spec reads {', '.join(f'`{k}`' for k in read)}): offloading stays "
            f"eager. Lazy offload is {where}."
        )
    return (
        f"`{connector}` does not read `{key}`: lazy offload is {where}; this setting does nothing."
    )


@register
class UnknownOffloadingConnectorKey(ConfigRule):
    """Reports an OffloadingConnector extra-config key that the target release never reads.

    What
    ----
    A key of an `OffloadingConnector`'s `kv_connector_extra_config` is none of the keys
    vLLM's offloading connector and its specs read at the target release (the release
    table's `offload_extra_config_keys`, read from `vllm/v1/kv_offload/**` in the wheel).
    Keys of other connectors are LZ010's; a custom `spec_module_path` may read its own keys,
    so such configs are not checked.

    Why
    ---
    vLLM passes the dictionary through unchecked: a misspelt `cpu_bytes_to_use` leaves the
    tier unsized, and a key that only a later release reads (`offload_prompt_only`) does
    nothing on this one.

    Example
    -------
    `{"kv_connector": "OffloadingConnector", "kv_connector_extra_config":
    {"cpu_byte_to_use": 10000000000}}` on 0.32.0.

    Fix
    ---
    Use the suggested key, or upgrade to a release that reads it.

    Releases
    --------
    Per release from the release tables (`offload_extra_config_keys`).
    """

    code = "LZ011"
    name = "unknown-offloading-connector-key"
    default_severity = Severity.warning
    summary = "an OffloadingConnector extra-config key the target release never reads"
    fix_applicability = "display"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/v1/kv_offload/factory.py",
            "the offload spec factory at 0.32.0: the extra-config keys OffloadingConnector reads",
        ),
        vllm_source(
            "0.32.0",
            "vllm/v1/kv_offload/cpu/spec.py",
            "the CPU offload spec at 0.32.0: its extra-config keys",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        read = ctx.facts.offload_extra_config_keys
        if not read:
            return  # a table without the fact (or a release without native offload)
        for name, extra in ctx.connector_extra_configs:
            if name != NATIVE or "spec_module_path" in extra:
                continue
            for key in extra:
                if key in read or _owners(key) is not None or key.startswith(BARE_LAZY):
                    continue
                yield self.finding(
                    f"OffloadingConnector in vLLM {ctx.version} does not read `{key}`; "
                    "it is ignored." + did_you_mean(key, read),
                    flag=key,
                    location=ctx.location_of(KV_TRANSFER_CONFIG),
                )
