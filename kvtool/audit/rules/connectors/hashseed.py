"""CN020-CN022: block hashes shared by processes, instances or restarts need PYTHONHASHSEED."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import lmcache_issue, vllm_issue, vllm_pr, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._premises import Verdict, capped, premise


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
    Block hashes start from `NONE_HASH`. Up to 0.28.x it is random bytes unless
    `PYTHONHASHSEED` is set, whatever the hash algorithm; from 0.29.0 sha256 and
    sha256_cbor (the default) start from a fixed seed and only `--prefix-caching-hash-algo
    xxhash` or `xxhash_cbor` stay random. Where it is random no other instance and no
    restart finds the stored blocks: the tier fills and never hits.

    Example
    -------
    OffloadingConnector with `"secondary_tiers": [{"type": "fs", "path": "/mnt/kv"}]` and no
    `PYTHONHASHSEED` on 0.28.0 (on 0.29.0 and later: with `--prefix-caching-hash-algo xxhash`).

    Fix
    ---
    Set the same `PYTHONHASHSEED` on every instance that shares the tier.

    Releases
    --------
    The premises `none_hash.random_without_hashseed` (up to 0.28.x) and
    `none_hash.random_for_non_crypto_hash` (0.29.0 on), proven from the wheels
    (`rules/audit/premises.json`); the tiers and connectors from the release tables. The p2p
    tier's hard start-up check on 0.27-0.28 is CN021.
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
                    and premise("p2p.pythonhashseed_required", ctx.version).holds
                ):
                    shared.append(f"the {kind} tier")
        if not shared:
            return
        random_seed = _random_none_hash(ctx)
        if random_seed is None:
            return
        why, verdict = random_seed
        yield self.finding(
            f"{shared[0]} keeps blocks for other instances or restarts, but without "
            f"`PYTHONHASHSEED` {why}: nothing stored there is ever found again." + verdict.note,
            flag="PYTHONHASHSEED",
            location=ctx.connector_location,
        )


# Hash algorithms vLLM 0.29.0+ keeps seeding with random bytes (not collision resistant).
_NON_CRYPTO_HASH_ALGOS = ("xxhash", "xxhash_cbor")


def _random_none_hash(ctx: RuleContext) -> tuple[str, Verdict] | None:
    """Why every process seeds its block hashes differently, with the premise it rests on;
    None where the release seeds them with a fixed value."""
    every_algo = premise("none_hash.random_without_hashseed", ctx.version)
    if every_algo.holds:
        return "every process seeds block hashes with random bytes", every_algo
    algo = ctx.option("--prefix-caching-hash-algo")
    non_crypto = premise("none_hash.random_for_non_crypto_hash", ctx.version)
    if non_crypto.holds and algo is not None and algo.value in _NON_CRYPTO_HASH_ALGOS:
        return (
            f"`--prefix-caching-hash-algo {algo.value}` makes every process seed block hashes "
            "with random bytes",
            non_crypto,
        )
    return None


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
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        tiers = ctx.extra_config.get("secondary_tiers")
        if not isinstance(tiers, list) or _hashseed_set(ctx):
            return
        if not any(isinstance(t, dict) and t.get("type") == "p2p" for t in tiers):
            return
        verdict = premise("p2p.pythonhashseed_required", ctx.version)
        if not verdict.holds:
            return
        yield self.finding(
            f"vLLM {ctx.version} refuses to start the p2p tier without PYTHONHASHSEED "
            '("PYTHONHASHSEED must be set for P2P KV offload").' + verdict.note,
            flag="PYTHONHASHSEED",
            location=ctx.location_of(KV_TRANSFER_CONFIG),
            severity=capped(self.default_severity, verdict),
        )
