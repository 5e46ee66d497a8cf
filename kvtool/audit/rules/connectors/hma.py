"""CN010-CN014: the hybrid KV cache manager (HMA) against the connector and the model.

The decision itself is :func:`kvtool.audit.rules.connectors.hma_decision.hma_outcome`.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Fix, Severity
from kvtool.audit.references import (
    CONNECTOR_FACTORY_032,
    HMA_DEFAULT_PR,
    VLLM_CONFIG_032,
    lmcache_issue,
    vllm_pr,
    vllm_source,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, removal_fix
from kvtool.audit.rules._premises import premise_records
from kvtool.audit.rules.connectors.hma_decision import DISABLE_HMA, HMA_FACTORY_ERROR, hma_outcome


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
            # The first LMCache release whose own LMCacheMPConnector subclasses SupportsHMA,
            # proven from LMCache's wheels.
            minimum = premise_records()["lmcache_mp.external_supports_hma"].since
            which = f"lmcache >= {minimum}" if minimum else "HMA support"
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
