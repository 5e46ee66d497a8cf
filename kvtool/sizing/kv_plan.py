"""How vLLM 0.32 lays out one worker's KV cache for a model: dtypes, backend, block, groups.

:func:`plan_kv_cache` strings the steps together in vLLM's order: resolve the model and
KV dtypes (``auto``), pick the attention backend for the GPU, choose the block size
(:mod:`kvtool.sizing.block_size`), then build the KV cache groups and the pool block
(:mod:`kvtool.sizing.kv_groups`). ``kvtool size``, ``kvtool launch`` and the audit's
sizing rules all reach this through :func:`kvtool.sizing.compute`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec

from kvtool.errors import KvtoolError
from kvtool.sizing.backends import (
    AttentionFamily,
    Backend,
    backend_by_name,
    gpu_capability,
    layer_backend,
    select_backend,
)
from kvtool.sizing.block_size import BlockChoice, choose_block_size
from kvtool.sizing.compressed_mla import DS_MLA_STATE_BYTES, layer_caches
from kvtool.sizing.deployment import Deployment
from kvtool.sizing.dtypes import kv_dtype_bytes
from kvtool.sizing.facts import SizingFacts
from kvtool.sizing.hma import HmaChoice
from kvtool.sizing.kv_groups import KvPool, build_pool
from kvtool.sizing.layer_pages import (
    LayerPages,
    as_full_attention,
    layer_page_kind,
    layer_pages,
)
from kvtool.sizing.packed_groups import packed_pool
from kvtool.sizing.spec import AttentionKind, CompressedMlaLayout, ModelSpec

# vLLM's "auto" model dtype on CUDA downcasts a float32 checkpoint to the platform's first
# supported dtype, bfloat16 (config/model.py _resolve_auto_dtype; platforms/cuda.py).
FLOAT32_NAMES = ("float32", "fp32", "float")
CUDA_PREFERRED_DTYPE = "bfloat16"
# The backend vLLM 0.32 runs DeepSeek-V4 with on CUDA (FlashMLA sparse).
DSV4_BACKEND = "FLASHMLA_SPARSE"
DSV4_SOURCE = (
    "https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/models/deepseek_v4/attention.py"
)


@dataclass(frozen=True)
class KvPlan:
    spec: ModelSpec  # the model as the backend stores it (packed latent bytes filled in)
    model_dtype: str
    kv_cache_dtype: str  # resolved: "auto" only when it means the model dtype
    kv_bytes: int
    backend: Backend
    pages: tuple[LayerPages, ...]
    block: BlockChoice
    pool: KvPool
    mamba_align: bool  # prefix caching: state groups hold align-mode blocks per request
    notes: tuple[str, ...]  # what was resolved, for the assumptions list
    hma: HmaChoice


def resolve_model_dtype(spec: ModelSpec, dep: Deployment) -> tuple[str, str | None]:
    """The dtype vLLM runs the model in, and a note when it differs from the config's."""
    if dep.dtype is not None:
        return dep.dtype, None
    if spec.dtype.lower() in FLOAT32_NAMES:
        return CUDA_PREFERRED_DTYPE, (
            f"config dtype {spec.dtype}: vLLM's --dtype auto runs it in "
            f"{CUDA_PREFERRED_DTYPE} on CUDA (float32 checkpoints are downcast)"
        )
    return spec.dtype, None


def resolve_kv_cache_dtype(spec: ModelSpec, dep: Deployment) -> tuple[str, str | None]:
    """``--kv-cache-dtype`` with ``auto`` resolved the way vLLM 0.32 resolves it."""
    if dep.kv_cache_dtype == "auto" and spec.auto_kv_cache_dtype_by_gpu:
        by_gpu = dict(spec.auto_kv_cache_dtype_by_gpu).get(gpu_capability(dep.gpu))
        if by_gpu is not None:
            return by_gpu, (
                f"--kv-cache-dtype auto is {by_gpu} for {spec.architecture} on {dep.gpu}: "
                "vLLM's per-model config hook (model_executor/models/config.py) sets it"
            )
    if dep.kv_cache_dtype != "auto" or spec.checkpoint_kv_cache_dtype is None:
        return dep.kv_cache_dtype, None
    return spec.checkpoint_kv_cache_dtype, (
        f"--kv-cache-dtype auto is {spec.checkpoint_kv_cache_dtype}: the checkpoint "
        f"declares its KV cache quantization ({spec.checkpoint_kv_cache_source})"
    )


def attention_family(spec: ModelSpec) -> AttentionFamily:
    if spec.is_sparse_mla:
        return "sparse_mla"
    return "mla" if spec.is_mla else "attention"


def _as_stored(spec: ModelSpec, backend: Backend, kv_dtype: str) -> tuple[ModelSpec, str | None]:
    """``spec`` with the latent bytes of a backend that packs it (FlashMLA-sparse fp8_ds_mla)."""
    packed = backend.packed_token_bytes(kv_dtype) if spec.is_sparse_mla else None
    if packed is None:
        return spec, None
    attention = tuple(
        msgspec.structs.replace(g, token_bytes=packed) if g.kind is AttentionKind.MLA else g
        for g in spec.attention
    )
    note = (
        f"{backend.name} stores --kv-cache-dtype {kv_dtype} as fp8_ds_mla: "
        f"{packed} B per token per layer"
    )
    return msgspec.structs.replace(spec, attention=attention), note


def _check_layer_kernels(
    spec: ModelSpec, pool: KvPool, backend: Backend, capability: int, kv_dtype: str, block: int
) -> None:
    """Refuse a layout vLLM cannot start: layers whose kernels take blocks their group lacks.

    A backend may run some head size in fixed kernel blocks (FA4's fp8 kernel on SM90 for
    head size 512) that vLLM's default block, chosen from the model's head_dim, does not
    account for; the worker then finds no kernel block dividing the group's block
    (``select_common_block_size``) and fails.
    """
    for group in spec.attention:
        runs_on = backend.for_layers(capability, group.head_size_k, kv_dtype)
        if runs_on is backend:
            continue
        kind = layer_page_kind(group.kind)
        blocked = [
            g for g in pool.groups if g.kind == kind and not runs_on.accepts_block(g.block_size)
        ]
        if not blocked:
            continue
        needed = [s // math.gcd(s, g.block_size // block) for g in blocked for s in runs_on.sizes]
        suggest = math.lcm(backend.smallest_kernel_block, min(needed))
        raise KvtoolError(
            f"vLLM cannot start this layout: {backend.name} runs the {group.head_size_k}-dim "
            f"{kv_dtype} layers in kernel blocks of exactly {runs_on.describe_blocks()} "
            f"tokens, which do not divide their {blocked[0].block_size}-token blocks "
            f"(block {block}, from the model's head_dim {spec.head_size}); "
            f"--block-size {suggest} avoids it"
        )


def _plan_compressed_mla(
    spec: ModelSpec,
    layout: CompressedMlaLayout,
    dep: Deployment,
    model_dtype: str,
    kv_dtype: str,
    notes: list[str],
    hma: HmaChoice,
) -> KvPlan:
    """DeepSeek-V4 on FlashMLA: per-layer caches packed block-outermost into groups.

    vLLM's DeepSeek-V4 backend on CUDA (FlashMLA sparse) stores the latent as fp8_ds_mla
    and refuses other KV cache dtypes (``_resolve_dsv4_kv_cache_dtype``); the caches are
    replicated on every TP rank (``max_tp_shards=1``), so the pages do not depend on TP.
    """
    if dep.pp > 1 or dep.dcp > 1:
        raise KvtoolError(
            "kvtool size models DeepSeek-V4 at --pp 1 and --dcp 1 only: its per-layer "
            "caches are not split across pipeline stages or decode context ranks here"
        )
    backend = backend_by_name(dep.attention_backend or DSV4_BACKEND)
    capability = gpu_capability(dep.gpu)
    if backend.name != DSV4_BACKEND or capability not in backend.capabilities:
        raise KvtoolError(
            f"kvtool size models DeepSeek-V4 on {DSV4_BACKEND} only (GPUs of compute "
            f"capability {', '.join(map(str, backend_by_name(DSV4_BACKEND).capabilities))}x), "
            f"not {backend.name} on {dep.gpu}"
        )
    if kv_dtype != "auto" and not kv_dtype.startswith("fp8"):
        raise KvtoolError(
            f"--kv-cache-dtype {kv_dtype}: vLLM 0.32 refuses it for DeepSeek-V4 on "
            f"{DSV4_BACKEND}, whose fp8_ds_mla layout only supports fp8 KV cache "
            f"({DSV4_SOURCE} _resolve_dsv4_kv_cache_dtype)"
        )
    if kv_dtype != "fp8_ds_mla":
        notes.append(
            f"--kv-cache-dtype {kv_dtype} is fp8_ds_mla for DeepSeek-V4 on {DSV4_BACKEND} "
            f"({DSV4_SOURCE} _resolve_dsv4_kv_cache_dtype): 584 B per "
            "latent state, pages padded to 576 B"
        )
    caches = layer_caches(layout)
    pool = packed_pool(caches)
    stored = msgspec.structs.replace(
        spec,
        attention=tuple(
            msgspec.structs.replace(g, token_bytes=DS_MLA_STATE_BYTES)
            if g.kind is not AttentionKind.INDEXER
            else g
            for g in spec.attention
        ),
    )
    blocks = sorted({g.block_size for g in pool.groups}, reverse=True)
    block = BlockChoice(
        layout.compressed_block,
        f"DeepSeek-V4's compressed caches take {layout.compressed_block}-token blocks; its "
        f"sliding-window and compressor-state groups take {', '.join(map(str, blocks[1:]))}",
    )
    return KvPlan(
        spec=stored,
        model_dtype=model_dtype,
        kv_cache_dtype="fp8_ds_mla",
        kv_bytes=1,
        backend=backend,
        pages=(),
        block=block,
        pool=pool,
        mamba_align=dep.prefix_caching,
        notes=tuple(notes),
        hma=hma,
    )


# A caller that sizes the layout without a deployment's connector and flags (the audit's
# geometry rules): vLLM's default with no connector keeps the hybrid manager on.
HMA_BY_DEFAULT = HmaChoice(True, "no KV connector and no flag: vLLM keeps it on")


def plan_kv_cache(
    spec: ModelSpec, dep: Deployment, facts: SizingFacts, hma: HmaChoice = HMA_BY_DEFAULT,
    default_block: int | None = None,
) -> KvPlan:
    """The layout; ``default_block`` is the release's ``CacheConfig.DEFAULT_BLOCK_SIZE``."""
    notes: list[str] = []
    model_dtype, note = resolve_model_dtype(spec, dep)
    notes += [note] if note else []
    kv_dtype, note = resolve_kv_cache_dtype(spec, dep)
    notes += [note] if note else []
    if spec.compressed_mla is not None:
        return _plan_compressed_mla(
            spec, spec.compressed_mla, dep, model_dtype, kv_dtype, notes, hma
        )
    kv_bytes = kv_dtype_bytes(kv_dtype, model_dtype)
    if dep.attention_backend is not None:
        backend = backend_by_name(dep.attention_backend)
    else:
        backend = select_backend(dep.gpu, attention_family(spec), kv_dtype)
    spec, note = _as_stored(spec, backend, kv_dtype)
    notes += [note] if note else []
    ssm_dtype = dep.mamba_ssm_dtype or spec.ssm_state_dtype or model_dtype
    pages = layer_pages(spec, dep.tp, dep.pp, kv_bytes, model_dtype, ssm_dtype)
    if not hma.enabled:
        if spec.states:
            raise KvtoolError(
                f"vLLM cannot start {spec.architecture} without the hybrid KV cache manager "
                f"({hma.reason}): its recurrent-state layers need it; use a connector with "
                "SupportsHMA or drop --disable-hybrid-kv-cache-manager"
            )
        pages = as_full_attention(pages)
    others = tuple(
        b for p in pages if p.count and (b := layer_backend(p.kind)) is not None
    )
    capability = gpu_capability(dep.gpu)
    # vLLM's default block asks the backend about the model's head_dim only.
    as_model = backend.for_layers(capability, spec.head_size, kv_dtype)
    block = choose_block_size(
        pages, as_model, dep.block_size, default_block or facts.default_block_size, spec.is_mla,
        others,
    )
    state_page = block.state_page_padded_bytes or max(
        (p.state_bytes for p in pages if p.kind == "state"), default=0
    )
    pool = build_pool(pages, block.block_size, state_page)
    _check_layer_kernels(spec, pool, backend, capability, kv_dtype, block.block_size)
    return KvPlan(
        spec=spec,
        model_dtype=model_dtype,
        kv_cache_dtype=kv_dtype,
        kv_bytes=kv_bytes,
        backend=backend,
        pages=pages,
        block=block,
        pool=pool,
        mamba_align=dep.prefix_caching,
        notes=tuple(notes),
        hma=hma,
    )
