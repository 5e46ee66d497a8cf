"""``compute(spec, deployment) -> SizingReport``: every figure ``kvtool size`` prints.

The arithmetic goes in small steps, one per tier.
Each step records :class:`ExplainLine` entries with the formula and the numbers put into
it, so ``--explain`` shows the computation that produced the table, not a second copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

import msgspec

from kvtool.errors import KvtoolError
from kvtool.releases import load_release, resolve_target
from kvtool.sizing import arithmetic as ar
from kvtool.sizing.backends import gpu_capability
from kvtool.sizing.capacity import CapacityFormula, capacity_formula, logged_tokens
from kvtool.sizing.deployment import NATIVE_CONNECTOR, Deployment
from kvtool.sizing.dtypes import model_dtype_bytes
from kvtool.sizing.facts import SizingFacts, prefill_checkpoint_blocks, sizing_facts
from kvtool.sizing.hma import decide_hma
from kvtool.sizing.kv_groups import KvGroup
from kvtool.sizing.kv_plan import KvPlan, plan_kv_cache
from kvtool.sizing.results import (
    ExplainLine,
    KvCacheGroupRow,
    KvGroupPages,
    Number,
    SizingReport,
    SizingWarning,
)
from kvtool.sizing.scheduling import Scheduling, resolve_scheduling
from kvtool.sizing.spec import AttentionKind, ModelSpec

__all__ = ["ExplainLine", "SizingReport", "SizingWarning", "compute"]


def _num(value: Fraction) -> Number:
    return int(value) if value.denominator == 1 else float(value)


def _fmt(value: Number | Fraction) -> str:
    if isinstance(value, Fraction):
        value = _num(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")


def _plus_state(state: int) -> str:
    return f" + state {state:,}" if state else ""


@dataclass
class _Trace:
    """What a computation said along the way: arithmetic lines, warnings, assumptions."""

    lines: list[ExplainLine] = field(default_factory=list)
    warnings: list[SizingWarning] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def explain(self, label: str, formula: str, value: Number | Fraction | str) -> None:
        shown = value if isinstance(value, str) else _fmt(value)
        self.lines.append(ExplainLine(label=label, formula=formula, value=shown))

    def warn(self, code: str, message: str) -> None:
        self.warnings.append(SizingWarning(code=code, message=message))


@dataclass(frozen=True)
class _CacheBytes:
    """Bytes per token (and recurrent state per sequence) before any tier is sized.

    ``tp_rank`` is one TP rank over all layers; ``per_rank`` further divides by PP and DCP.
    ``stored`` is what a native offload tier keeps per token (one latent copy for MLA
    when deduplicated, every rank's shard otherwise).
    """

    logical: int
    tp_rank: int
    all_ranks: int
    per_rank: Fraction
    full_logical: int
    stored: int
    mla_only: bool
    state_rank: int  # one TP rank, all state layers
    state_rank_stage: int  # one worker (PP stage)
    state_all: int
    state_all_unpadded: int  # state_all before vLLM pads each state page to the block


def _check_parallelism(spec: ModelSpec, dep: Deployment) -> None:
    """Reject splits vLLM itself rejects, naming the config field and the flag."""
    tp = dep.tp
    if spec.num_attention_heads % tp:
        raise KvtoolError(
            f"--tp {tp} does not divide num_attention_heads {spec.num_attention_heads} "
            f"({spec.origin})"
        )
    for group in spec.attention:
        kv = group.num_kv_heads
        if not group.is_replicated and (kv % tp if kv >= tp else tp % kv):
            raise KvtoolError(
                f"--tp {tp} does not divide num_key_value_heads {kv} (nor the reverse) "
                f"({spec.origin})"
            )
    for state in spec.states:
        reason = state.split_error(tp)
        if reason is not None:
            raise KvtoolError(f"--tp {tp} does not divide {reason} ({spec.origin})")
    layers = spec.attention_layers + spec.state_layers
    if dep.pp > layers:
        raise KvtoolError(
            f"--pp {dep.pp} exceeds the model's {layers} cache-holding layers ({spec.origin})"
        )


def _attention_bytes(spec: ModelSpec, dep: Deployment, b: int, t: _Trace) -> tuple[int, int, int]:
    """(logical, one TP rank, full-attention-only logical) bytes per token (F1, F2)."""
    tp = dep.tp
    logical = tp_rank = full_logical = 0
    for g in spec.attention:
        per_layer_logical = g.logical_bytes_per_token_per_layer(b)
        logical += g.num_layers * per_layer_logical
        tp_rank += g.num_layers * g.bytes_per_token_per_layer(tp, b)
        if not g.is_local:
            full_logical += g.num_layers * per_layer_logical
        if g.kind is AttentionKind.INDEXER:
            shape = f"(index_head_dim {g.head_size_k} fp8 + scales = {g.token_bytes}) B"
        elif g.kind is AttentionKind.MLA and g.token_bytes is not None:
            shape = f"{g.token_bytes} B packed latent (kv_lora_rank + qk_rope_head_dim)"
        elif g.kind is AttentionKind.MLA:
            shape = f"(kv_lora_rank + qk_rope_head_dim = {g.head_size_k}) x {b}"
        elif g.head_size_k != g.head_size_v:
            shape = f"{g.num_kv_heads} kv heads x ({g.head_size_k} K + {g.head_size_v} V) x {b}"
        else:
            shape = f"2 x {g.num_kv_heads} kv heads x {g.head_size_k} head_dim x {b}"
        window = f"  (window {g.sliding_window})" if g.sliding_window else ""
        t.explain(
            f"{g.kind.value} cache, {g.num_layers} layers"
            if g.kind is AttentionKind.INDEXER
            else f"{g.kind.value} attention, {g.num_layers} layers",
            f"{g.num_layers} x {shape}{window}",
            g.num_layers * per_layer_logical,
        )
        if not g.is_replicated and g.num_kv_heads < tp:
            t.warn(
                "kv-head-replication",
                f"{g.num_kv_heads} KV heads < --tp {tp}: each head is replicated "
                f"{tp // g.num_kv_heads}x, and every offload tier stores every replica",
            )
    return logical, tp_rank, full_logical


def _state_bytes(spec: ModelSpec, dep: Deployment, model_dtype: str, t: _Trace) -> int:
    """Recurrent state bytes per sequence on one TP rank (Mamba / GDN)."""
    conv_b = model_dtype_bytes(model_dtype, "model dtype")
    ssm_dtype = dep.mamba_ssm_dtype or spec.ssm_state_dtype or model_dtype
    ssm_b = model_dtype_bytes(ssm_dtype, "SSM state dtype")
    total = 0
    for s in spec.states:
        conv, ssm = s.state_elements_per_rank(dep.tp)
        layer_bytes = conv * conv_b + ssm * ssm_b
        total += s.num_layers * layer_bytes
        t.explain(
            f"{s.kind} state, {s.num_layers} layers (per rank)",
            f"{s.num_layers} x (conv {conv:,} x {conv_b} + ssm {ssm:,} x {ssm_b} [{ssm_dtype}])",
            s.num_layers * layer_bytes,
        )
    return total


def _cache_bytes(spec: ModelSpec, dep: Deployment, b: int, dtype: str, t: _Trace) -> _CacheBytes:
    tp, pp, dcp = dep.tp, dep.pp, dep.dcp
    logical, tp_rank, full_logical = _attention_bytes(spec, dep, b, t)
    all_ranks = tp_rank * tp
    per_rank = Fraction(tp_rank, pp * dcp)
    t.explain("KV bytes per token (whole model)", "sum of the attention groups above", logical)
    t.explain(
        "KV bytes per token per rank",
        f"layers on one rank with max(1, kv_heads // {tp}) heads, / (pp {pp} x dcp {dcp})",
        per_rank,
    )
    t.explain("KV bytes per token, all ranks", f"{_fmt(tp_rank)} x tp {tp}", all_ranks)
    mla_only = spec.is_mla and all(g.is_replicated for g in spec.attention)
    if spec.is_mla and tp > 1:
        t.warn(
            "mla-latent-replicated",
            f"MLA keeps the whole latent on every TP rank: GPU bytes are {tp}x the model "
            "figure; native offload stores one copy only with the CUDA single-node replicated "
            "layout (--no-mla-dedup otherwise) and LMCache MP stores one copy per server",
        )
    if spec.has_sliding_window:
        t.explain(
            "KV bytes per token, full-attention layers only", "non-sliding groups", full_logical
        )
        t.warn(
            "sliding-window-offload",
            "offload tiers store every layer for every token (conservative); the GPU keeps "
            "only the window for sliding layers, so GPU residency per sequence is much smaller",
        )
    state_rank = _state_bytes(spec, dep, dtype, t)
    return _CacheBytes(
        logical=logical,
        tp_rank=tp_rank,
        all_ranks=all_ranks,
        per_rank=per_rank,
        full_logical=full_logical,
        stored=tp_rank if (mla_only and dep.mla_dedup) else all_ranks,
        mla_only=mla_only,
        state_rank=state_rank,
        state_rank_stage=state_rank // pp,
        state_all=state_rank * tp,
        state_all_unpadded=state_rank * tp,
    )


def _state_page(plan: KvPlan) -> int:
    return max((p.state_bytes for p in plan.pages if p.kind == "state"), default=0)


def _state_page_padded(plan: KvPlan) -> int:
    return plan.block.state_page_padded_bytes or _state_page(plan)


def _with_padded_state(
    cache: _CacheBytes, spec: ModelSpec, dep: Deployment, plan: KvPlan, t: _Trace
) -> _CacheBytes:
    """State bytes as vLLM allocates them: every state page padded to one attention page."""
    padded = plan.block.state_page_padded_bytes
    if not padded or padded == plan.block.state_page_bytes:
        return cache
    rank = spec.state_layers * padded
    t.explain(
        "state page padded to one attention page",
        f"{plan.block.state_page_bytes:,} B -> {padded:,} B per layer; x {spec.state_layers} "
        "layers per rank",
        rank,
    )
    return replace(cache, state_rank_stage=rank // dep.pp, state_all=rank * dep.tp)


def _state_blocks_per_sequence(spec: ModelSpec, plan: KvPlan, facts: SizingFacts) -> int:
    """State blocks one running sequence holds per state layer (align mode: 2 + checkpoint)."""
    if not spec.states:
        return 0
    if not plan.mamba_align:
        return 1
    return 2 + max(facts.state_prefill_checkpoint_blocks.get(s.kind, 0) for s in spec.states)


def _engine_block_size(plan: KvPlan) -> int:
    """The block size vLLM keeps once its KV cache groups are built.

    ``EngineCore._initialize_kv_caches`` sets ``cache_config.block_size`` to the smallest
    block of the groups that take part in prefix caching (every group kvtool models
    does): the chosen block, unless groups of their own block sizes (DeepSeek-V4's
    compressor states) go below it.
    """
    return min([g.block_size for g in plan.pool.groups] or [plan.block.block_size])


def _engine_block_reason(plan: KvPlan) -> str:
    engine = _engine_block_size(plan)
    if engine == plan.block.block_size:
        return plan.block.reason
    return (
        f"{engine}, the smallest KV cache group block (vLLM keeps the smallest group's block "
        f"once the groups are built; the attention block is {plan.block.block_size}: "
        f"{plan.block.reason})"
    )


def _group_row(group: KvGroup) -> KvCacheGroupRow:
    return KvCacheGroupRow(
        kind=group.kind,
        layers=group.layers,
        layer_slots=group.slots,
        block_size=group.block_size,
        page_bytes=group.page_bytes,
        window=group.window,
        layer_pages=tuple(
            KvGroupPages(layers=layers, page_bytes=page) for page, layers in group.layer_pages
        ),
    )


def _explain_pool(plan: KvPlan, t: _Trace) -> None:
    pool = plan.pool
    kinds = ", ".join(
        f"{g.kind} x{g.layers}"
        + (f" (block {g.block_size})" if g.block_size != plan.block.block_size else "")
        for g in pool.groups
    )
    t.explain(
        f"KV cache groups ({len(pool.groups)})",
        kinds,
        f"pool block {pool.pool_block_bytes:,} B",
    )


@dataclass(frozen=True)
class _CpuTier:
    size_gib: float | None
    basis: str | None
    chunk_bytes: int
    chunks: int | None
    tokens_per_chunk: tuple[int, ...]  # per offloaded KV cache group
    tokens: int | None
    sessions: int | None


def _check_native_offload_blocks(
    spec: ModelSpec, dep: Deployment, plan: KvPlan, context: int | None
) -> None:
    """Refuse what vLLM's native offloading refuses at start-up: a state hybrid without
    prefix caching.

    Without prefix caching a state group's block is the whole ``max_model_len``, and the
    hash block of several groups is the LCM of their blocks; ``build_offloading_config``
    asserts that every offloaded group's block is a multiple of it, which an attention
    block holds only when ``max_model_len`` divides it.
    """
    if dep.kv_connector != NATIVE_CONNECTOR or dep.prefix_caching or context is None:
        return
    block = plan.block.block_size
    if spec.states and spec.attention and block % context:
        raise KvtoolError(
            f"vLLM's native offloading ({NATIVE_CONNECTOR}) needs prefix caching for "
            f"{spec.name}: without it a state group's block is max_model_len ({context}) "
            f"tokens, which the {block}-token attention block is not a multiple of "
            "(build_offloading_config asserts it); serve it with --enable-prefix-caching"
        )


def _stored_copies(spec: ModelSpec, dep: Deployment) -> int:
    """Copies of one block the native tier stores: every worker's, or one for replicated MLA.

    vLLM 0.32 ``build_offloading_config``: the latent is stored once where every TP rank
    holds the same pages (MLA, TP only, one node); otherwise each of the world's workers
    stores its own block (``CPUOffloadingSpec``).
    """
    # every TP rank holds the same pages only for pure MLA (a sharded state breaks it);
    # DeepSeek-V4's caches (latents, their sliding windows, compressor states, indexer
    # keys) are all one vector per token on every rank (kv_tp_replicas = TP)
    mla_only = spec.compressed_mla is not None or (
        spec.is_mla and not spec.states and all(g.is_replicated for g in spec.attention)
    )
    if mla_only and dep.mla_dedup and dep.tp > 1 and dep.pp == 1 and dep.dcp == 1:
        return 1
    return dep.tp * dep.pp


def _native_tier(
    spec: ModelSpec,
    dep: Deployment,
    plan: KvPlan,
    context: int | None,
    util: float,
    facts: SizingFacts,
    t: _Trace,
) -> _CpuTier:
    """The native CPU tier (F2): ``--kv-offloading-size`` is the TP-wide total in GiB.

    One chunk is one pool block of every worker (``round_up(pool block x copies x
    blocks_per_chunk, 4096)``), stored per (block hash, group): with several KV cache
    groups a token takes a chunk share in each.
    """
    bpc = facts.native_offload_blocks_per_chunk
    copies = _stored_copies(spec, dep)
    pool_block = plan.pool.pool_block_bytes
    chunk = ar.native_chunk_bytes(pool_block * copies, bpc, facts.native_offload_alignment_bytes)
    per_group = tuple(g.block_size * bpc for g in plan.pool.groups)
    t.explain(
        "native offload chunk (per block hash and group)",
        f"round_up(pool block {pool_block:,} x {copies} stored cop{'y' if copies == 1 else 'ies'}"
        f" x {bpc} block, {facts.native_offload_alignment_bytes})",
        chunk,
    )
    size: float | None = None
    basis: str | None = None
    if dep.cpu_tier_gib is not None:
        size, basis = dep.cpu_tier_gib, "--cpu-tier-gib"
    elif dep.host_ram_gib is not None:
        size, basis = dep.host_ram_gib * util, f"--host-ram-gib x utilization {util}"
    elif dep.sessions is not None and context is not None:
        chunks = dep.sessions * ar.native_chunks_for_tokens(context, per_group)
        size = chunks * chunk / facts.gib_bytes
        basis = f"{dep.sessions} sessions x {context} tokens"
    if size is None:
        return _CpuTier(None, None, chunk, None, per_group, None, None)
    t.explain("CPU tier (TP-wide total)", basis or "", f"{size:.6g} GiB")
    chunks = math.floor(size * facts.gib_bytes) // chunk
    t.explain("native offload chunks", f"floor({size:.6g} GiB x 2^30 / {chunk:,})", chunks)
    tokens = ar.native_group_tokens(chunks, per_group)
    shares = " + ".join(f"1/{n}" for n in per_group)
    t.explain(
        "CPU tier tokens (native)",
        f"floor({chunks:,} chunks / ({shares}) chunk per token over {len(per_group)} group(s))",
        tokens,
    )
    sessions = None
    if context is not None:
        sessions = chunks // ar.native_chunks_for_tokens(context, per_group)
        t.explain(
            "sessions the CPU tier holds",
            f"{chunks:,} // chunks per {context:,}-token session",
            sessions,
        )
        if dep.sessions is not None and sessions < dep.sessions:
            t.warn(
                "sessions-do-not-fit",
                f"the CPU tier holds {sessions} sessions of {context} tokens, "
                f"fewer than --sessions {dep.sessions}",
            )
    if dep.host_ram_gib is not None and size > dep.host_ram_gib:
        t.warn(
            "cpu-tier-exceeds-host-ram",
            f"CPU tier {size:.6g} GiB exceeds --host-ram-gib {dep.host_ram_gib:g}: the host "
            "will OOM",
        )
    return _CpuTier(size, basis, chunk, chunks, per_group, tokens, sessions)


@dataclass(frozen=True)
class _Lmcache:
    chunk: int
    object_bytes: int
    pieces: int
    l1_kaito: float | None
    tokens_kaito: int | None
    tokens_whole: int | None
    resident: int | None


def _lmcache_tier(
    spec: ModelSpec,
    dep: Deployment,
    cache: _CacheBytes,
    block: int,
    cpu_tier_gib: float | None,
    util: float,
    facts: SizingFacts,
    t: _Trace,
) -> _Lmcache:
    """LMCache MP (F4, F5): one server per pod stores every rank's piece (MLA: one writer)."""
    tp, pp, dcp = dep.tp, dep.pp, dep.dcp
    chunk = dep.lmcache_chunk_size or facts.lmcache_chunk_size
    if cache.mla_only:
        pieces, piece_state = pp * dcp, 0
    else:
        pieces, piece_state = tp * pp, cache.state_rank_stage
    piece_bpt = -(-cache.tp_rank // (pieces if cache.mla_only else pp))
    obj = ar.lmcache_object_bytes(
        chunk, piece_bpt, piece_state, facts.lmcache_object_alignment_bytes
    )
    t.explain(
        "LMCache MP object",
        f"round_up(chunk {chunk} x {piece_bpt:,}{_plus_state(piece_state)}, "
        f"{facts.lmcache_object_alignment_bytes}); {pieces} object(s) per chunk",
        obj,
    )
    if chunk % block:
        t.warn(
            "lmcache-chunk-not-multiple-of-block",
            f"LMCache chunk {chunk} is not a multiple of block size {block}: "
            "the MP adapter refuses to start",
        )
    if spec.architecture in facts.kaito_offload_disabled_architectures:
        t.warn("kaito-offload-disabled", f"KAITO turns CPU offload off for {spec.architecture}")
    l1_kaito = tokens_kaito = tokens_whole = None
    if dep.host_ram_gib is not None:
        l1_kaito = ar.kaito_l1_gib(dep.host_ram_gib, util, tp)
        t.explain(
            "KAITO L1 (--l1-size-gb)", f"{dep.host_ram_gib:g} x {util} / tp {tp}", f"{l1_kaito!s}"
        )
        tokens_kaito = ar.lmcache_tokens(l1_kaito, obj, pieces, chunk, facts.gib_bytes)
        t.explain(
            "LMCache tokens at KAITO L1",
            f"floor({l1_kaito:g} GiB / ({obj:,} x {pieces})) x {chunk}",
            tokens_kaito,
        )
        if tp > 1:
            t.warn(
                "kaito-l1-divided-by-tp",
                "KAITO divides host RAM by TP although one LMCache MP server holds all "
                f"{tp} ranks' shards: the pod tier is {l1_kaito:g} GiB instead of "
                f"{dep.host_ram_gib * util:g} GiB ({tp}x smaller)",
            )
    if cpu_tier_gib is not None:
        tokens_whole = ar.lmcache_tokens(cpu_tier_gib, obj, pieces, chunk, facts.gib_bytes)
        t.explain(
            "LMCache tokens at the whole budget",
            f"floor({cpu_tier_gib:.6g} GiB / ({obj:,} x {pieces})) x {chunk}",
            tokens_whole,
        )
    best = tokens_kaito if tokens_kaito is not None else tokens_whole
    resident = None
    if best is not None:
        resident = int(best * facts.lmcache_eviction_watermark)
        t.explain(
            "LMCache tokens below the eviction watermark",
            f"{best:,} x {facts.lmcache_eviction_watermark}",
            resident,
        )
    return _Lmcache(chunk, obj, pieces, l1_kaito, tokens_kaito, tokens_whole, resident)


@dataclass(frozen=True)
class _GpuTier:
    blocks: int | None
    tokens: int | None
    concurrency: float | None
    prefix_len: int | None
    bench_min: int | None
    bench_max: int | None


def _gpu_tier_and_bench(
    dep: Deployment,
    plan: KvPlan,
    sched: Scheduling,
    formula: CapacityFormula,
    context: int | None,
    cpu_tokens: int | None,
    facts: SizingFacts,
    t: _Trace,
) -> _GpuTier:
    """GPU tier blocks, tokens and concurrency as the release logs them, and the bench (F7).

    One block of vLLM's pool is one KV cache group's pages, so ``--num-gpu-blocks`` is read
    as vLLM's own number. A max-length request takes blocks in every group (a window's
    share grows with the tokens in flight: concurrent batches x --max-num-batched-tokens).
    """
    pool = plan.pool
    blocks = dep.num_gpu_blocks
    if blocks is None and dep.gpu_kv_gib is not None:
        blocks = pool.num_blocks(round(dep.gpu_kv_gib * facts.gib_bytes))
        t.explain(
            "GPU blocks",
            f"floor({dep.gpu_kv_gib:g} GiB x 2^30 / pool block {pool.pool_block_bytes:,})",
            blocks,
        )
    if blocks is None or context is None:
        return _GpuTier(blocks, None, None, None, None, None)
    in_flight = sched.in_flight_tokens(dep.pp)
    per_request = pool.blocks_per_request(
        formula.blocks, context, in_flight, plan.mamba_align,
        facts.state_prefill_checkpoint_blocks,
    )
    concurrency = blocks / per_request
    t.explain(
        "Maximum concurrency (vLLM's log)",
        f"{blocks:,} blocks / {per_request:,} blocks per {context:,}-token request over "
        f"{len(pool.groups)} group(s) ({formula.blocks}, vLLM {formula.release}; "
        f"{in_flight:,} tokens in flight)",
        f"{concurrency:.2f}x",
    )
    tokens = logged_tokens(
        formula, blocks, concurrency, context, len(pool.groups),
        min(g.block_size for g in pool.groups),
    )
    t.explain("GPU tier tokens (vLLM's GPU KV cache size)", formula.tokens, tokens)
    prefix_len = dep.prefix_len or context
    if cpu_tokens is None or prefix_len is None:
        return _GpuTier(blocks, tokens, concurrency, None, None, None)
    if cpu_tokens < facts.cpu_tier_min_ratio_to_gpu * tokens:
        t.warn(
            "cpu-tier-small",
            f"the CPU tier ({cpu_tokens:,} tokens) is under "
            f"{facts.cpu_tier_min_ratio_to_gpu:g}x the GPU tier ({tokens:,}): "
            "offload will rarely help",
        )
    n_min, n_max = ar.bench_num_prefixes(tokens, cpu_tokens, prefix_len)
    t.explain(
        "bench num_prefixes range",
        f"[2 x {tokens:,} // {prefix_len} + 1, {cpu_tokens:,} // {prefix_len}]",
        f"{n_min}..{n_max}",
    )
    if n_min > n_max:
        t.warn(
            "bench-range-empty",
            "no prefix count both overflows the GPU tier and fits the CPU tier "
            f"at prefix length {prefix_len}",
        )
    return _GpuTier(blocks, tokens, concurrency, prefix_len, n_min, n_max)


@dataclass(frozen=True)
class _Request:
    bytes_per_rank: Number | None = None
    bytes_stored: int | None = None
    gpu_resident_per_rank: Number | None = None
    dram_s: float | None = None
    nvme_s: float | None = None
    reprefill_s: float | None = None


def _request_and_load(
    spec: ModelSpec,
    dep: Deployment,
    cache: _CacheBytes,
    b: int,
    context: int | None,
    pcie: float,
    nvme: float,
    t: _Trace,
) -> _Request:
    """One request at the context length: bytes per tier and load times (F8-F11)."""
    if context is None:
        return _Request()
    per_rank = cache.per_rank * context + cache.state_rank_stage
    stored = cache.stored * context + cache.state_all
    resident = Fraction(cache.state_rank_stage)
    for g in spec.attention:
        tokens = min(context, g.sliding_window) if g.sliding_window else context
        layer_bytes = g.num_layers * g.bytes_per_token_per_layer(dep.tp, b) * tokens
        resident += Fraction(layer_bytes, dep.pp * dep.dcp)
    t.explain(
        "request bytes per rank",
        f"{context:,} tokens x {_fmt(cache.per_rank)}{_plus_state(cache.state_rank_stage)}",
        per_rank,
    )
    t.explain(
        "request bytes stored (native)",
        f"{context:,} x {cache.stored:,}{_plus_state(cache.state_all)}",
        stored,
    )
    if spec.has_sliding_window:
        t.explain(
            "GPU-resident request bytes per rank (HMA)",
            "sliding layers keep min(context, window) tokens",
            resident,
        )
    dram = ar.transfer_seconds(float(per_rank), pcie)
    disk = ar.transfer_seconds(stored, nvme)
    t.explain(
        "load from DRAM (ranks in parallel)",
        f"{_fmt(per_rank)} B / {pcie:.2f} GB/s",
        f"{dram:.3f} s",
    )
    t.explain("load from NVMe", f"{stored:,} B / {nvme:g} GB/s", f"{disk:.3f} s")
    prefill = None
    if dep.prefill_tok_s is not None:
        prefill = context / dep.prefill_tok_s
        t.explain("re-prefill", f"{context:,} / {dep.prefill_tok_s:g} tokens/s", f"{prefill:.3f} s")
    return _Request(_num(per_rank), stored, _num(resident), dram, disk, prefill)


def compute(spec: ModelSpec, dep: Deployment, facts: SizingFacts | None = None) -> SizingReport:
    """All sizing figures for ``spec`` served as ``dep``; KvtoolError on impossible splits."""
    facts = facts or sizing_facts()
    _check_parallelism(spec, dep)
    t = _Trace(assumptions=list(spec.assumptions))
    release = load_release(dep.vllm_version or resolve_target(None, None).version)
    facts = msgspec.structs.replace(
        facts,
        state_prefill_checkpoint_blocks=prefill_checkpoint_blocks(
            facts, release.version, gpu_capability(dep.gpu)
        ),
    )
    formula = capacity_formula(release.version)
    hma = decide_hma(spec, dep, release, facts, formula)
    sched = resolve_scheduling(dep, facts)

    plan = plan_kv_cache(spec, dep, facts, hma, formula.default_block_size)
    spec = plan.spec  # as the backend stores it
    t.assumptions.extend(plan.notes)
    model_dtype, b, block = plan.model_dtype, plan.kv_bytes, plan.block.block_size
    t.explain(
        "KV element bytes",
        f"--kv-cache-dtype {dep.kv_cache_dtype} -> {plan.kv_cache_dtype} ({model_dtype} model)",
        b,
    )
    t.explain("attention backend", f"--gpu {dep.gpu}", plan.backend.name)
    t.explain(
        "hybrid KV cache manager", hma.reason, "on" if hma.enabled else "off"
    )
    t.explain("block size", plan.block.reason, block)
    context = dep.context_len or spec.max_position_embeddings
    _check_native_offload_blocks(spec, dep, plan, context)
    if dep.context_len is None and context is not None:
        t.assumptions.append(f"context length {context} = max_position_embeddings (--context-len)")

    cache = _cache_bytes(spec, dep, b, model_dtype, t)
    cache = _with_padded_state(cache, spec, dep, plan, t)
    amortised = None
    if spec.states:
        amortised = float(cache.per_rank) + cache.state_rank_stage / block
        t.explain(
            "amortised bytes per token per rank",
            f"{_fmt(cache.per_rank)} + {cache.state_rank_stage:,} padded state / block {block}",
            amortised,
        )
    bytes_per_block = plan.pool.pool_block_bytes
    _explain_pool(plan, t)

    util = dep.utilization if dep.utilization is not None else facts.kaito_default_utilization
    if dep.utilization is None and dep.host_ram_gib is not None:
        t.assumptions.append(f"utilization {util} of --host-ram-gib (KAITO default; --utilization)")
    cpu = _native_tier(spec, dep, plan, context, util, facts, t)
    per_rank_gib = lmcache_inproc_gib = None
    if cpu.size_gib is not None:
        per_rank_gib = ar.per_rank_gib(cpu.size_gib, dep.tp)
        lmcache_inproc_gib = ar.per_rank_gib(cpu.size_gib, dep.tp * dep.pp)
        t.explain(
            "per-rank equivalent (SGLang; LMCache in-process per TP x PP rank)",
            f"{cpu.size_gib:.6g} / tp {dep.tp}; / (tp {dep.tp} x pp {dep.pp})",
            f"{per_rank_gib:g}; {lmcache_inproc_gib:g} GiB",
        )
    lmc = _lmcache_tier(spec, dep, cache, block, cpu.size_gib, util, facts, t)
    gpu = _gpu_tier_and_bench(dep, plan, sched, formula, context, cpu.tokens, facts, t)

    pcie = dep.pcie_gbps or facts.pcie_effective_gbps
    nvme = dep.nvme_gbps or facts.nvme_read_gbps
    if dep.pcie_gbps is None:
        t.assumptions.append(
            f"PCIe {pcie:.2f} GB/s per GPU (Gen5 x16 x {facts.pcie_efficiency}; --pcie-gbps)"
        )
    if dep.nvme_gbps is None:
        t.assumptions.append(f"NVMe {nvme:g} GB/s read (--nvme-gbps)")
    req = _request_and_load(spec, dep, cache, b, context, pcie, nvme, t)

    return SizingReport(
        model=spec.name,
        model_source=spec.source,
        architecture=spec.architecture,
        architecture_class=spec.architecture_class,
        tp=dep.tp,
        pp=dep.pp,
        dcp=dep.dcp,
        kv_cache_dtype=dep.kv_cache_dtype,
        kv_cache_dtype_resolved=plan.kv_cache_dtype,
        kv_dtype_bytes=b,
        model_dtype=model_dtype,
        gpu=dep.gpu,
        attention_backend=plan.backend.name,
        block_size=_engine_block_size(plan),
        block_size_reason=_engine_block_reason(plan),
        kv_cache_groups=tuple(_group_row(g) for g in plan.pool.groups),
        pool_block_bytes=plan.pool.pool_block_bytes,
        state_page_bytes=plan.block.state_page_bytes or _state_page(plan),
        state_page_padded_bytes=_state_page_padded(plan),
        state_pages_per_sequence=_state_blocks_per_sequence(spec, plan, facts),
        context_len=context,
        kv_bytes_per_token=cache.logical,
        kv_bytes_per_token_per_rank=_num(cache.per_rank),
        kv_bytes_per_token_all_ranks=cache.all_ranks,
        kv_replication_factor=cache.all_ranks / cache.logical if cache.logical else 1.0,
        kv_bytes_per_token_full_attention_only=cache.full_logical,
        kv_bytes_per_token_stored_native=cache.stored,
        bytes_per_block=bytes_per_block,
        hma_enabled=hma.enabled,
        hma_reason=hma.reason,
        vllm_release=release.version,
        max_num_batched_tokens=sched.max_num_batched_tokens,
        max_num_seqs=sched.max_num_seqs,
        async_scheduling=sched.async_scheduling,
        max_in_flight_tokens=sched.in_flight_tokens(dep.pp),
        max_concurrency=gpu.concurrency,
        native_chunks=cpu.chunks,
        native_tokens_per_chunk=cpu.tokens_per_chunk,
        state_bytes_per_sequence_per_rank=cache.state_rank,
        state_bytes_per_sequence=cache.state_all_unpadded,
        state_bytes_allocated_per_sequence=cache.state_all,
        amortised_bytes_per_token_per_rank=amortised,
        request_bytes_per_rank=req.bytes_per_rank,
        request_bytes_stored=req.bytes_stored,
        gpu_resident_request_bytes_per_rank=req.gpu_resident_per_rank,
        cpu_tier_gib=cpu.size_gib,
        cpu_tier_basis=cpu.basis,
        kv_offloading_size_gib=cpu.size_gib,
        native_chunk_bytes=cpu.chunk_bytes,
        cpu_tier_tokens=cpu.tokens,
        cpu_tier_sessions=cpu.sessions,
        per_rank_gib=per_rank_gib,
        lmcache_max_local_cpu_size_gib=lmcache_inproc_gib,
        l1_capacity_gib=lmc.l1_kaito,
        l1_whole_budget_gib=cpu.size_gib,
        lmcache_chunk_size=lmc.chunk,
        lmcache_object_bytes=lmc.object_bytes,
        lmcache_pieces_per_chunk=lmc.pieces,
        lmcache_tokens_at_l1_capacity=lmc.tokens_kaito,
        lmcache_tokens_at_whole_budget=lmc.tokens_whole,
        lmcache_resident_tokens_at_watermark=lmc.resident,
        num_gpu_blocks=gpu.blocks,
        gpu_tier_tokens=gpu.tokens,
        bench_prefix_len=gpu.prefix_len,
        bench_num_prefixes_min=gpu.bench_min,
        bench_num_prefixes_max=gpu.bench_max,
        pcie_gbps=pcie,
        nvme_gbps=nvme,
        prefill_tok_s=dep.prefill_tok_s,
        load_seconds_dram=req.dram_s,
        load_seconds_nvme=req.nvme_s,
        load_seconds_reprefill=req.reprefill_s,
        assumptions=tuple(t.assumptions),
        warnings=tuple(t.warnings),
        explain=tuple(t.lines),
    )
