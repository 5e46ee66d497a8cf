"""``compute(spec, deployment) -> SizingReport``: every figure ``kvtool size`` prints.

The arithmetic follows sizing.md §3-§4 (formulas F1-F11). Each step records an
:class:`ExplainLine` with the formula and the numbers put into it, so ``--explain`` shows
exactly the computation that produced the table, not a second copy of it.
"""

from __future__ import annotations

from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from kvtool.errors import KvtoolError
from kvtool.sizing import arithmetic as ar
from kvtool.sizing.deployment import Deployment
from kvtool.sizing.dtypes import kv_dtype_bytes, model_dtype_bytes
from kvtool.sizing.facts import SizingFacts, sizing_facts
from kvtool.sizing.spec import AttentionKind, ModelSpec

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


def _num(value: Fraction) -> Number:
    return int(value) if value.denominator == 1 else float(value)


def _fmt(value: Number | Fraction) -> str:
    if isinstance(value, Fraction):
        value = _num(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")


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
        if group.kind is not AttentionKind.MLA and (kv % tp if kv >= tp else tp % kv):
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


def compute(spec: ModelSpec, dep: Deployment, facts: SizingFacts | None = None) -> SizingReport:
    """All sizing figures for ``spec`` served as ``dep``; KvtoolError on impossible splits."""
    facts = facts or sizing_facts()
    _check_parallelism(spec, dep)
    lines: list[ExplainLine] = []
    warnings: list[SizingWarning] = []
    assumptions = list(spec.assumptions)

    def explain(label: str, formula: str, value: Number | Fraction | str) -> None:
        lines.append(
            ExplainLine(
                label=label, formula=formula, value=value if isinstance(value, str) else _fmt(value)
            )
        )

    def warn(code: str, message: str) -> None:
        warnings.append(SizingWarning(code=code, message=message))

    tp, pp, dcp = dep.tp, dep.pp, dep.dcp
    model_dtype = dep.dtype or spec.dtype
    b = kv_dtype_bytes(dep.kv_cache_dtype, model_dtype)
    block = dep.block_size or facts.default_block_size
    if dep.block_size is None:
        assumptions.append(f"block size {block} (vLLM default; pass --block-size)")
    explain(
        "KV element bytes", f"--kv-cache-dtype {dep.kv_cache_dtype} (model dtype {model_dtype})", b
    )

    # F1/F2: bytes per token, logical, per TP rank (all layers), all ranks.
    logical = tp_rank = full_logical = 0
    for g in spec.attention:
        per_layer_logical = g.logical_elements_per_token_per_layer() * b
        per_layer_rank = g.elements_per_token_per_layer(tp) * b
        logical += g.num_layers * per_layer_logical
        tp_rank += g.num_layers * per_layer_rank
        if g.kind is not AttentionKind.SLIDING:
            full_logical += g.num_layers * per_layer_logical
        if g.kind is AttentionKind.MLA:
            shape = f"(kv_lora_rank + qk_rope_head_dim = {g.head_size_k}) x {b}"
        else:
            shape = f"2 x {g.num_kv_heads} kv heads x {g.head_size_k} head_dim x {b}"
        explain(
            f"{g.kind.value} attention, {g.num_layers} layers",
            f"{g.num_layers} x {shape}"
            + (f"  (window {g.sliding_window})" if g.sliding_window else ""),
            g.num_layers * per_layer_logical,
        )
        if g.kind is not AttentionKind.MLA and g.num_kv_heads < tp:
            warn(
                "kv-head-replication",
                f"{g.num_kv_heads} KV heads < --tp {tp}: each head is replicated "
                f"{tp // g.num_kv_heads}x, "
                "and every offload tier stores every replica",
            )
    all_ranks = tp_rank * tp
    per_rank = Fraction(tp_rank, pp * dcp)
    explain("KV bytes per token (whole model)", "sum of the attention groups above", logical)
    explain(
        "KV bytes per token per rank",
        f"layers on one rank with max(1, kv_heads // {tp}) heads, / (pp {pp} x dcp {dcp})",
        per_rank,
    )
    explain("KV bytes per token, all ranks", f"{_fmt(tp_rank)} x tp {tp}", all_ranks)
    if spec.is_mla and tp > 1:
        warn(
            "mla-latent-replicated",
            f"MLA keeps the whole latent on every TP rank: GPU bytes are {tp}x the model figure; "
            "native offload stores one copy only with the CUDA single-node replicated layout "
            "(--no-mla-dedup otherwise) and LMCache MP stores one copy per server",
        )
    if spec.has_sliding_window:
        explain(
            "KV bytes per token, full-attention layers only",
            "non-sliding groups only",
            full_logical,
        )
        warn(
            "sliding-window-offload",
            "offload tiers store every layer for every token (conservative); the GPU keeps "
            "only the window for sliding layers, so GPU residency per sequence is much smaller",
        )

    # Recurrent state (Mamba / GDN): constant per sequence, one snapshot per block stored.
    conv_b = model_dtype_bytes(model_dtype, "model dtype")
    ssm_b = (
        model_dtype_bytes(dep.mamba_ssm_dtype, "--mamba-ssm-dtype")
        if dep.mamba_ssm_dtype
        else conv_b
    )
    state_rank = 0
    for s in spec.states:
        conv, ssm = s.state_elements_per_rank(tp)
        bytes_layer = conv * conv_b + ssm * ssm_b
        state_rank += s.num_layers * bytes_layer
        explain(
            f"{s.kind} state, {s.num_layers} layers (per rank)",
            f"{s.num_layers} x (conv {conv:,} x {conv_b} + ssm {ssm:,} x {ssm_b})",
            s.num_layers * bytes_layer,
        )
    state_rank_pp = state_rank // pp
    state_all = state_rank * tp
    amortised: float | None = None
    if spec.states:
        amortised = float(per_rank) + state_rank_pp / block
        explain(
            "amortised bytes per token per rank",
            f"{_fmt(per_rank)} + {state_rank_pp:,} / block {block}",
            amortised,
        )
        warn(
            "hybrid-block-size",
            "vLLM picks a larger unified block size for attention+state hybrids and pads "
            "pages; pass the block size from the vLLM log with --block-size, and use an "
            "LMCache chunk that is a multiple of it",
        )

    bytes_per_block = per_rank * block
    explain(
        "bytes per block per rank (attention pages)",
        f"block {block} x {_fmt(per_rank)}",
        bytes_per_block,
    )

    # Native offload (F2): the flag is the TP-wide total in GiB.
    mla_only = spec.is_mla and all(g.kind is AttentionKind.MLA for g in spec.attention)
    stored_bpt = tp_rank if (mla_only and dep.mla_dedup) else all_ranks
    bpc = facts.native_offload_blocks_per_chunk
    stored_per_block = block * stored_bpt + state_all
    chunk = ar.native_chunk_bytes(stored_per_block, bpc, facts.native_offload_alignment_bytes)
    tokens_per_chunk = block * bpc
    explain(
        "native offload chunk",
        f"round_up(block {block} x {_fmt(stored_bpt)} stored B/token"
        + (f" + state {state_all:,}" if state_all else "")
        + f", {facts.native_offload_alignment_bytes})",
        chunk,
    )

    context = dep.context_len or spec.max_position_embeddings
    if dep.context_len is None and context is not None:
        assumptions.append(
            f"context length {context} = max_position_embeddings (pass --context-len)"
        )

    # Where the CPU tier size comes from, in priority order.
    util = dep.utilization if dep.utilization is not None else facts.kaito_default_utilization
    cpu_tier: float | None = None
    basis: str | None = None
    if dep.cpu_tier_gib is not None:
        cpu_tier, basis = dep.cpu_tier_gib, "--cpu-tier-gib"
    elif dep.host_ram_gib is not None:
        cpu_tier, basis = dep.host_ram_gib * util, f"--host-ram-gib x utilization {util}"
    elif dep.sessions is not None and context is not None:
        cpu_tier = ar.native_size_gib_for_tokens(
            dep.sessions * context, chunk, tokens_per_chunk, facts.gib_bytes
        )
        basis = f"{dep.sessions} sessions x {context} tokens"
    if cpu_tier is not None:
        explain("CPU tier (TP-wide total)", basis or "", f"{cpu_tier:.4g} GiB")

    cpu_tokens = cpu_sessions = None
    per_rank_size = lmc_inproc = None
    if cpu_tier is not None:
        cpu_tokens = ar.native_tokens(cpu_tier, chunk, tokens_per_chunk, facts.gib_bytes)
        explain(
            "CPU tier tokens (native)",
            f"floor({cpu_tier:.4g} GiB x 2^30 / {chunk:,}) x {tokens_per_chunk}",
            cpu_tokens,
        )
        per_rank_size = ar.per_rank_gib(cpu_tier, tp)
        lmc_inproc = ar.per_rank_gib(cpu_tier, tp * pp)
        explain(
            "per-rank equivalent (SGLang, LMCache in-process)",
            f"{cpu_tier:.4g} / tp {tp} (x pp {pp} for LMCache)",
            f"{lmc_inproc:g} GiB",
        )
        if context is not None:
            cpu_sessions = cpu_tokens // context
            explain("sessions the CPU tier holds", f"{cpu_tokens:,} // {context:,}", cpu_sessions)
            if dep.sessions is not None and cpu_sessions < dep.sessions:
                warn(
                    "sessions-do-not-fit",
                    f"the CPU tier holds {cpu_sessions} sessions of {context} tokens, "
                    f"fewer than --sessions {dep.sessions}",
                )
        if dep.host_ram_gib is not None and cpu_tier > dep.host_ram_gib:
            warn(
                "cpu-tier-exceeds-host-ram",
                f"CPU tier {cpu_tier:.4g} GiB exceeds --host-ram-gib {dep.host_ram_gib:g}: "
                "the host will OOM",
            )

    # LMCache MP (F4/F5): one server per pod holds every rank's pieces (MLA: one writer).
    lmc_chunk = dep.lmcache_chunk_size or facts.lmcache_chunk_size
    if mla_only:
        pieces = pp * dcp
        piece_bpt = -(-tp_rank // pieces)
        piece_state = 0
    else:
        pieces = tp * pp
        piece_bpt = -(-tp_rank // pp)
        piece_state = state_rank_pp
    obj = ar.lmcache_object_bytes(
        lmc_chunk, piece_bpt, piece_state, facts.lmcache_object_alignment_bytes
    )
    explain(
        "LMCache MP object",
        f"round_up(chunk {lmc_chunk} x {piece_bpt:,}"
        + (f" + state {piece_state:,}" if piece_state else "")
        + f", {facts.lmcache_object_alignment_bytes}); {pieces} object(s) per chunk",
        obj,
    )
    if lmc_chunk % block:
        warn(
            "lmcache-chunk-not-multiple-of-block",
            f"LMCache chunk {lmc_chunk} is not a multiple of block size {block}: "
            "the MP adapter refuses to start",
        )

    l1_kaito = l1_whole = tok_kaito = tok_whole = resident = None
    if dep.host_ram_gib is not None:
        l1_kaito = ar.kaito_l1_gib(dep.host_ram_gib, util, tp)
        explain(
            "KAITO L1 (--l1-size-gb)",
            f"{dep.host_ram_gib:g} x {util} / tp {tp}",
            f"{l1_kaito!s} GiB",
        )
        tok_kaito = ar.lmcache_tokens(l1_kaito, obj, pieces, lmc_chunk, facts.gib_bytes)
        explain(
            "LMCache tokens at KAITO L1",
            f"floor({l1_kaito:g} GiB / ({obj:,} x {pieces})) x {lmc_chunk}",
            tok_kaito,
        )
        if tp > 1:
            warn(
                "kaito-l1-divided-by-tp",
                f"KAITO divides host RAM by TP although one LMCache MP server holds all "
                f"{tp} ranks' shards: the pod tier is {l1_kaito:g} GiB instead of "
                f"{dep.host_ram_gib * util:g} GiB ({tp}x smaller)",
            )
    if spec.architecture in facts.kaito_offload_disabled_architectures:
        warn("kaito-offload-disabled", f"KAITO turns CPU offload off for {spec.architecture}")
    if cpu_tier is not None:
        l1_whole = cpu_tier
        tok_whole = ar.lmcache_tokens(l1_whole, obj, pieces, lmc_chunk, facts.gib_bytes)
        explain(
            "LMCache tokens at the whole budget",
            f"floor({l1_whole:.4g} GiB / ({obj:,} x {pieces})) x {lmc_chunk}",
            tok_whole,
        )
    best = tok_kaito if tok_kaito is not None else tok_whole
    if best is not None:
        resident = int(best * facts.lmcache_eviction_watermark)
        explain(
            "LMCache tokens below the eviction watermark",
            f"{best:,} x {facts.lmcache_eviction_watermark}",
            resident,
        )

    # GPU tier and benchmark sizing (F7).
    gpu_blocks = dep.num_gpu_blocks
    if gpu_blocks is None and dep.gpu_kv_gib is not None:
        gpu_blocks = int(Fraction(round(dep.gpu_kv_gib * facts.gib_bytes)) // bytes_per_block)
        explain(
            "GPU blocks",
            f"floor({dep.gpu_kv_gib:g} GiB x 2^30 / {_fmt(bytes_per_block)})",
            gpu_blocks,
        )
    gpu_tokens = gpu_blocks * block if gpu_blocks is not None else None
    prefix_len = dep.prefix_len or context
    n_min = n_max = None
    if gpu_tokens is not None:
        explain("GPU tier tokens", f"{gpu_blocks:,} blocks x {block}", gpu_tokens)
        if cpu_tokens is not None and cpu_tokens < facts.cpu_tier_min_ratio_to_gpu * gpu_tokens:
            warn(
                "cpu-tier-small",
                f"the CPU tier ({cpu_tokens:,} tokens) is under "
                f"{facts.cpu_tier_min_ratio_to_gpu:g}x the GPU tier ({gpu_tokens:,}): "
                "offload will rarely help",
            )
        if cpu_tokens is not None and prefix_len is not None:
            n_min, n_max = ar.bench_num_prefixes(gpu_tokens, cpu_tokens, prefix_len)
            explain(
                "bench num_prefixes range",
                f"[2 x {gpu_tokens:,} // {prefix_len} + 1, {cpu_tokens:,} // {prefix_len}]",
                f"{n_min}..{n_max}",
            )
            if n_min > n_max:
                warn(
                    "bench-range-empty",
                    "no prefix count both overflows the GPU tier and fits the CPU tier "
                    f"at prefix length {prefix_len}",
                )

    # Per-request bytes and load times (F8-F11).
    pcie = dep.pcie_gbps or facts.pcie_effective_gbps
    nvme = dep.nvme_gbps or facts.nvme_read_gbps
    if dep.pcie_gbps is None:
        assumptions.append(
            f"PCIe {pcie:.2f} GB/s per GPU (Gen5 x16 x {facts.pcie_efficiency}; --pcie-gbps)"
        )
    if dep.nvme_gbps is None:
        assumptions.append(f"NVMe {nvme:g} GB/s read (--nvme-gbps)")
    req_rank = req_stored = gpu_resident = None
    t_dram = t_nvme = t_prefill = None
    if context is not None:
        req_rank = _num(per_rank * context + state_rank_pp)
        req_stored = stored_bpt * context + state_all
        resident_rank = Fraction(0)
        for g in spec.attention:
            tokens = min(context, g.sliding_window) if g.sliding_window else context
            resident_rank += Fraction(
                g.num_layers * g.elements_per_token_per_layer(tp) * b * tokens, pp * dcp
            )
        gpu_resident = _num(resident_rank + state_rank_pp)
        explain(
            "request bytes per rank",
            f"{context:,} tokens x {_fmt(per_rank)}"
            + (f" + state {state_rank_pp:,}" if state_rank_pp else ""),
            req_rank,
        )
        explain(
            "request bytes stored (native)",
            f"{context:,} x {stored_bpt:,}" + (f" + state {state_all:,}" if state_all else ""),
            req_stored,
        )
        if spec.has_sliding_window:
            explain(
                "GPU-resident request bytes per rank (HMA)",
                "sliding layers keep min(context, window) tokens",
                gpu_resident,
            )
        t_dram = ar.transfer_seconds(float(req_rank), pcie)
        t_nvme = ar.transfer_seconds(req_stored, nvme)
        explain(
            "load from DRAM (ranks in parallel)",
            f"{_fmt(req_rank)} B / {pcie:.2f} GB/s",
            f"{t_dram:.3f} s",
        )
        explain("load from NVMe", f"{req_stored:,} B / {nvme:g} GB/s", f"{t_nvme:.3f} s")
        if dep.prefill_tok_s is not None:
            t_prefill = context / dep.prefill_tok_s
            explain(
                "re-prefill", f"{context:,} / {dep.prefill_tok_s:g} tokens/s", f"{t_prefill:.3f} s"
            )

    return SizingReport(
        model=spec.name,
        model_source=spec.source,
        architecture=spec.architecture,
        architecture_class=spec.architecture_class,
        tp=tp,
        pp=pp,
        dcp=dcp,
        kv_cache_dtype=dep.kv_cache_dtype,
        kv_dtype_bytes=b,
        block_size=block,
        context_len=context,
        kv_bytes_per_token=logical,
        kv_bytes_per_token_per_rank=_num(per_rank),
        kv_bytes_per_token_all_ranks=all_ranks,
        kv_replication_factor=all_ranks / logical if logical else 1.0,
        kv_bytes_per_token_full_attention_only=full_logical,
        kv_bytes_per_token_stored_native=stored_bpt,
        bytes_per_block=_num(bytes_per_block),
        state_bytes_per_sequence_per_rank=state_rank,
        state_bytes_per_sequence=state_all,
        amortised_bytes_per_token_per_rank=amortised,
        request_bytes_per_rank=req_rank,
        request_bytes_stored=req_stored,
        gpu_resident_request_bytes_per_rank=gpu_resident,
        cpu_tier_gib=cpu_tier,
        cpu_tier_basis=basis,
        kv_offloading_size_gib=cpu_tier,
        native_chunk_bytes=chunk,
        cpu_tier_tokens=cpu_tokens,
        cpu_tier_sessions=cpu_sessions,
        per_rank_gib=per_rank_size,
        lmcache_max_local_cpu_size_gib=lmc_inproc,
        l1_capacity_gib=l1_kaito,
        l1_whole_budget_gib=l1_whole,
        lmcache_chunk_size=lmc_chunk,
        lmcache_object_bytes=obj,
        lmcache_pieces_per_chunk=pieces,
        lmcache_tokens_at_l1_capacity=tok_kaito,
        lmcache_tokens_at_whole_budget=tok_whole,
        lmcache_resident_tokens_at_watermark=resident,
        num_gpu_blocks=gpu_blocks,
        gpu_tier_tokens=gpu_tokens,
        bench_prefix_len=prefix_len if n_min is not None else None,
        bench_num_prefixes_min=n_min,
        bench_num_prefixes_max=n_max,
        pcie_gbps=pcie,
        nvme_gbps=nvme,
        prefill_tok_s=dep.prefill_tok_s,
        load_seconds_dram=t_dram,
        load_seconds_nvme=t_nvme,
        load_seconds_reprefill=t_prefill,
        assumptions=tuple(assumptions),
        warnings=tuple(warnings),
        explain=tuple(lines),
    )
