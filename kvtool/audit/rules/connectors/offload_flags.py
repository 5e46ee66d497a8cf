"""CN001-CN005: what `--kv-offloading-size` and `--kv-offloading-backend` do at a release."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import (
    KV_OFFLOADING_BACKEND,
    KV_OFFLOADING_SIZE,
    KV_TRANSFER_CONFIG,
    RuleContext,
)
from kvtool.audit.model import Finding, Fix, Severity
from kvtool.audit.references import LMCACHE_MP_BACKEND_PR, VLLM_CONFIG_032, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note
from kvtool.audit.rules._premises import capped, premise


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
    `kv_offloading.size_alone_noop` in `rules/curated/semantics.toml` (0.11.1-0.13.x), a
    premise proven from the wheels (`rules/audit/premises.json`).
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
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        size = ctx.option(KV_OFFLOADING_SIZE)
        if size is None or ctx.option(KV_OFFLOADING_BACKEND) is not None:
            return
        verdict = premise("kv_offloading.size_alone_noop", ctx.version)
        if not verdict.holds:
            return
        yield self.finding(
            f"On vLLM {ctx.version} `{KV_OFFLOADING_SIZE}` does nothing without "
            f"`{KV_OFFLOADING_BACKEND}` "
            "(the backend defaults to None): no KV is offloaded."
            + conditional_note(size)
            + verdict.note,
            flag=KV_OFFLOADING_SIZE,
            location=size.location,
            fix=Fix(applicability="display", description=f"add {KV_OFFLOADING_BACKEND} native"),
            severity=capped(self.default_severity, verdict),
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
    `kv_offloading.overwrites_kv_transfer_config` in `rules/curated/semantics.toml` (0.11.1
    on), a premise proven from the wheels (`rules/audit/premises.json`).
    """

    code = "CN002"
    name = "kv-offloading-size-overwrites-kv-transfer-config"
    default_severity = Severity.error
    summary = "--kv-offloading-* silently replaces the connector in --kv-transfer-config"
    references = (VLLM_CONFIG_032,)
    since = "0.1.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        mapping = ctx.backend_mapping
        user_connector = ctx.kv_transfer_config.get("kv_connector")
        if (
            mapping is None
            or not isinstance(user_connector, str)
            or user_connector == mapping.connector
        ):
            return
        verdict = premise("kv_offloading.overwrites_kv_transfer_config", ctx.version)
        if not verdict.holds:
            return
        opt = ctx.option(KV_OFFLOADING_SIZE) or ctx.option(KV_OFFLOADING_BACKEND)
        yield self.finding(
            f"vLLM {ctx.version} replaces `kv_connector` `{user_connector}` from "
            f"`{KV_TRANSFER_CONFIG}` with "
            f"`{mapping.connector}` because `--kv-offloading-*` is set, and forces `kv_role` "
            "to `kv_both`." + verdict.note,
            severity=capped(self.default_severity, verdict),
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
