"""CN: connectors, the hybrid KV cache manager (HMA) and offload semantics.

Which connector vLLM loads and how it decides HMA come from the context (release
table + curated semantic rows); the rules only compare them with the config.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from kvtool.audit.context import (
    KV_OFFLOADING_BACKEND,
    KV_OFFLOADING_SIZE,
    KV_TRANSFER_CONFIG,
    RuleContext,
)
from kvtool.audit.model import Finding, Fix, Severity
from kvtool.audit.references import (
    CACHE_CONFIG_032,
    CONNECTOR_FACTORY_032,
    HMA_DEFAULT_PR,
    LMCACHE_MP_BACKEND_PR,
    OFFLOADING_SCHEDULER_032,
    VLLM_CONFIG_032,
    lmcache_issue,
    vllm_issue,
    vllm_pr,
    vllm_source,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, removal_fix, replacement_fix

DISABLE_HMA = "--disable-hybrid-kv-cache-manager"
HMA_FACTORY_ERROR = (
    "ValueError: Connector {name} does not support HMA but HMA is enabled. "
    "Please set `--disable-hybrid-kv-cache-manager`."
)


class HmaOutcome(msgspec.Struct, frozen=True):
    """Whether HMA ends up on, and why, for the effective connector at the target release."""

    on: bool
    # "flag", "forced-on", "transfer-config", "non-hma-connector", "no-connector",
    # "supported", or "unresolved-class": the decision rests on a class loaded by
    # kv_connector_module_path, which the audit cannot see (``on`` is then a guess: True,
    # so no rule reports HMA off).
    reason: str
    non_hma: tuple[str, ...]
    unresolved: tuple[str, ...] = ()  # the external classes the decision rests on

    @property
    def decided(self) -> bool:
        return self.reason != "unresolved-class"


MULTI_CONNECTOR = "MultiConnector"


def _unresolved(ctx: RuleContext, non_hma: tuple[str, ...]) -> tuple[str, ...]:
    """External classes vLLM's per-connector HMA check would ask about, when their answer
    decides it (vllm v0.32.0 KVConnectorFactory.supports_hma_config: a connector named
    ``MultiConnector`` is judged by its children, all of which must support HMA; any other
    name by its own class)."""
    external = ctx.external_connectors
    conn = ctx.connector
    if not external or conn is None:
        return ()
    if conn.name != MULTI_CONNECTOR:
        return (conn.name,) if conn.name in external else ()
    # A registered child without SupportsHMA already turns HMA off, whatever the others say.
    return () if non_hma else external


def hma_outcome(ctx: RuleContext, *, ignore_flag: bool = False) -> HmaOutcome:
    """Imitate vLLM's HMA decision on a GPU platform (CPU platforms always turn HMA off).

    ``ignore_flag``: the decision vLLM would take without ``--disable-hybrid-kv-cache-manager``.
    The release's decision mode (``hma`` in the release table, read from VllmConfig) says
    whether a ``--kv-transfer-config`` overrides the flag (up to 0.12), turns HMA off only
    when the flag is unset (0.13-0.21), or SupportsHMA decides (0.22 on).
    """
    non_hma = tuple(ctx.non_hma_connectors())
    flag = None if ignore_flag else ctx.bool_option(DISABLE_HMA)
    conn = ctx.connector
    mode = ctx.hma_mode
    from_transfer_config = conn is not None and conn.via == "kv-transfer-config"
    if mode == "transfer-config-forces-off" and from_transfer_config:
        # The plain-bool flag is overwritten with True whatever the user passed.
        return HmaOutcome(False, "transfer-config", non_hma)
    if flag is True:
        return HmaOutcome(False, "flag", non_hma)
    unresolved = _unresolved(ctx, non_hma)
    if flag is False:
        if unresolved:  # whether the factory refuses the class is the class's business
            return HmaOutcome(True, "unresolved-class", non_hma, unresolved)
        return HmaOutcome(True, "forced-on", non_hma)
    if conn is None:
        return HmaOutcome(True, "no-connector", non_hma)
    if mode in ("transfer-config-forces-off", "transfer-config-disables"):
        converted_first = ctx.facts.hma is not None and ctx.facts.hma.offload_converted_first
        if from_transfer_config or converted_first:
            return HmaOutcome(False, "transfer-config", non_hma)
        # --kv-offloading-* became a connector after the HMA decision: HMA stayed on.
        return HmaOutcome(True, "forced-on", non_hma)
    if unresolved:
        return HmaOutcome(True, "unresolved-class", non_hma, unresolved)
    if non_hma:
        return HmaOutcome(False, "non-hma-connector", non_hma)
    return HmaOutcome(True, "supported", non_hma)


@register
class RedundantDisableHybridKvCacheManager(ConfigRule):
    """Reports `--disable-hybrid-kv-cache-manager` where the connector supports HMA.

    What
    ----
    The flag is passed although the connector vLLM loads (every child, for MultiConnector)
    subclasses `SupportsHMA` at the target release, so vLLM would keep HMA on by itself.

    Why
    ---
    Passing the flag by reflex costs hybrid-model support and sliding-window memory savings
    for nothing. vLLM decides HMA per connector from 0.22.0 (the field guide says 0.23.0;
    the wheels show 0.22.0), and `OffloadingConnector` supports HMA from 0.21.0.

    Example
    -------
    `vllm serve m --kv-offloading-size 400 --disable-hybrid-kv-cache-manager` on 0.32.0.

    Fix
    ---
    Delete the flag (safe fix).

    Releases
    --------
    SupportsHMA per connector and the HMA decision mode (`hma`, read from
    `VllmConfig.__post_init__`) from the release tables.
    """

    code = "CN010"
    name = "redundant-disable-hybrid-kv-cache-manager"
    default_severity = Severity.warning
    summary = "--disable-hybrid-kv-cache-manager with a connector that supports HMA"
    fix_applicability = "safe"
    references = (
        HMA_DEFAULT_PR,
        vllm_source(
            "0.22.0", "vllm/config/vllm.py",
            "VllmConfig at 0.22.0: HMA turned off only for connectors lacking SupportsHMA",
        ),
        CONNECTOR_FACTORY_032,
    )
    since = "0.1.0"
    other_severities = (Severity.info,)
    other_fix_applicabilities = ("unsafe",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option(DISABLE_HMA)
        conn = ctx.connector
        if opt is None or opt.value is not True or conn is None or ctx.non_hma_connectors():
            return
        names = conn.names
        if any(ctx.connector_fact(name) is None for name in names):
            return  # a connector unknown at this release: unknown-connector reports it
        support = [ctx.supports_hma(name) for name in names]
        without = hma_outcome(ctx, ignore_flag=True)
        if not without.on:
            return  # HMA would be off anyway (e.g. any --kv-transfer-config before 0.22.0)
        dynamic = [name for name, value in zip(names, support, strict=True) if value is None]
        if dynamic:
            fact = ctx.connector_fact(dynamic[0])
            note = f" ({fact.hma_note})" if fact is not None and fact.hma_note else ""
            minimum = ctx.semantics.fact("lmcache_mp.external_hma_min_lmcache", ctx.version)
            which = f"lmcache >= {minimum.value}" if minimum and minimum.value else "HMA support"
            message = (
                f"`{dynamic[0]}` decides HMA support at import time in vLLM {ctx.version}{note}: "
                f"with an LMCache that supports HMA ({which}), `{DISABLE_HMA}` only turns off "
                "hybrid and sliding-window KV savings."
            )
            severity = Severity.info
        else:
            message = (
                f"`{conn.name}` supports HMA in vLLM {ctx.version}, which keeps HMA on by itself; "
                f"`{DISABLE_HMA}` only turns off hybrid and sliding-window KV savings."
            )
            severity = self.default_severity
        yield self.finding(
            message + conditional_note(opt),
            flag=DISABLE_HMA,
            location=opt.location,
            fix=removal_fix(ctx, opt, f"remove {DISABLE_HMA}", safe=not dynamic),
            severity=severity,
            connector=conn.name,
        )


UNIFY_ERROR = (
    "ValueError: Hybrid KV cache manager is disabled but failed to convert the KV cache "
    "specs to one unified type."
)
_HMA_OFF_BECAUSE = {
    "flag": f"`{DISABLE_HMA}` turns HMA off",
    "transfer-config": "vLLM {version} turns HMA off for any `--kv-transfer-config`",
    "non-hma-connector": "vLLM {version} turns HMA off because `{names}` lacks SupportsHMA",
}


@register
class HybridModelWithHmaOff(ConfigRule):
    """Reports a hybrid model served with the hybrid KV cache manager (HMA) off.

    What
    ----
    HMA ends up off (the flag, any `--kv-transfer-config` on releases before 0.22, or a
    connector or MultiConnector child without `SupportsHMA` from 0.22 on) and the model has
    more than one KV cache group kind.

    Why
    ---
    Without HMA vLLM must unify every layer's KV cache spec into one. Sliding-window layers
    become full-attention layers: the model runs but keeps KV outside the window, so it fits
    fewer tokens (warning). Mamba, Gated DeltaNet and linear-attention state layers cannot
    be unified with attention layers: the engine stops at start-up with
    `ValueError: Hybrid KV cache manager is disabled but failed to convert the KV cache
    specs to one unified type.` (error, every release; Qwen3.5/3.6, Qwen3-Next, Jamba,
    Nemotron-H, Granite 4.0-H).

    Example
    -------
    `Qwen/Qwen3.5-9B` with `{"kv_connector": "LMCacheConnectorV1"}` (error), or
    `google/gemma-3-12b-it` with `--disable-hybrid-kv-cache-manager` (warning).

    Fix
    ---
    Keep HMA on: a connector with SupportsHMA (native offload from 0.21.0,
    `LMCacheMPConnector` with lmcache >= 0.4.7), no `--disable-hybrid-kv-cache-manager`,
    and on 0.13-0.21 `--no-disable-hybrid-kv-cache-manager` with an HMA connector.

    Releases
    --------
    The HMA decision (`hma`, read from `VllmConfig.__post_init__`) and SupportsHMA per
    connector from the release tables; the model from a config.json or
    `rules/models/families.toml`. Not checked when the model is unknown.
    """

    code = "CN011"
    name = "hybrid-model-with-hma-off"
    default_severity = Severity.error
    summary = "hybrid model with HMA off: state models fail to start, windowed ones lose KV room"
    references = (
        vllm_source(
            "0.32.0", "vllm/v1/core/kv_cache_utils.py",
            "unify_hybrid_kv_cache_specs at 0.32.0: state layers without HMA raise ValueError",
        ),
        vllm_source(
            "0.12.0", "vllm/config/vllm.py",
            "VllmConfig at 0.12.0: any --kv-transfer-config turns HMA off",
        ),
        vllm_pr(36636, "HMA with KV connectors"),
        lmcache_issue(3106, "LMCacheConnectorV1 cannot serve hybrid-attention models"),
    )
    since = "0.1.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.connector is None and ctx.bool_option(DISABLE_HMA) is not True:
            return  # HMA is on (or only a non-GPU platform could turn it off)
        outcome = hma_outcome(ctx)
        if outcome.on:
            return
        model = ctx.model  # looked up only now: most configs never need it
        if model is None or not model.hybrid:
            return
        because = _HMA_OFF_BECAUSE[outcome.reason].format(
            version=ctx.version, names=", ".join(outcome.non_hma)
        )
        if model.mamba:
            consequence = (
                "its state layers cannot share one KV cache spec with its attention layers, "
                f"so startup fails with `{UNIFY_ERROR}`"
            )
            severity = Severity.error
        else:
            consequence = (
                "its windowed layers are stored as full attention, so the GPU cache holds "
                "fewer tokens"
            )
            severity = Severity.warning
        option = ctx.option(DISABLE_HMA) if outcome.reason == "flag" else None
        yield self.finding(
            f"Model `{model.name}` is a hybrid and {because}: {consequence}.",
            flag=DISABLE_HMA if option is not None else KV_TRANSFER_CONFIG,
            location=option.location if option is not None else ctx.connector_location,
            severity=severity,
            reason=outcome.reason,
            connectors=list(outcome.non_hma),
        )


@register
class HmaForcedWithNonHmaConnector(ConfigRule):
    """Reports a connector without HMA support while HMA stays on, which fails at startup.

    What
    ----
    HMA ends up on although the connector (or a MultiConnector child) lacks `SupportsHMA`:
    either `--no-disable-hybrid-kv-cache-manager` forces it, or the release converts
    `--kv-offloading-*` into a connector after deciding HMA (0.11.1-0.21.x).

    Why
    ---
    `KVConnectorFactory` raises `ValueError: Connector X does not support HMA but HMA is enabled`.
    With native offload this fired on 0.11.1-0.20.x (OffloadingConnector has HMA from 0.21.0;
    the field guide says "<= 0.22.x"); with `--kv-offloading-backend lmcache` through 0.21.x.

    Example
    -------
    `--kv-offloading-size 100` on 0.20.0 (GPU); `--no-disable-hybrid-kv-cache-manager` with
    `LMCacheConnectorV1` on any release.

    Fix
    ---
    Add `--disable-hybrid-kv-cache-manager`, or upgrade to a release where the connector
    supports HMA.

    Releases
    --------
    SupportsHMA and the decision order (`hma.offload_converted_first`) from the release
    tables.
    """

    code = "CN012"
    name = "hma-forced-with-non-hma-connector"
    default_severity = Severity.error
    summary = "HMA stays on with a connector that lacks SupportsHMA: startup fails"
    fix_applicability = "display"
    references = (
        CONNECTOR_FACTORY_032,
        vllm_source(
            "0.21.0", "vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py",
            "OffloadingConnector subclasses SupportsHMA from 0.21.0",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        outcome = hma_outcome(ctx)
        if not outcome.on or outcome.reason != "forced-on" or not outcome.non_hma:
            return
        why = (
            f"`--no-{DISABLE_HMA[2:]}` forces HMA on"
            if ctx.bool_option(DISABLE_HMA) is False
            else f"vLLM {ctx.version} converts --kv-offloading-* into a connector after deciding "
            "HMA, so HMA stays on"
        )
        yield self.finding(
            f"{why} and `{', '.join(outcome.non_hma)}` lacks SupportsHMA in vLLM "
            f"{ctx.version}: startup fails with "
            f"`{HMA_FACTORY_ERROR.format(name=outcome.non_hma[0])}`",
            flag=DISABLE_HMA,
            location=ctx.connector_location,
            fix=Fix(
                applicability="display",
                description=f"add {DISABLE_HMA} or use a connector with HMA support",
            ),
            connectors=list(outcome.non_hma),
        )


@register
class NonHmaConnectorDisablesHma(ConfigRule):
    """Reports that vLLM will turn HMA off because the connector lacks `SupportsHMA`.

    What
    ----
    The flag is unset, the release decides HMA per connector, and the connector (or a
    MultiConnector child: one is enough) lacks `SupportsHMA`, so vLLM turns HMA off.

    Why
    ---
    Hybrid and sliding-window models lose their KV savings. From 0.23.0 vLLM's warning does
    not name the connector (only 0.22.x does; the field guide says the warning names it),
    so the audit names it.

    Example
    -------
    MultiConnector with children `NixlConnector` and `LMCacheConnectorV1` on 0.32.0.

    Fix
    ---
    Replace the non-HMA connector (native offload or LMCacheMPConnector with lmcache >= 0.4.7).

    Releases
    --------
    0.22.0 and later (release tables: `hma.mode` is `per_connector`).
    """

    code = "CN013"
    name = "non-hma-connector-disables-hma"
    default_severity = Severity.info
    summary = "vLLM turns HMA off because the connector lacks SupportsHMA"
    references = (
        vllm_source(
            "0.22.0", "vllm/config/vllm.py",
            "VllmConfig at 0.22.0: the auto-disable warning names the connector",
        ),
        VLLM_CONFIG_032,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        outcome = hma_outcome(ctx)
        if outcome.reason != "non-hma-connector":
            return
        says = (
            "its startup warning names the connector"
            if ctx.hma_warning_names_connector
            else "its startup warning does not name the connector"
        )
        yield self.finding(
            f"vLLM {ctx.version} turns HMA off because `{', '.join(outcome.non_hma)}` lacks "
            f"SupportsHMA ({says}).",
            flag=KV_TRANSFER_CONFIG,
            location=ctx.connector_location,
            connectors=list(outcome.non_hma),
        )


@register
class ExternalConnectorHmaUnknown(ConfigRule):
    """Notes that the HMA checks could not run: the decision rests on a connector class
    loaded by `kv_connector_module_path`.

    What
    ----
    The release decides HMA per connector (0.22.0 on), the flag does not decide it, and
    the class vLLM asks is one the audit cannot see: `--kv-transfer-config` loads its
    connector from `kv_connector_module_path` (a MultiConnector subclass, a private
    connector), or a MultiConnector child does and every registered child supports HMA.

    Why
    ---
    vLLM 0.32.0 asks a connector named `MultiConnector` about its children and any other
    name about its own class: a subclass of MultiConnector inherits `SupportsHMA`, so HMA
    stays on and MultiConnector's own start-up assertion then requires every child to
    support HMA. Whether HMA ends up on, and whether the hybrid-model (CN011), forced-HMA
    (CN012) and auto-disable (CN013) checks apply, depends on that class; the audit reports
    none of them rather than guess.

    Example
    -------
    `{"kv_connector": "TieredMultiConnector", "kv_connector_module_path": "acme.kv",
    "kv_connector_extra_config": {"connectors": [...]}}` on 0.32.0.

    Fix
    ---
    Nothing to fix in the config; check that the class subclasses `SupportsHMA` (or set
    `--disable-hybrid-kv-cache-manager`) when the model is hybrid.

    Releases
    --------
    Releases whose `hma.mode` is `per_connector` in the release tables (0.22.0 on).
    """

    code = "CN014"
    name = "external-connector-hma-unknown"
    default_severity = Severity.info
    summary = "HMA checks skipped: the decision rests on a class loaded by kv_connector_module_path"
    references = (
        CONNECTOR_FACTORY_032,
        vllm_source(
            "0.32.0", "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py",
            "MultiConnector at 0.32.0: all_children_support_hma and the start-up assertion",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        outcome = hma_outcome(ctx)
        if outcome.decided:
            return
        classes = ", ".join(f"`{name}`" for name in outcome.unresolved)
        yield self.finding(
            f"vLLM {ctx.version} decides HMA from {classes}, loaded by "
            "kv_connector_module_path; the audit cannot see that class, so the HMA checks "
            "(CN011, CN012, CN013) did not run.",
            flag=f"{KV_TRANSFER_CONFIG}.kv_connector_module_path",
            location=ctx.connector_location,
            connectors=list(outcome.unresolved),
        )


@register
class KvOffloadingSizeWithoutBackend(ConfigRule):
    """Reports `--kv-offloading-size` without a backend where the size alone does nothing.

    What
    ----
    On releases where `--kv-offloading-backend` defaults to None, the backend triggers the
    offload; a size on its own is silently ignored.

    Why
    ---
    No KV is offloaded and nothing says so.

    Example
    -------
    `--kv-offloading-size 100` on 0.12.0.

    Fix
    ---
    Add `--kv-offloading-backend native` (or upgrade to 0.14.0+, where native is the default).

    Releases
    --------
    `kv_offloading.size_alone_noop` in `rules/curated/semantics.toml` (0.11.1-0.13.x).
    """

    code = "CN001"
    name = "kv-offloading-size-without-backend"
    default_severity = Severity.error
    summary = "--kv-offloading-size alone is ignored at the target release"
    fix_applicability = "display"
    references = (
        vllm_source(
            "0.13.0", "vllm/config/cache.py",
            "CacheConfig at 0.13.0: kv_offloading_backend still defaults to None",
        ),
        VLLM_CONFIG_032,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        size = ctx.option(KV_OFFLOADING_SIZE)
        if size is None or ctx.option(KV_OFFLOADING_BACKEND) is not None:
            return
        if not ctx.semantics.holds("kv_offloading.size_alone_noop", ctx.version):
            return
        yield self.finding(
            f"On vLLM {ctx.version} `{KV_OFFLOADING_SIZE}` does nothing without "
            f"`{KV_OFFLOADING_BACKEND}` "
            "(the backend defaults to None): no KV is offloaded." + conditional_note(size),
            flag=KV_OFFLOADING_SIZE,
            location=size.location,
            fix=Fix(applicability="display", description=f"add {KV_OFFLOADING_BACKEND} native"),
        )


@register
class KvOffloadingSizeOverwritesKvTransferConfig(ConfigRule):
    """Reports `--kv-offloading-*` together with a `--kv-transfer-config` that names a connector.

    What
    ----
    Both the offload flags and a `--kv-transfer-config` with `kv_connector` are given.

    Why
    ---
    vLLM's `_post_init_kv_transfer_config` overwrites `kv_connector` (and, for the lmcache
    backend up to 0.22.x, the whole `kv_connector_extra_config`) and forces `kv_role=kv_both`:
    the user's connector (say NixlConnector for P/D) is silently replaced.

    Example
    -------
    `--kv-offloading-size 200
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'`.

    Fix
    ---
    Use one mechanism: for offload plus P/D, a MultiConnector with NixlConnector and
    OffloadingConnector children in `--kv-transfer-config`.

    Releases
    --------
    `kv_offloading.overwrites_kv_transfer_config` in `rules/curated/semantics.toml`.
    """

    code = "CN002"
    name = "kv-offloading-size-overwrites-kv-transfer-config"
    default_severity = Severity.error
    summary = "--kv-offloading-* silently replaces the connector in --kv-transfer-config"
    references = (VLLM_CONFIG_032,)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        mapping = ctx.backend_mapping
        user_connector = ctx.kv_transfer_config.get("kv_connector")
        if (
            mapping is None
            or not isinstance(user_connector, str)
            or user_connector == mapping.connector
        ):
            return
        if not ctx.semantics.holds("kv_offloading.overwrites_kv_transfer_config", ctx.version):
            return
        opt = ctx.option(KV_OFFLOADING_SIZE) or ctx.option(KV_OFFLOADING_BACKEND)
        yield self.finding(
            f"vLLM {ctx.version} replaces `kv_connector` `{user_connector}` from "
            f"`{KV_TRANSFER_CONFIG}` with "
            f"`{mapping.connector}` because `--kv-offloading-*` is set, and forces `kv_role` "
            "to `kv_both`.",
            flag=KV_TRANSFER_CONFIG,
            location=ctx.location_of(KV_TRANSFER_CONFIG) or (opt.location if opt else None),
            replaced=user_connector,
            connector=mapping.connector,
        )


@register
class KvOffloadingSizeIgnoredWithLmcacheBackend(ConfigRule):
    """Reports `--kv-offloading-size` with the lmcache backend where the size is not passed on.

    What
    ----
    The lmcache backend maps to `LMCacheMPConnector` (from 0.23.0), whose capacity is set by the
    LMCache server (`--l1-size-gb`); vLLM does not pass the size on.

    Why
    ---
    Operators believe they sized the cache; the server's own default or flag decides.
    The field guide's "keep LMCACHE_MAX_LOCAL_CPU_SIZE and --kv-offloading-size consistent"
    only holds on 0.11.1-0.22.x.

    Example
    -------
    `--kv-offloading-backend lmcache --kv-offloading-size 200` on 0.32.0.

    Fix
    ---
    Size the LMCache server (`lmcache server --l1-size-gb`); keep the size only as the on-switch.

    Releases
    --------
    `rules/curated/backend_connector.toml` rows with `size_scope: ignored`.
    """

    code = "CN005"
    name = "kv-offloading-size-ignored-with-lmcache-backend"
    default_severity = Severity.warning
    summary = "--kv-offloading-size does not size the LMCache MP backend"
    references = (LMCACHE_MP_BACKEND_PR, VLLM_CONFIG_032)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        mapping = ctx.backend_mapping
        size = ctx.option(KV_OFFLOADING_SIZE)
        if mapping is None or size is None or mapping.size_scope != "ignored":
            return
        yield self.finding(
            f"With `{KV_OFFLOADING_BACKEND} {mapping.backend}` vLLM {ctx.version} loads "
            f"`{mapping.connector}` and "
            f"does not pass `{KV_OFFLOADING_SIZE} {size.value}` on: the LMCache server's "
            "`--l1-size-gb` sets the capacity.",
            flag=KV_OFFLOADING_SIZE,
            location=size.location,
        )


def _hashseed_set(ctx: RuleContext) -> bool:
    return ctx.env("PYTHONHASHSEED") is not None


NONE_HASH_SOURCE = vllm_source(
    "0.32.0", "vllm/v1/core/kv_cache_utils.py",
    "kv_cache_utils at 0.32.0: NONE_HASH is seeded from PYTHONHASHSEED, else random bytes",
)
# LMCache settings that send chunks to a store other processes or instances read.
_LMCACHE_SHARED_ENV = ("LMCACHE_REMOTE_URL", "LMCACHE_ENABLE_P2P", "LMCACHE_ENABLE_CONTROLLER")
_LMCACHE_SHARED_KEYS = ("lmcache.remote_url", "lmcache.enable_p2p", "lmcache.enable_controller")


def _lmcache_sharing(ctx: RuleContext, connector: str) -> str | None:
    """Why blocks of ``connector`` are shared across processes or instances, or None."""
    if connector == "LMCacheMPConnector":
        return "the LMCache MP server is a separate process that outlives engine restarts"
    role = ctx.kv_transfer_config.get("kv_role")
    if role in ("kv_producer", "kv_consumer"):
        return f"kv_role {role} shares blocks between a prefill and a decode instance"
    if ctx.world > 1:
        return f"TP x PP = {ctx.world} workers hash in separate processes"
    for name in _LMCACHE_SHARED_ENV:
        if ctx.env_value(name) not in (None, "", "False", "false", "0"):
            return f"`{name}` makes a store other instances read"
    for key in _LMCACHE_SHARED_KEYS:
        if ctx.extra_config.get(key) not in (None, "", False):
            return f"`{key}` makes a store other instances read"
    return None


@register
class LmcacheWithoutPythonhashseed(ConfigRule):
    """Reports LMCache blocks shared across processes or instances without `PYTHONHASHSEED`.

    What
    ----
    An LMCache connector is used where more than one process or instance must agree on
    chunk hashes and `PYTHONHASHSEED` is not in the environment: always with
    `LMCacheMPConnector` (a separate server process, whatever the TP size), and with
    `LMCacheConnectorV1` when TP x PP > 1, a producer/consumer `kv_role`, or a remote, P2P or
    controller store.

    Why
    ---
    vLLM seeds the root of every block hash (`NONE_HASH`) from `PYTHONHASHSEED` and uses
    random bytes when it is unset; LMCache builds its chunk keys on it. Each process or
    restart then computes different keys and the external hit rate is 0 % (vLLM#42625,
    LMCache#1095, #1658, #2581).

    Example
    -------
    `--kv-transfer-config '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both"}'` with no
    `PYTHONHASHSEED`, at TP 1.

    Fix
    ---
    Set `PYTHONHASHSEED=0` (any fixed value, the same for every worker, instance and server).

    Releases
    --------
    Every release with LMCache connectors.
    """

    code = "CN020"
    name = "lmcache-without-pythonhashseed"
    default_severity = Severity.warning
    summary = "LMCache blocks shared across processes or instances and no PYTHONHASHSEED"
    references = (
        NONE_HASH_SOURCE,
        vllm_issue(42625, "prefix hashes differ across instances without PYTHONHASHSEED"),
        lmcache_issue(1095, "no hits across instances without PYTHONHASHSEED"),
        lmcache_issue(1658, "hash seeds differ between processes"),
        lmcache_issue(1739, "0% hit rate when TP workers hash with different seeds"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.connector is None or _hashseed_set(ctx):
            return
        for name in ctx.connector_names:
            if name not in ctx.semantics.lmcache_connectors:
                continue
            why = _lmcache_sharing(ctx, name)
            if why is None:
                continue
            yield self.finding(
                f"`{name}` without `PYTHONHASHSEED`: {why}, and each process seeds block hashes "
                "with random bytes, so chunk keys differ and nothing hits.",
                flag="PYTHONHASHSEED",
                location=ctx.connector_location,
                connector=name,
            )
            return


# Native offload tiers and connectors whose blocks other instances (or the next start) read.
_SHARED_TIERS = ("fs", "fs_python", "obj", "p2p", "kvcr")
_SHARED_STORE_CONNECTORS = ("MooncakeStoreConnector", "HF3FSKVConnector", "FlexKVConnectorV1")


@register
class SharedTierWithoutPythonhashseed(ConfigRule):
    """Reports a shared or persistent KV tier without `PYTHONHASHSEED`.

    What
    ----
    Blocks go to a store other instances or the next start read (a native `fs`, `obj`, `p2p`
    or `kvcr` secondary tier; `MooncakeStoreConnector`, `HF3FSKVConnector`,
    `FlexKVConnectorV1`) and `PYTHONHASHSEED` is unset, whatever the TP size.

    Why
    ---
    Block hashes start from `NONE_HASH`, random bytes unless `PYTHONHASHSEED` is set, so
    no other instance and no restart finds the stored blocks: the tier fills and never hits.

    Example
    -------
    OffloadingConnector with `"secondary_tiers": [{"type": "fs", "path": "/mnt/kv"}]` and no
    `PYTHONHASHSEED`.

    Fix
    ---
    Set the same `PYTHONHASHSEED` on every instance that shares the tier.

    Releases
    --------
    Every release with the tier or connector (release tables); the p2p tier's hard start-up
    check on 0.27-0.28 is CN021.
    """

    code = "CN022"
    name = "shared-tier-without-pythonhashseed"
    default_severity = Severity.warning
    summary = "a KV tier other instances or restarts read, and no PYTHONHASHSEED"
    references = (
        NONE_HASH_SOURCE,
        lmcache_issue(1095, "no hits across instances without PYTHONHASHSEED"),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.connector is None or _hashseed_set(ctx):
            return
        shared = [n for n in ctx.connector_names if n in _SHARED_STORE_CONNECTORS]
        for _, extra in ctx.connector_extra_configs:
            tiers = extra.get("secondary_tiers")
            for tier in tiers if isinstance(tiers, list) else ():
                kind = tier.get("type") if isinstance(tier, dict) else None
                if kind in _SHARED_TIERS and not (
                    kind == "p2p"
                    and ctx.semantics.holds("p2p.pythonhashseed_required", ctx.version)
                ):
                    shared.append(f"the {kind} tier")
        if not shared:
            return
        yield self.finding(
            f"{shared[0]} keeps blocks for other instances or restarts, but without "
            "`PYTHONHASHSEED` every process seeds block hashes with random bytes: nothing "
            "stored there is ever found again.",
            flag="PYTHONHASHSEED",
            location=ctx.connector_location,
        )


@register
class P2pTierWithoutPythonhashseed(ConfigRule):
    """Reports the native `p2p` offload tier without `PYTHONHASHSEED` on releases that require it.

    What
    ----
    `secondary_tiers` includes a `p2p` tier and `PYTHONHASHSEED` is unset on a release whose p2p
    manager raises at startup without it.

    Why
    ---
    vLLM refuses to start: "PYTHONHASHSEED must be set for P2P KV offload". The check exists in
    0.27.0-0.28.x (the field guide says from 0.26.0; 0.26.0 only hints in a timeout warning)
    and is lifted in 0.29.0.

    Example
    -------
    OffloadingConnector with `"secondary_tiers": [{"type": "p2p"}]` on 0.27.1, no PYTHONHASHSEED.

    Fix
    ---
    Set `PYTHONHASHSEED` to the same value on every instance.

    Releases
    --------
    `p2p.pythonhashseed_required` in `rules/curated/semantics.toml`.
    """

    code = "CN021"
    name = "p2p-tier-without-pythonhashseed"
    default_severity = Severity.error
    summary = "native p2p tier without PYTHONHASHSEED where vLLM requires it"
    references = (
        vllm_source(
            "0.27.0", "vllm/v1/kv_offload/tiering/p2p/manager.py",
            "the p2p tier at 0.27.0 refuses to start without PYTHONHASHSEED",
        ),
        vllm_pr(51875, "the p2p tier's PYTHONHASHSEED requirement lifted (0.29.0)"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        tiers = ctx.extra_config.get("secondary_tiers")
        if not isinstance(tiers, list) or _hashseed_set(ctx):
            return
        if not any(isinstance(t, dict) and t.get("type") == "p2p" for t in tiers):
            return
        if not ctx.semantics.holds("p2p.pythonhashseed_required", ctx.version):
            return
        yield self.finding(
            f"vLLM {ctx.version} refuses to start the p2p tier without PYTHONHASHSEED "
            '("PYTHONHASHSEED must be set for P2P KV offload").',
            flag="PYTHONHASHSEED",
            location=ctx.location_of(KV_TRANSFER_CONFIG),
        )


def _offloading(ctx: RuleContext) -> str | None:
    """The offload connector in use (a child of MultiConnector counts), or None."""
    return next((n for n in ctx.connector_names if n in ctx.semantics.offload_connectors), None)


@register
class OffloadWithoutPrefixCaching(ConfigRule):
    """Reports native KV offload with prefix caching turned off.

    What
    ----
    `OffloadingConnector` or `SimpleCPUOffloadConnector` (alone or as a MultiConnector child)
    is configured and `--no-enable-prefix-caching` is passed.

    Why
    ---
    vLLM's native offload finds offloaded KV again through the prefix cache's block hashes;
    with prefix caching off it has nothing to hit against and only costs transfer bandwidth.
    LMCache's connectors are not affected: they hash token chunks themselves and the
    scheduler asks every connector for external hits whether prefix caching is on or off
    (LMCache's own examples run `--no-enable-prefix-caching`), so they are not reported.

    Example
    -------
    `--kv-offloading-size 100 --no-enable-prefix-caching`.

    Fix
    ---
    Remove `--no-enable-prefix-caching` (prefix caching is on by default).

    Releases
    --------
    Every release with native KV offload; which connectors need prefix caching is
    `offload.prefix_cache_connectors` in `rules/audit/semantics.toml`.
    """

    code = "CN030"
    name = "offload-without-prefix-caching"
    default_severity = Severity.warning
    summary = "native KV offload configured with prefix caching off"
    fix_applicability = "unsafe"
    references = (CACHE_CONFIG_032, OFFLOADING_SCHEDULER_032)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not ctx.prefix_caching_off:
            return
        needs = ctx.semantics.prefix_cache_connectors
        connector = next((n for n in ctx.connector_names if n in needs), None)
        if connector is None:
            return
        opt = ctx.option("--enable-prefix-caching")
        assert opt is not None  # prefix_caching_off implies the option is present
        yield self.finding(
            f"`{connector}` finds offloaded KV through prefix-cache block hashes, but prefix "
            "caching is off: offloaded blocks can never be hit.",
            flag="--enable-prefix-caching",
            location=opt.location,
            fix=removal_fix(ctx, opt, f"remove {opt.written}", safe=False),
        )


@register
class Fp8KvCacheWithoutScales(ConfigRule):
    """Notes that an FP8 KV cache uses scale 1.0 unless the checkpoint ships k/v scales.

    What
    ----
    `--kv-cache-dtype fp8*` is set; kvtool cannot see whether the checkpoint ships calibrated
    `k_scale`/`v_scale`.

    Why
    ---
    Without shipped scales vLLM uses 1.0, which can clip large activations (quality loss,
    often only past 128k context). `--calculate-kv-scales` (removed in 0.28.0) still computed
    dynamic scales through 0.27.1; the field guide's "it had no effect" is wrong.

    Example
    -------
    `--kv-cache-dtype fp8` on a checkpoint without `k_scale`.

    Fix
    ---
    Check the checkpoint for scales, or stay on BF16 KV and use offload to regain memory.

    Releases
    --------
    Every release; `--calculate-kv-scales` presence from the release tables.
    """

    code = "CN031"
    name = "fp8-kv-cache-without-scales"
    default_severity = Severity.info
    summary = "FP8 KV cache: scale 1.0 unless the checkpoint ships k/v scales"
    references = (
        vllm_source(
            "0.27.1", "vllm/config/cache.py",
            "calculate_kv_scales at 0.27.1: without checkpoint scales they default to 1.0",
        ),
        vllm_pr(49389, "--calculate-kv-scales removed (0.28.0)"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--kv-cache-dtype")
        if opt is None or not str(opt.value).startswith("fp8"):
            return
        calc = ctx.option("--calculate-kv-scales")
        if calc is not None and calc.known and calc.value is True:
            return  # dynamic scales are computed on releases that still have the flag
        yield self.finding(
            f"`--kv-cache-dtype {opt.value}`: unless the checkpoint ships "
            "`k_scale`/`v_scale`, vLLM uses "
            "scale 1.0, which can clip large activations on long contexts.",
            flag="--kv-cache-dtype",
            location=opt.location,
        )


@register
class EnforceEagerWithOffload(ConfigRule):
    """Reports `--enforce-eager` on a deployment that uses KV offload.

    What
    ----
    `--enforce-eager` disables CUDA graphs. It is often added as a fragmentation workaround.

    Why
    ---
    It hurts steady-state throughput by more than fragmentation costs: dropping it cut a
    prefix-cache-hit turn from 2.4 s to 0.64 s on Qwen3-4B (field guide). Keep it only where
    the architecture needs it (hybrid DeltaNet + attention models).

    Example
    -------
    `--kv-offloading-size 100 --enforce-eager`.

    Fix
    ---
    Remove `--enforce-eager` unless the model needs it.

    Releases
    --------
    Every release.
    """

    code = "CN032"
    name = "enforce-eager-with-offload"
    default_severity = Severity.warning
    summary = "--enforce-eager disables CUDA graphs on an offload deployment"
    fix_applicability = "unsafe"
    references = (
        vllm_source(
            "0.32.0", "vllm/config/model.py",
            "ModelConfig at 0.32.0: enforce_eager turns CUDA graphs off",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--enforce-eager")
        if opt is None or opt.value is not True or _offloading(ctx) is None:
            return
        if ctx.model is not None and ctx.model.hybrid:
            return  # hybrid DeltaNet-style models may genuinely need eager mode
        yield self.finding(
            "`--enforce-eager` disables CUDA graphs and costs more throughput than it saves "
            "in fragmentation." + conditional_note(opt),
            flag="--enforce-eager",
            location=opt.location,
            fix=removal_fix(ctx, opt, "remove --enforce-eager", safe=False),
        )


@register
class RetentionIntervalNotBlockMultiple(ConfigRule):
    """Reports a `--prefix-cache-retention-interval` that is not a multiple of `--block-size`.

    What
    ----
    A positive retention interval must be a multiple of the scheduler block size.

    Why
    ---
    vLLM rejects the value at startup. From 0.30.0 the interval also gates which SWA/SSM
    chunks OffloadingConnector offloads and must be a multiple of the SWA group's
    `tokens_per_chunk` (checked by vLLM; not visible to kvtool).

    Example
    -------
    `--prefix-cache-retention-interval 100 --block-size 32`.

    Fix
    ---
    Round the interval to a multiple of the block size.

    Releases
    --------
    `retention_interval_block_multiple` in `rules/audit/semantics.toml` (the flag exists
    from 0.29.0).
    """

    code = "CN033"
    name = "retention-interval-not-block-multiple"
    default_severity = Severity.error
    summary = "--prefix-cache-retention-interval is not a multiple of --block-size"
    fix_applicability = "display"
    references = (
        vllm_source(
            "0.30.0", "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",
            "the offload scheduler at 0.30.0: the retention interval must be a chunk multiple",
        ),
        CACHE_CONFIG_032,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        interval_opt = ctx.option("--prefix-cache-retention-interval")
        if interval_opt is None or ctx.option("--block-size") is None:
            return
        if not ctx.semantics.retention_interval_block_multiple.contains(ctx.version):
            return
        interval = ctx.int_option("--prefix-cache-retention-interval", 0)
        block = ctx.int_option("--block-size", 0)
        if interval <= 0 or block <= 0 or interval % block == 0:
            return
        lower = interval - interval % block
        yield self.finding(
            f"`--prefix-cache-retention-interval {interval}` is not a multiple of "
            f"`--block-size {block}`; "
            f"use {lower or block} or {lower + block}.",
            flag="--prefix-cache-retention-interval",
            location=interval_opt.location,
        )


@register
class MambaCacheModeAllForcesMrv1(ConfigRule):
    """Reports `--mamba-cache-mode all` on releases where it forces Model Runner V1.

    What
    ----
    `--mamba-cache-mode all` on a release that deprecated the value: vLLM warns and falls
    back to Model Runner V1 ("mamba cache mode 'all'" is on the MRV2-unsupported list).

    Why
    ---
    The deployment silently loses Model Runner V2, and the next release rejects the value
    outright (`invalid choice`), so the flag blocks the upgrade too.

    Example
    -------
    `--mamba-cache-mode all` on 0.30.0 or 0.31.0.

    Fix
    ---
    Use `align` (a safe fix; vLLM sets it itself when prefix caching is on).

    Releases
    --------
    `mamba_cache_mode.all_forces_mrv1` in `rules/curated/semantics.toml`; the rejection on
    later releases is `invalid-choice` (VG005).
    """

    code = "CN034"
    name = "mamba-cache-mode-all-forces-mrv1"
    default_severity = Severity.warning
    summary = "--mamba-cache-mode all warns and forces Model Runner V1"
    fix_applicability = "safe"
    references = (
        vllm_pr(55041, "--mamba-cache-mode all deprecated; it forces the V1 model runner"),
        vllm_pr(58997, "--mamba-cache-mode all removed (0.32.0)"),
    )
    since = "0.1.0"
    other_fix_applicabilities = ("display",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--mamba-cache-mode")
        if opt is None or opt.value != "all":
            return
        if not ctx.semantics.holds("mamba_cache_mode.all_forces_mrv1", ctx.version):
            return
        migration = ctx.semantics.choice_migration("--mamba-cache-mode", "all")
        fix = None
        if migration is not None:
            fix = replacement_fix(
                ctx,
                opt,
                ("--mamba-cache-mode", migration.replacement),
                f"--mamba-cache-mode all -> {migration.replacement}",
                safe=True,
            )
        yield self.finding(
            f"`--mamba-cache-mode all` is deprecated in vLLM {ctx.version}: it warns and forces "
            "Model Runner V1." + conditional_note(opt),
            flag="--mamba-cache-mode",
            location=opt.location,
            fix=fix,
        )


@register
class FastsafetensorsNoGdsWithTp(ConfigRule):
    """Notes that `--load-format fastsafetensors` never uses GPUDirect Storage with TP > 1.

    What
    ----
    `--load-format fastsafetensors` with `--tensor-parallel-size` above 1.

    Why
    ---
    vLLM always passes `nogds=True` to fastsafetensors when TP > 1, so multi-GPU deployments
    that expect GDS loading (and set up cuFile for it) load through host memory instead.
    The field guide's `GDS is not supported in this platform` warning is the library's, not
    vLLM's; vLLM logs "GDS not enabled, setting `nogds=True`".

    Example
    -------
    `--load-format fastsafetensors -tp 8`.

    Fix
    ---
    Nothing to change for correctness; do not budget GDS load times for TP > 1.

    Releases
    --------
    `load_format.fastsafetensors_nogds_tp` in `rules/curated/semantics.toml`.
    """

    code = "CN035"
    name = "fastsafetensors-no-gds-with-tp"
    default_severity = Severity.info
    summary = "--load-format fastsafetensors does not use GDS with TP > 1"
    references = (
        vllm_source(
            "0.32.0", "vllm/model_executor/model_loader/weight_utils.py",
            "the fastsafetensors loader at 0.32.0 sets nogds=True when TP > 1",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--load-format")
        if opt is None or opt.value != "fastsafetensors" or ctx.tp == 1:
            return
        if not ctx.semantics.holds("load_format.fastsafetensors_nogds_tp", ctx.version):
            return
        yield self.finding(
            f"With TP = {ctx.tp} vLLM loads fastsafetensors with `nogds=True`: "
            "no GPUDirect Storage.",
            flag="--load-format",
            location=opt.location,
        )
