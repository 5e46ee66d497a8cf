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


class KvGroupPages(BaseModel):
    """``layers`` layers of a KV cache group whose page is ``page_bytes`` on one rank."""

    model_config = ConfigDict(frozen=True)

    layers: int
    page_bytes: int


class KvCacheGroupRow(BaseModel):
    """One vLLM KV cache group on one worker: its layers share a block table.

    ``layer_slots`` is the group size vLLM lays pages out for (a short group is padded);
    ``page_bytes`` is one layer's page, padded as vLLM allocates it. When the group's
    layers differ in page size (vLLM's UniformTypeKVCacheSpecs: per-layer KV heads, or
    sparse MLA's latent and DSA indexer pages) ``page_bytes`` is the largest and
    ``layer_pages`` lists each size; it is empty otherwise.
    """

    model_config = ConfigDict(frozen=True)

    kind: str
    layers: int
    layer_slots: int
    block_size: int
    page_bytes: int
    window: int | None
    layer_pages: tuple[KvGroupPages, ...] = ()


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
    kv_cache_dtype_resolved: str
    kv_dtype_bytes: int
    model_dtype: str
    gpu: str
    attention_backend: str
    block_size: int
    block_size_reason: str
    kv_cache_groups: tuple[KvCacheGroupRow, ...]
    pool_block_bytes: int  # one block of vLLM's shared pool: the largest group's pages
    context_len: int | None

    kv_bytes_per_token: int
    kv_bytes_per_token_per_rank: Number
    kv_bytes_per_token_all_ranks: int
    kv_replication_factor: float
    kv_bytes_per_token_full_attention_only: int
    kv_bytes_per_token_stored_native: int
    bytes_per_block: int  # one block of vLLM's pool on one rank (one group's pages under HMA)
    hma_enabled: bool  # vLLM's hybrid KV cache manager, as the release decides it
    hma_reason: str
    vllm_release: str  # the release whose rules these figures follow
    max_num_batched_tokens: int
    max_num_seqs: int
    async_scheduling: bool
    max_in_flight_tokens: int  # concurrent batches x max_num_batched_tokens
    max_concurrency: float | None  # vLLM's "Maximum concurrency for N tokens per request"
    native_chunks: int | None  # chunks the native CPU tier holds
    native_tokens_per_chunk: tuple[int, ...]  # per KV cache group (one chunk per hash, group)
    state_bytes_per_sequence_per_rank: int
    state_bytes_per_sequence: int  # unpadded recurrent state, all ranks
    state_bytes_allocated_per_sequence: int  # padded state pages, all ranks (one snapshot)
    state_page_bytes: int  # one state layer's page on one rank, unpadded
    state_page_padded_bytes: int  # as vLLM allocates it (one attention page)
    state_pages_per_sequence: int  # align mode (prefix caching): 2 + checkpoint blocks
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
