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


def _delta(before: Snapshot, after: Snapshot, name: str, where: dict[str, str] | None = None,
           notes: list[str] | None = None) -> float:
    start, end = counter_total(before, name, where), counter_total(after, name, where)
    if end < start:
        # The engine restarted between the scrapes: the counter began again at zero.
        if notes is not None:
            notes.append(f"{name} went down ({start:g} -> {end:g}): engine restarted; "
                         "counting from zero")
        return end
    return end - start


def _offload_bytes(before: Snapshot, after: Snapshot, flat: str, legacy: dict[str, str],
                   notes: list[str]) -> float:
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
        offload_store_bytes=_offload_bytes(before, after, sig.OFFLOAD_STORE_BYTES,
                                           sig.LEGACY_STORE, notes),
        offload_load_bytes=_offload_bytes(before, after, sig.OFFLOAD_LOAD_BYTES,
                                          sig.LEGACY_LOAD, notes),
        offload_allocation_failures=_delta(before, after, sig.OFFLOAD_ALLOCATION_FAILURES,
                                           notes=notes),
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


def _causes(
    d: Deltas, config: dict[str, str], log: str | None, created: list[str]
) -> list[Cause]:
    """Why no external hits; ``created`` are the connector names the log says were made."""
    causes: list[Cause] = []

    def add(code: str, message: str, **evidence: Any) -> None:
        causes.append(Cause(code=code, message=message, evidence=evidence))

    if config.get("enable_prefix_caching") == "False":
        add("prefix-caching-off",
            "prefix caching is off (--no-enable-prefix-caching): offload has nothing to hit "
            "against; remove the flag",
            enable_prefix_caching="False")
    if d.external_queries == 0:
        if log is not None and not created:
            add("connector-not-loaded",
                "no KV connector was created (the log has no 'Creating v1 connector' line): "
                "--kv-transfer-config or --kv-offloading-size did not take effect",
                external_queries=0)
        else:
            add("connector-not-loaded",
                "the engine asked no KV connector for prefixes (external prefix-cache queries "
                "did not rise): no connector is configured, or it reports no lookups",
                external_queries=0, connectors_in_log=created)
    elif d.offload_store_bytes == 0 and d.external_hits == 0:
        add("nothing-stored",
            "the connector was asked for prefixes but stored nothing: check that the tier has "
            "a size, and that a lazy drain policy ever releases (FIFO thresholds above the "
            "number of finished requests never drain before the blocks are recycled)",
            external_queries=d.external_queries, offload_store_bytes=0)
    tier = _tier_bytes(config)
    if d.offload_allocation_failures > 0 or (tier is not None and d.offload_store_bytes > tier):
        add("cpu-tier-too-small",
            "the CPU tier overflowed: blocks were evicted before they were asked for again; "
            "raise --kv-offloading-size (the TP-wide total in GiB) or shrink the working set",
            allocation_failures=d.offload_allocation_failures,
            offload_store_bytes=d.offload_store_bytes, tier_bytes=tier)
    if log is not None and sig.RANDOM_HASH_SEED.search(log):
        add("pythonhashseed-unset",
            "PYTHONHASHSEED is unset, so block hashes differ between processes: a tier shared "
            "across engines or restarts (LMCache MP, fs, p2p) never matches; set the same "
            "PYTHONHASHSEED everywhere",
            log_line=sig.RANDOM_HASH_SEED.pattern)
    if log is not None and sig.HMA_TURNED_OFF.search(log):
        add("hma-disabled",
            "vLLM turned the hybrid KV cache manager off because the connector lacks "
            "SupportsHMA: sliding-window layers keep every token resident and hybrid SSM "
            "models cannot start; use an HMA-capable connector",
            log_line=sig.HMA_TURNED_OFF.pattern)
    if not causes and d.prefix_hits == 0:
        add("workload-no-reuse",
            "no prefix was reused even on the GPU: the workload has no shared prefixes for "
            "offload to serve",
            prefix_queries=d.prefix_queries, prefix_hits=0)
    if not causes:
        add("gpu-cache-sufficient",
            "every reused prefix was still on the GPU, so the offload tier was never needed: "
            "grow the working set past the GPU tier (about 2x its tokens) to exercise it",
            prefix_hits=d.prefix_hits)
    return causes


def diagnose(before: Snapshot, after: Snapshot, log: str | None = None) -> VerifyReport:
    """Deltas ``after - before`` and, when offload served no hits, why."""
    notes: list[str] = []
    d = deltas(before, after, notes)
    config = cache_config(after) or cache_config(before)
    created = sig.CONNECTOR_CREATED.findall(log or "")
    if d.prefix_queries == 0 and d.external_queries == 0:
        verdict: Verdict = "no-traffic"
        causes = [Cause(code="no-traffic",
                        message="no prompt tokens were queried between the two scrapes: send "
                                "traffic while verifying (vllm bench serve --dataset-name "
                                "prefix_repetition)",
                        evidence={"requests": d.requests})]
    elif not (counter_present(before, sig.EXTERNAL_QUERIES)
              or counter_present(after, sig.EXTERNAL_QUERIES)):
        verdict = "no-external-hits"
        causes = [Cause(code="no-external-metrics",
                        message="this server exposes no vllm:external_prefix_cache_* counters "
                                "(older vLLM), so connector hits cannot be read from /metrics; "
                                "check the connector's own log lines instead",
                        evidence={"prefix_queries": d.prefix_queries})]
    elif d.external_hits > 0:
        verdict, causes = "serving-hits", []
        if d.offload_load_bytes == 0 and counter_present(after, sig.OFFLOAD_LOAD_BYTES):
            notes.append("external hits rose but no offload load bytes were counted")
    else:
        verdict, causes = "no-external-hits", _causes(d, config, log, created)
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
