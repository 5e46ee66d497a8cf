"""Is the offload tier serving hits? Counter deltas between two scrapes, and the likely cause.

Pure: two :class:`Snapshot`s (and optionally the engine log's text) in, a
:class:`VerifyReport` out. The causes are checked in the order an operator should
rule them out (the field guide's "Offload doesn't help" list, made mechanical), and
every cause carries the numbers or log line that triggered it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kvtool.verify import signals as sig
from kvtool.verify.prometheus import Snapshot, counter_present, counter_total

GIB = 1 << 30

Verdict = Literal["serving-hits", "no-external-hits", "no-traffic"]


class Cause(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class Deltas(BaseModel):
    """Counter increases between the two scrapes (tokens unless named bytes)."""

    model_config = ConfigDict(frozen=True)

    requests: float
    prefix_queries: float
    prefix_hits: float
    external_queries: float
    external_hits: float
    offload_store_bytes: float
    offload_load_bytes: float
    offload_allocation_failures: float


class VerifyReport(BaseModel):
    verdict: Verdict
    deltas: Deltas
    prefix_hit_rate: float | None
    external_hit_rate: float | None
    connector: str | None = None  # from the log, when given
    cache_config: dict[str, str] = Field(default_factory=dict)
    causes: list[Cause] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "serving-hits"


def _delta(
    before: Snapshot,
    after: Snapshot,
    name: str,
    where: dict[str, str] | None = None,
    notes: list[str] | None = None,
) -> float:
    start, end = counter_total(before, name, where), counter_total(after, name, where)
    if end < start:
        # The engine restarted between the scrapes: the counter began again at zero.
        if notes is not None:
            notes.append(
                f"{name} went down ({start:g} -> {end:g}): engine restarted; counting from zero"
            )
        return end
    return end - start


def _offload_bytes(
    before: Snapshot, after: Snapshot, flat: str, legacy: dict[str, str], notes: list[str]
) -> float:
    if counter_present(after, flat):
        return _delta(before, after, flat, notes=notes)
    return _delta(before, after, sig.LEGACY_OFFLOAD_BYTES, legacy, notes)


def deltas(before: Snapshot, after: Snapshot, notes: list[str]) -> Deltas:
    return Deltas(
        requests=_delta(before, after, sig.REQUESTS_DONE, notes=notes),
        prefix_queries=_delta(before, after, sig.PREFIX_QUERIES, notes=notes),
        prefix_hits=_delta(before, after, sig.PREFIX_HITS, notes=notes),
        external_queries=_delta(before, after, sig.EXTERNAL_QUERIES, notes=notes),
        external_hits=_delta(before, after, sig.EXTERNAL_HITS, notes=notes),
        offload_store_bytes=_offload_bytes(
            before, after, sig.OFFLOAD_STORE_BYTES, sig.LEGACY_STORE, notes
        ),
        offload_load_bytes=_offload_bytes(
            before, after, sig.OFFLOAD_LOAD_BYTES, sig.LEGACY_LOAD, notes
        ),
        offload_allocation_failures=_delta(
            before, after, sig.OFFLOAD_ALLOCATION_FAILURES, notes=notes
        ),
    )


def cache_config(snapshot: Snapshot) -> dict[str, str]:
    """CacheConfig as configured, from the ``vllm:cache_config_info`` labels (engine 0 first)."""
    samples = sorted(snapshot.named(sig.CACHE_CONFIG_INFO), key=lambda s: s.label("engine") or "")
    return dict(samples[0].labels) if samples else {}


def _rate(hits: float, queries: float) -> float | None:
    return hits / queries if queries > 0 else None


def _tier_bytes(config: dict[str, str]) -> float | None:
    try:
        size = float(config.get("kv_offloading_size", "None"))
    except ValueError:
        return None
    return size * GIB if size > 0 else None


def _gpu_cache_usage(snapshot: Snapshot) -> float | None:
    """The highest GPU KV cache use (0..1) any engine reports, when exported."""
    for name in sig.KV_CACHE_USAGE:
        values = [sample.value for sample in snapshot.named(name)]
        if values:
            return max(values)
    return None


# At or above this use the GPU cache is full: new blocks evict cached prefixes.
GPU_CACHE_FULL = 0.95


class LogEvidence(BaseModel):
    """What the engine log says, when one is given."""

    model_config = ConfigDict(frozen=True)

    created: list[str]  # connector names, in creation order
    lmcache_stored_tokens: int = 0
    lmcache_hit_tokens: int = 0

    @property
    def lmcache(self) -> bool:
        return any(name in sig.LMCACHE_CONNECTORS for name in self.created)

    @property
    def needs_prefix_caching(self) -> bool:
        """A connector that finds offloaded KV through prefix-cache hashes was created (or
        the log does not say which connector was)."""
        return not self.created or any(n in sig.PREFIX_CACHE_CONNECTORS for n in self.created)


def read_log(log: str | None) -> LogEvidence:
    text = log or ""
    return LogEvidence(
        created=sig.CONNECTOR_CREATED.findall(text),
        lmcache_stored_tokens=sum(int(n) for n in sig.LMCACHE_STORED.findall(text)),
        lmcache_hit_tokens=sum(int(n) for n in sig.LMCACHE_HIT.findall(text)),
    )


def _causes(
    d: Deltas,
    config: dict[str, str],
    log: str | None,
    evidence: LogEvidence,
    usage: float | None,
    offload_counted: bool,
) -> list[Cause]:
    """Why no external hits. ``offload_counted``: the server exports vllm:kv_offload_*."""
    causes: list[Cause] = []
    created = evidence.created

    def add(code: str, message: str, **facts: Any) -> None:
        causes.append(Cause(code=code, message=message, evidence=facts))

    if config.get("enable_prefix_caching") == "False" and evidence.needs_prefix_caching:
        add(
            "prefix-caching-off",
            "prefix caching is off (--no-enable-prefix-caching): native offload finds blocks "
            "through prefix-cache hashes, so it has nothing to hit against; remove the flag",
            enable_prefix_caching="False",
        )
    # LMCache counts nothing in vllm:kv_offload_*: its log lines say what it stored.
    stored = float(evidence.lmcache_stored_tokens) if evidence.lmcache else d.offload_store_bytes
    if d.external_queries == 0:
        if log is not None and not created:
            add(
                "connector-not-loaded",
                "no KV connector was created (the log has no 'Creating v1 connector' line): "
                "--kv-transfer-config or --kv-offloading-size did not take effect",
                external_queries=0,
            )
        else:
            add(
                "connector-not-loaded",
                "the engine asked no KV connector for prefixes (external prefix-cache queries "
                "did not rise): no connector is configured, or it reports no lookups",
                external_queries=0,
                connectors_in_log=created,
            )
    elif evidence.lmcache and log is not None and stored == 0:
        add(
            "nothing-stored",
            "LMCache logged no 'Stored N out of total M tokens' line: it stored nothing "
            "(check the LMCache tier size and, for LMCacheMPConnector, that the server is "
            "reachable)",
            external_queries=d.external_queries,
            lmcache_stored_tokens=0,
        )
    elif not evidence.lmcache and not offload_counted and d.external_hits == 0:
        add(
            "offload-counters-absent",
            "this connector exports no vllm:kv_offload_* counters (LMCache's connectors and "
            "other external ones count nothing there), so whether it stored anything cannot "
            "be read from /metrics: pass the engine log (--log) to read its own lines",
            external_queries=d.external_queries,
            connectors_in_log=created,
        )
    elif offload_counted and stored == 0 and d.external_hits == 0:
        add(
            "nothing-stored",
            "the connector was asked for prefixes but stored nothing: check that the tier has "
            "a size, and that a lazy drain policy ever releases (FIFO thresholds above the "
            "number of finished requests never drain before the blocks are recycled)",
            external_queries=d.external_queries,
            offload_store_bytes=0,
        )
    tier = _tier_bytes(config)
    if d.offload_allocation_failures > 0 or (tier is not None and d.offload_store_bytes > tier):
        add(
            "cpu-tier-too-small",
            "the CPU tier overflowed: blocks were evicted before they were asked for again; "
            "raise --kv-offloading-size (the TP-wide total in GiB) or shrink the working set",
            allocation_failures=d.offload_allocation_failures,
            offload_store_bytes=d.offload_store_bytes,
            tier_bytes=tier,
        )
    if log is not None and sig.RANDOM_HASH_SEED.search(log):
        add(
            "pythonhashseed-unset",
            "PYTHONHASHSEED is unset, so block hashes differ between processes: a tier shared "
            "across engines or restarts (LMCache MP, fs, p2p) never matches; set the same "
            "PYTHONHASHSEED everywhere",
            log_line=sig.RANDOM_HASH_SEED.pattern,
        )
    if log is not None:
        non_hma = sig.HMA_OFF_FOR_NON_HMA_CONNECTOR.search(log)
        if non_hma is not None:
            add(
                "hma-disabled",
                "vLLM turned the hybrid KV cache manager off because the connector lacks "
                "SupportsHMA: sliding-window layers keep every token resident and hybrid SSM "
                "models cannot start; use an HMA-capable connector",
                log_line=non_hma.group(0),
                connector=non_hma.group("name"),
            )
        elif sig.HMA_OFF_FOR_ANY_CONNECTOR.search(log):
            add(
                "hma-disabled-by-release",
                "this vLLM release turns the hybrid KV cache manager off for any "
                "--kv-transfer-config, whatever the connector supports (releases before "
                "0.22): sliding-window layers keep every token resident; pass "
                "--no-disable-hybrid-kv-cache-manager (0.13-0.21) with an HMA-capable "
                "connector, or upgrade",
                log_line=sig.HMA_OFF_FOR_ANY_CONNECTOR.pattern,
            )
    if stored > 0 and d.external_hits == 0 and usage is not None and usage >= GPU_CACHE_FULL:
        add(
            "stored-never-found",
            "the tier keeps storing and the GPU cache is full, so evicted prefixes were asked "
            "for again, yet no lookup found one: the GPU cache is not sufficient, the store "
            "misses. Check PYTHONHASHSEED (the same in every process), that shared prefixes "
            "span at least one full block or LMCache chunk, and the connector's own log",
            stored=stored,
            gpu_cache_usage=usage,
        )
    if not causes and d.prefix_hits == 0:
        add(
            "workload-no-reuse",
            "no prefix was reused even on the GPU: the workload has no shared prefixes for "
            "offload to serve",
            prefix_queries=d.prefix_queries,
            prefix_hits=0,
        )
    if not causes:
        add(
            "gpu-cache-sufficient",
            "every reused prefix was still on the GPU, so the offload tier was never needed: "
            "grow the working set past the GPU tier (about 2x its tokens) to exercise it",
            prefix_hits=d.prefix_hits,
            gpu_cache_usage=usage,
        )
    return causes


def diagnose(before: Snapshot, after: Snapshot, log: str | None = None) -> VerifyReport:
    """Deltas ``after - before`` and, when offload served no hits, why."""
    notes: list[str] = []
    d = deltas(before, after, notes)
    config = cache_config(after) or cache_config(before)
    evidence = read_log(log)
    created = evidence.created
    if d.prefix_queries == 0 and d.external_queries == 0:
        verdict: Verdict = "no-traffic"
        causes = [
            Cause(
                code="no-traffic",
                message="no prompt tokens were queried between the two scrapes: send "
                "traffic while verifying (vllm bench serve --dataset-name "
                "prefix_repetition)",
                evidence={"requests": d.requests},
            )
        ]
    elif not (
        counter_present(before, sig.EXTERNAL_QUERIES)
        or counter_present(after, sig.EXTERNAL_QUERIES)
    ):
        verdict = "no-external-hits"
        causes = [
            Cause(
                code="no-external-metrics",
                message="this server exposes no vllm:external_prefix_cache_* counters "
                "(older vLLM), so connector hits cannot be read from /metrics; "
                "check the connector's own log lines instead",
                evidence={"prefix_queries": d.prefix_queries},
            )
        ]
    elif d.external_hits > 0:
        verdict, causes = "serving-hits", []
        if d.offload_load_bytes == 0 and counter_present(after, sig.OFFLOAD_LOAD_BYTES):
            notes.append("external hits rose but no offload load bytes were counted")
    else:
        offload_counted = counter_present(after, sig.OFFLOAD_STORE_BYTES) or counter_present(
            after, sig.LEGACY_OFFLOAD_BYTES
        )
        causes = _causes(d, config, log, evidence, _gpu_cache_usage(after), offload_counted)
        verdict = "no-external-hits"
    return VerifyReport(
        verdict=verdict,
        deltas=d,
        prefix_hit_rate=_rate(d.prefix_hits, d.prefix_queries),
        external_hit_rate=_rate(d.external_hits, d.external_queries),
        connector=created[-1] if created else None,
        cache_config=config,
        causes=causes,
        notes=notes,
    )
