"""Ask vLLM 0.32's own layout code what KV cache it builds for each config; print one JSON.

Run with the vLLM environment's python (``.venv-vllm``): ``python vllm_kv_layout.py
CASES.json``. No engine, no GPU, no weights: each case's config.json is read by vLLM's
``ModelConfig`` (its own head counts, head size, dtype and hybrid detection), the layers'
``KVCacheSpec`` objects are built with vLLM's spec classes, and then vLLM's own functions
decide everything kvtool prints:

- the block size: the named CUDA backend's ``get_preferred_block_size`` (or the pinned
  ``block_size``), then ``Platform._align_hybrid_block_size`` for attention + state models
  (state shapes and dtypes from the model class's ``get_mamba_state_*_from_config``);
- the groups: ``kv_cache_utils.get_kv_cache_groups``;
- the pool: ``get_kv_cache_config_from_groups`` (``num_blocks`` for ``kv_memory_bytes``)
  and ``get_kv_cache_capacity`` (the "KV cache size: N tokens" log line).

What stays here is the per-layer kind of each layer (full, sliding, MLA, state, and which
sparse-MLA layers build a DSA indexer), read from the fields the model files read
(``layer_types``, ``hybrid_override_pattern``, ``index_topk_freq``); the test fails if that
mapping or kvtool's drifts from vLLM. Sparse MLA layers are built as
``MLAAttention.get_kv_cache_spec`` and ``DeepseekV32IndexerCache.get_kv_cache_spec`` build
them (the KV dtype canonicalised by the backend, fp8_ds_mla's packed bytes), then passed
through ``customize_attention_spec`` with each layer's backend as the model runner does.
The layout is pinned to ``LBNHC`` (not block-outermost), the one CUDA's FlashAttention and
FlashInfer backends prefer; sparse MLA's mixed page sizes resolve to it as well
(``resolve_kv_cache_layout``: no backend declares a set, LBNHC is block-compact).
DeepSeek-V4's per-layer caches are built as its model files build them
(:func:`_deepseek_v4_layout`) under BLHNC, the block-outermost layout its backends
declare, so ``get_kv_cache_groups`` packs them (``_get_packed_kv_cache_groups``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _layer_kinds(model_config: Any) -> list[str | None]:
    """One of full / sliding / chunked / mla / state / hybrid per decoder layer; None = no cache.

    Layers that reuse another layer's cache (Gemma 4's last ``num_kv_shared_layers``) and
    Nemotron-NAS ``no_op`` attention blocks hold none.
    """
    kinds = _attention_kinds(model_config)
    hf = model_config.hf_text_config
    shared = getattr(hf, "num_kv_shared_layers", 0) or 0
    blocks = getattr(hf, "block_configs", None)
    for index in range(len(kinds)):
        no_op = blocks is not None and _no_op(blocks[index])
        if index >= len(kinds) - shared or no_op:
            kinds[index] = None
    return kinds


def _indexed_layers(hf: Any, layers: int) -> list[int]:
    """Sparse MLA layers that build a DSA indexer (models/deepseek_v32/attention.py)."""
    pattern = getattr(hf, "index_topk_pattern", None)
    if pattern is not None:
        return [i for i in range(layers) if i >= len(pattern) or pattern[i] != "S"]
    freq = getattr(hf, "index_topk_freq", 1) or 1
    offset = getattr(hf, "index_skip_topk_offset", 2)
    return [i for i in range(layers) if max(i - offset + 1, 0) % freq == 0]


def _stub_cuda_flash_attn() -> None:
    """Let CUDA-only backend modules import on the CPU wheel (no kernel is ever run)."""
    import importlib
    import types

    try:
        importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
    except ImportError:
        for name in ("vllm.vllm_flash_attn", "vllm.vllm_flash_attn.flash_attn_interface"):
            stub = types.ModuleType(name)
            stub.__getattr__ = lambda attr: None  # type: ignore[method-assign]
            stub.__path__ = []
            sys.modules[name] = stub


def _stub_absent_package(package: str) -> None:
    """Let model files that import ``package`` for their vision towers load without it.

    Only the text model's KV cache is asked for, so no stubbed name is ever called; any
    import of ``package`` or a submodule gets an empty module whose attributes are
    placeholder classes.
    """
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    if importlib.util.find_spec(package) is not None:
        return

    class _Placeholder:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    class _Loader(importlib.abc.Loader):
        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = lambda attr: (  # type: ignore[method-assign]
                _Placeholder if not attr.startswith("__") else None
            )
            return module

        def exec_module(self, module: types.ModuleType) -> None:
            return None

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(
            self, fullname: str, path: Any = None, target: Any = None
        ) -> importlib.machinery.ModuleSpec | None:
            if fullname == package or fullname.startswith(package + "."):
                return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, _Finder())


def _sparse_mla_specs(
    model_config: Any, backend: Any, block_size: int, cache_dtype: str
) -> dict[str, Any]:
    """One latent spec per layer and one indexer spec per layer that builds an indexer."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import (
        _canonicalize_sparse_mla_kv_cache_dtype,
    )
    from vllm.model_executor.models.deepseek_v2 import Indexer
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerBackend
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole, get_kv_quant_mode
    from vllm.v1.worker.utils import customize_attention_spec

    del Indexer  # imported so a renamed indexer class fails here, not silently
    hf = model_config.hf_text_config
    layers = model_config.get_total_num_hidden_layers()
    stored = _canonicalize_sparse_mla_kv_cache_dtype(backend, cache_dtype)
    indexed = set(_indexed_layers(hf, layers))
    index_head = hf.index_head_dim + hf.index_head_dim // 128 * 4  # quant_block_size 128
    specs: dict[str, Any] = {}
    for index in range(layers):
        latent = MLAAttentionSpec(
            block_size=block_size,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=model_config.get_head_size(),
            dtype=kv_cache_dtype_str_to_dtype(stored, model_config),
            cache_dtype_str=stored,
            kv_quant_mode=get_kv_quant_mode(stored),
            state_content_bytes={"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}.get(stored),
            is_index_group_leader=index in indexed,
        )
        specs[f"layers.{index}"] = customize_attention_spec(backend, latent)
        if index in indexed:
            keys = MLAAttentionSpec(
                block_size=block_size,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=index_head,
                dtype=torch.uint8,
                cache_role=SparseCacheRole.INDEXER,
            )
            specs[f"layers.{index}.indexer"] = customize_attention_spec(
                DeepseekV32IndexerBackend, keys
            )
    return specs


def _no_op(block: Any) -> bool:
    attention = block["attention"] if isinstance(block, dict) else block.attention
    return bool(attention["no_op"] if isinstance(attention, dict) else attention.no_op)


def _attention_kinds(model_config: Any) -> list[str | None]:
    hf = model_config.hf_text_config
    layers = model_config.get_total_num_hidden_layers()
    if getattr(hf, "linear_attn_config", None) is not None:
        # Kimi-Linear / Kimi-K3 (models/kimi_k3): KDA state layers by the config's own
        # is_kda_layer (1-based kda_layers), MLA on the rest.
        return ["state" if hf.is_kda_layer(i) else "mla" for i in range(layers)]
    if model_config.use_mla:
        return ["mla"] * layers
    pattern = getattr(hf, "hybrid_override_pattern", None)
    if pattern:  # Nemotron-H: M = Mamba-2, * = attention, - / E = no cache
        return [{"M": "state", "*": "full"}[c] for c in pattern if c in "M*"]
    no_rope = getattr(hf, "no_rope_layers", None)
    if no_rope and getattr(hf, "attention_chunk_size", None):
        # Llama 4 (llama4.py): RoPE layers use ChunkedLocalAttention, NoPE layers are global.
        return ["chunked" if flag else "full" for flag in no_rope]
    types = getattr(hf, "layer_types", None)
    if types:
        names = {
            "full_attention": "full",
            "sliding_attention": "sliding",
            "linear_attention": "state",
            "hybrid": "hybrid",  # Falcon-H1: attention and Mamba-2 in the same layer
        }
        return [names[t] for t in types]
    return ["sliding" if getattr(hf, "sliding_window", None) else "full"] * layers


def _resolved_cache_dtype(requested: str, model_config: Any) -> str:
    """The cache dtype the engine runs with: ``auto`` resolved as vLLM does.

    ``EngineArgs.create_engine_config`` resolves a ModelOpt checkpoint's declared KV dtype
    (``resolve_kv_cache_dtype_string``); the Attention layer then turns ``auto`` into fp8
    where the checkpoint's quantization config (vLLM's own class) has a ``kv_cache_scheme``.
    """
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    resolved = resolve_kv_cache_dtype_string(requested, model_config)
    quant = getattr(model_config.hf_config, "quantization_config", None)
    if resolved == "auto" and model_config.quantization and quant is not None:
        quant_config = get_quantization_config(model_config.quantization).from_config(quant)
        if getattr(quant_config, "kv_cache_scheme", None) is not None:
            resolved = "fp8"
    return str(resolved)


def _sliding_window(hf: Any) -> int:
    """The window a model file gives its sliding layers.

    Cohere 2 (``commandr.py``) passes ``sliding_window + 1``: its layers see the window
    plus the current token.
    """
    return int(hf.sliding_window) + (1 if hf.model_type == "cohere2" else 0)


def _own_heads(hf: Any, kind: str, tp: int) -> dict[str, int]:
    """Heads a model file builds per layer kind where vLLM's arch config has one set.

    MiMo-V2 (``mimo_v2.py`` ``MiMoV2DecoderLayer``): sliding layers take the ``swa_*``
    KV heads and head sizes, full layers the plain ones; V may be narrower than K.
    """
    if getattr(hf, "swa_head_dim", None) is None or kind not in ("full", "sliding"):
        return {}
    prefix = "swa_" if kind == "sliding" else ""
    head = getattr(hf, f"{prefix}head_dim")
    return {
        "num_kv_heads": max(1, getattr(hf, f"{prefix}num_key_value_heads") // tp),
        "head_size": head,
        "head_size_v": getattr(hf, f"{prefix}v_head_dim", None) or head,
    }


# Architectures whose layers build their own KV cache specs that the per-layer kinds here
# do not reproduce: DeepSeek-V4.1 (not yet built here; DeepSeek-V4 is, by
# _deepseek_v4_layout) and MiniMax-M3 (models/minimax_m3: GQA plus an indexer side cache,
# 128-token sparse pages). A generic answer for them would be a figure vLLM never
# computes, so they are refused.
_OWN_SPEC_ARCHITECTURES = ("DeepseekV41", "MiniMaxM3")


def _with_hf_config(vllm_config: Any, hf_config: Any) -> Any:
    """``VllmConfig.with_hf_config`` for the stand-in config: the same, another hf_config.

    Multimodal wrappers (Kimi-K3) ask their text model's state shapes through it.
    """
    import copy

    model_config = copy.copy(vllm_config.model_config)
    model_config.hf_config = hf_config
    return SimpleNamespace(**{**vars(vllm_config), "model_config": model_config})


@cache
def _model_config(model_dir: str, max_model_len: int) -> Any:
    """vLLM's ModelConfig for a config.json directory (independent of TP and KV dtype)."""
    _stub_absent_package("torchvision")  # Qwen3.5's file imports it for its vision tower
    from vllm.config import ModelConfig
    from vllm.model_executor.models import registry

    # vLLM inspects each model class in a fresh subprocess to keep CUDA out of the parent;
    # on this CPU-only, engine-less run that only re-imports vLLM once per architecture.
    registry._run_in_subprocess = lambda fn: fn()  # type: ignore[assignment]
    return ModelConfig(
        model=model_dir, skip_tokenizer_init=True, dtype="auto", max_model_len=max_model_len
    )


def _pool_figures(vllm_config: Any, specs: dict[str, Any], kv_memory_bytes: int) -> dict[str, Any]:
    """vLLM's groups, pool and capacity for ``specs``, in the shape kvtool reports them."""
    import torch
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.kv_cache_interface import MambaSpec, UniformTypeKVCacheSpecs

    model_config, cache = vllm_config.model_config, vllm_config.cache_config
    groups = kcu.get_kv_cache_groups(vllm_config, dict(specs))  # type: ignore[arg-type]
    config = kcu.get_kv_cache_config_from_groups(
        vllm_config,  # type: ignore[arg-type]
        groups,
        kv_memory_bytes,
    )
    tokens, _ = kcu.get_kv_cache_capacity(vllm_config, config)  # type: ignore[arg-type]

    def kind_of(spec: Any) -> str:
        if isinstance(spec, UniformTypeKVCacheSpecs):
            return kind_of(next(iter(spec.kv_cache_specs.values())))
        return {
            "FullAttentionSpec": "full",
            "MLAAttentionSpec": "mla",
            "SlidingWindowSpec": "sliding",
            "ChunkedLocalAttentionSpec": "chunked",
            "SlidingWindowMLASpec": "sliding",
            "MambaSpec": "state",
        }[type(spec).__name__]

    def page_sizes(spec: Any) -> list[int]:
        if isinstance(spec, UniformTypeKVCacheSpecs):
            return [s.page_size_bytes for s in spec.kv_cache_specs.values()]
        return [spec.page_size_bytes]

    state = [s for s in specs.values() if isinstance(s, MambaSpec)]
    return {
        "block_size": cache.block_size,
        "model_dtype": str(model_config.dtype).removeprefix("torch."),
        "groups": [
            {
                "kind": kind_of(group.kv_cache_spec),
                "layers": len(group.layer_names),
                "block_size": group.kv_cache_spec.block_size,
                "page_bytes": max(page_sizes(group.kv_cache_spec)),
                # each page size and its layers when a group mixes them, as kvtool lists it
                "layer_pages": sorted(Counter(page_sizes(group.kv_cache_spec)).items())
                if len(set(page_sizes(group.kv_cache_spec))) > 1
                else [],
            }
            for group in groups
        ],
        "num_blocks": config.num_blocks,
        "capacity_tokens": tokens,
        "state_page_bytes": state[0].real_page_size_bytes if state else 0,
        "state_dtype_bytes": [torch.empty((), dtype=d).element_size() for d in state[0].dtypes]
        if state
        else [],
    }


def _deepseek_v4_layout(case: dict[str, Any], model_config: Any) -> dict[str, Any]:
    """DeepSeek-V4's cache layers built as its model files build them (vLLM v0.32.0).

    Per decoder layer i with r = ``compress_ratios[i]``, in registration order
    (``models/deepseek_v4/attention.py`` DeepseekV4Attention and DeepseekV4IndexerCache,
    ``models/deepseek_v4/compressor.py`` CompressorStateCache,
    ``v1/attention/backends/mla/sparse_swa.py`` DeepseekV4SWACache): r > 1 a compressed
    latent (``tokens_per_state`` r), every layer a 64-token sliding-window latent, r > 1 the
    compressor's float32 state, r = 4 the indexer's key cache and its compressor state. The
    KV dtype is resolved by the model's own ``_resolve_dsv4_kv_cache_dtype`` for the
    fp8_ds_mla layout of the named backend (FlashMLA); the layout is BLHNC, the
    block-outermost one DeepSeek-V4's backends declare, so ``get_kv_cache_groups`` packs.
    """
    import torch
    from vllm.config import CacheConfig, ParallelConfig
    from vllm.models.deepseek_v4.attention import _resolve_dsv4_kv_cache_dtype
    from vllm.v1.kv_cache_interface import (
        MLAAttentionSpec,
        SlidingWindowMLASpec,
        get_kv_quant_mode,
    )

    assert case["backend"] == "FLASHMLA_SPARSE", case["backend"]  # the fp8_ds_mla layout
    # The compressed caches' block: sparse_mla.py lays out 256 // compress_ratio states.
    cache = CacheConfig(block_size=case["block_size"] or 256, cache_dtype="auto")
    cache_dtype, kv_dtype = _resolve_dsv4_kv_cache_dtype(True, case["kv_cache_dtype"], cache)
    cache.kv_cache_layout = "BLHNC"
    quant = {"cache_dtype_str": cache_dtype, "kv_quant_mode": get_kv_quant_mode(cache_dtype)}
    latent = {**quant, "state_content_bytes": 584, "model_version": "deepseek_v4"}
    align = 576  # fp8_ds_mla's UE8M0 paged layout
    one = {"num_kv_heads": 1, "max_tp_shards": 1, "alignment": align}
    hf = model_config.hf_text_config
    head, index_head = hf.head_dim, hf.index_head_dim
    specs: dict[str, Any] = {}
    for i, ratio in enumerate(hf.compress_ratios[: model_config.get_total_num_hidden_layers()]):
        name = f"layers.{i}.attn"
        if ratio > 1:
            specs[name] = MLAAttentionSpec(
                block_size=cache.block_size,
                head_size=head,
                dtype=kv_dtype,
                tokens_per_state=ratio,
                **one,
                **latent,
            )
        specs[f"{name}.swa_cache"] = SlidingWindowMLASpec(
            block_size=64,
            head_size=head,
            dtype=kv_dtype,
            sliding_window=hf.sliding_window,
            **one,
            **latent,
        )
        if ratio <= 1:
            continue
        overlap = 1 + (ratio == 4)
        specs[f"{name}.compressor.state_cache"] = SlidingWindowMLASpec(
            block_size=4 if ratio == 4 else 8,
            head_size=2 * overlap * head,
            dtype=torch.float32,
            sliding_window=overlap * ratio,
            **one,
        )
        if ratio != 4:
            continue
        specs[f"{name}.indexer.k_cache"] = MLAAttentionSpec(
            block_size=cache.block_size,
            head_size=index_head + index_head // 128 * 4,
            dtype=torch.uint8,
            tokens_per_state=ratio,
            **one,
        )
        specs[f"{name}.indexer.compressor.state_cache"] = SlidingWindowMLASpec(
            block_size=4,
            head_size=2 * 2 * index_head,
            dtype=torch.float32,
            sliding_window=2 * ratio,
            **one,
        )
    hf_config = SimpleNamespace(model_type=model_config.hf_config.model_type)
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(
            max_model_len=case["max_model_len"],
            hf_config=hf_config,
            use_mla=True,
            dtype=model_config.dtype,
        ),
        cache_config=cache,
        parallel_config=ParallelConfig(tensor_parallel_size=case["tp"]),
        speculative_config=None,
        num_speculative_tokens=0,
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False),
        attention_config=SimpleNamespace(hisparse_config=None),
        max_in_flight_tokens=case["max_in_flight_tokens"],
    )
    return _pool_figures(vllm_config, specs, case["kv_memory_bytes"])


def layout(case: dict[str, Any]) -> dict[str, Any]:
    from vllm.config import CacheConfig, ParallelConfig
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
        get_kv_quant_mode,
    )

    model_config = _model_config(case["model_dir"], case["max_model_len"])
    if model_config.architecture.startswith("DeepseekV4"):
        return _deepseek_v4_layout(case, model_config)
    parallel = ParallelConfig(tensor_parallel_size=case["tp"])
    cache_dtype = _resolved_cache_dtype(case["kv_cache_dtype"], model_config)
    cache = CacheConfig(
        block_size=case["block_size"],
        cache_dtype=cache_dtype,
        mamba_cache_mode="align",  # prefix caching is on by default
        mamba_ssm_cache_dtype=case.get("mamba_ssm_cache_dtype") or "auto",
    )
    cache.kv_cache_layout = "LBNHC"  # the engine core resolves it; init=False
    vllm_config = SimpleNamespace(
        model_config=model_config,
        cache_config=cache,
        parallel_config=parallel,
        speculative_config=None,
        num_speculative_tokens=0,
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False),
        attention_config=SimpleNamespace(hisparse_config=None),
        max_in_flight_tokens=case["max_in_flight_tokens"],
    )
    vllm_config.with_hf_config = lambda hf, architectures=None: _with_hf_config(vllm_config, hf)
    if model_config.architecture.startswith(_OWN_SPEC_ARCHITECTURES):
        raise NotImplementedError(
            f"{model_config.architecture} builds KV cache specs this script does not reproduce"
        )
    model_cls, _ = ModelRegistry.resolve_model_cls(
        model_config.architecture, model_config=model_config
    )
    # vLLM's per-model hooks that choose the SSM state dtype (models/config.py).
    from vllm.model_executor.models.config import (
        NemotronHForCausalLMConfig,
        Qwen3_5ForConditionalGenerationConfig,
    )

    model_type = model_config.hf_config.model_type
    if model_type.startswith("nemotron_h"):
        NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype(
            cache_config=cache, hf_config=model_config.hf_config
        )
    if model_type.startswith("qwen3_5"):
        Qwen3_5ForConditionalGenerationConfig.verify_and_update_config(vllm_config)  # type: ignore[arg-type]

    # The CPU wheel has no FlashAttention kernels; CUDA backend modules import their names
    # at import time only, so any missing one may be None here (no kernel is ever run).
    from vllm.v1.attention.backends import fa_utils

    fa_utils.__getattr__ = lambda name: None  # type: ignore[attr-defined]
    _stub_cuda_flash_attn()
    backend = AttentionBackendEnum[case["backend"]].get_class()
    sparse = model_config.use_mla and hasattr(model_config.hf_text_config, "index_topk")
    if case["block_size"] is None and sparse:
        from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerBackend

        cache.block_size = Platform._preferred_block_size_for_backends(
            [backend, DeepseekV32IndexerBackend],
            CacheConfig.DEFAULT_BLOCK_SIZE,
            vllm_config,  # type: ignore[arg-type]
        )
    elif case["block_size"] is None:
        cache.block_size = backend.get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE)
    if model_config.is_hybrid:
        # The backend list comes from the built model; here it is the one backend.
        Platform._find_non_ssm_backends = classmethod(lambda cls, cfg: [backend])  # type: ignore[method-assign,assignment]
        Platform._align_hybrid_block_size(vllm_config, backend)  # type: ignore[arg-type]

    kv_dtype = (
        model_config.dtype if cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cache_dtype]
    )
    specs: dict[str, Any] = {}
    if sparse:
        specs = _sparse_mla_specs(model_config, backend, cache.block_size, cache_dtype)
    layers: list[tuple[int, str, str]] = []
    for index, layer_kind in enumerate([] if sparse else _layer_kinds(model_config)):
        if layer_kind == "hybrid":
            layers.append((index, "full", f"layers.{index}.attn"))
            layers.append((index, "state", f"layers.{index}.mamba"))
        elif layer_kind is not None:
            layers.append((index, layer_kind, f"layers.{index}"))
    for index, kind, name in layers:
        layer_arch = model_config.model_arch_config[index]  # per-layer heads and head size
        attention: dict[str, Any] = {
            "block_size": cache.block_size,
            "num_kv_heads": model_config.get_num_kv_heads(parallel, layer_arch),
            "head_size": layer_arch.head_size,
            "dtype": kv_dtype,
            "kv_quant_mode": get_kv_quant_mode(cache_dtype),
        }
        attention.update(_own_heads(model_config.hf_text_config, kind, case["tp"]))
        if kind == "full":
            specs[name] = FullAttentionSpec(**attention)
        elif kind == "mla":
            specs[name] = MLAAttentionSpec(**attention, cache_dtype_str=cache_dtype)
        elif kind == "sliding":
            window = _sliding_window(model_config.hf_text_config)
            specs[name] = SlidingWindowSpec(**attention, sliding_window=window)
        elif kind == "chunked":
            chunk = model_config.hf_text_config.attention_chunk_size
            specs[name] = ChunkedLocalAttentionSpec(**attention, attention_chunk_size=chunk)
        else:
            specs[name] = MambaSpec(
                shapes=model_cls.get_mamba_state_shape_from_config(vllm_config),
                dtypes=model_cls.get_mamba_state_dtype_from_config(vllm_config),
                block_size=cache.block_size,
                page_size_padded=cache.mamba_page_size_padded,
                mamba_cache_mode=cache.mamba_cache_mode,
            )
    return _pool_figures(vllm_config, specs, case["kv_memory_bytes"])


REGISTRY_KEY = "__model_registry__"


def model_registry() -> dict[str, Any]:
    """vLLM's own model registry as imported: every architecture and the removed ones."""
    from vllm.model_executor.models import registry

    return {
        "all": {arch: list(target) for arch, target in registry._VLLM_MODELS.items()},
        "previous": dict(registry._PREVIOUSLY_SUPPORTED_MODELS),
    }


def main(cases_file: str) -> None:
    cases = json.loads(Path(cases_file).read_text())
    results: dict[str, Any] = {REGISTRY_KEY: model_registry()}
    for case in cases:
        try:
            results[case["id"]] = layout(case)
        except Exception as exc:  # reported per case, so one bad config names itself
            results[case["id"]] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
