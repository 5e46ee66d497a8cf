"""The output of ``kvtool size``: one :class:`SizingReport`, its warnings and its arithmetic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

Number = int | float


class ExplainLine(BaseModel):
    """One step of the arithmetic: what, how (with the numbers), and the result."""

    model_config = ConfigDict(frozen=True)

    label: str
    formula: str
    value: str


class SizingWarning(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class SizingReport(BaseModel):
    """The figures for one model on one deployment. ``None`` = an input it needs was not given.

    Units: bytes unless the name says ``_gib`` (2^30 bytes, as vLLM and LMCache use),
    ``_gbps`` (10^9 bytes/s) or ``_seconds``. "per rank" is one worker process (one GPU);
    "all ranks" sums every worker and counts replicated KV heads once per replica.
    """

    model_config = ConfigDict(frozen=True)

    model: str
    model_source: str
    architecture: str
    architecture_class: str
    tp: int
    pp: int
    dcp: int
    kv_cache_dtype: str
    kv_dtype_bytes: int
    block_size: int
    context_len: int | None

    kv_bytes_per_token: int
    kv_bytes_per_token_per_rank: Number
    kv_bytes_per_token_all_ranks: int
    kv_replication_factor: float
    kv_bytes_per_token_full_attention_only: int
    kv_bytes_per_token_stored_native: int
    bytes_per_block: Number
    state_bytes_per_sequence_per_rank: int
    state_bytes_per_sequence: int
    amortised_bytes_per_token_per_rank: float | None
    request_bytes_per_rank: Number | None
    request_bytes_stored: int | None
    gpu_resident_request_bytes_per_rank: Number | None

    cpu_tier_gib: float | None
    cpu_tier_basis: str | None
    kv_offloading_size_gib: float | None
    native_chunk_bytes: int
    cpu_tier_tokens: int | None
    cpu_tier_sessions: int | None
    per_rank_gib: float | None
    lmcache_max_local_cpu_size_gib: float | None

    l1_capacity_gib: float | None
    l1_whole_budget_gib: float | None
    lmcache_chunk_size: int
    lmcache_object_bytes: int
    lmcache_pieces_per_chunk: int
    lmcache_tokens_at_l1_capacity: int | None
    lmcache_tokens_at_whole_budget: int | None
    lmcache_resident_tokens_at_watermark: int | None

    num_gpu_blocks: int | None
    gpu_tier_tokens: int | None
    bench_prefix_len: int | None
    bench_num_prefixes_min: int | None
    bench_num_prefixes_max: int | None

    pcie_gbps: float
    nvme_gbps: float
    prefill_tok_s: float | None
    load_seconds_dram: float | None
    load_seconds_nvme: float | None
    load_seconds_reprefill: float | None

    assumptions: tuple[str, ...]
    warnings: tuple[SizingWarning, ...]
    explain: tuple[ExplainLine, ...]
