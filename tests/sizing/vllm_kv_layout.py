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

What stays here is the per-layer kind of each layer (full, sliding, MLA, state), read from
the fields the model files read (``layer_types``, ``hybrid_override_pattern``); the test
fails if that mapping or kvtool's drifts from vLLM. The layout is pinned to ``LBNHC``
(not block-outermost), the one CUDA's FlashAttention and FlashInfer backends prefer.
"""

from __future__ import annotations

import json
import sys
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


def _no_op(block: Any) -> bool:
    attention = block["attention"] if isinstance(block, dict) else block.attention
    return bool(attention["no_op"] if isinstance(attention, dict) else attention.no_op)


def _attention_kinds(model_config: Any) -> list[str | None]:
    hf = model_config.hf_text_config
    layers = model_config.get_total_num_hidden_layers()
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


@cache
def _model_config(model_dir: str, max_model_len: int) -> Any:
    """vLLM's ModelConfig for a config.json directory (independent of TP and KV dtype)."""
    from vllm.config import ModelConfig
    from vllm.model_executor.models import registry

    # vLLM inspects each model class in a fresh subprocess to keep CUDA out of the parent;
    # on this CPU-only, engine-less run that only re-imports vLLM once per architecture.
    registry._run_in_subprocess = lambda fn: fn()  # type: ignore[assignment]
    return ModelConfig(
        model=model_dir, skip_tokenizer_init=True, dtype="auto", max_model_len=max_model_len
    )


def layout(case: dict[str, Any]) -> dict[str, Any]:
    import torch
    from vllm.config import CacheConfig, ParallelConfig
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
        get_kv_quant_mode,
    )

    model_config = _model_config(case["model_dir"], case["max_model_len"])
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
    backend = AttentionBackendEnum[case["backend"]].get_class()
    if case["block_size"] is None:
        cache.block_size = backend.get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE)
    if model_config.is_hybrid:
        # The backend list comes from the built model; here it is the one backend.
        Platform._find_non_ssm_backends = classmethod(lambda cls, cfg: [backend])  # type: ignore[method-assign,assignment]
        Platform._align_hybrid_block_size(vllm_config, backend)  # type: ignore[arg-type]

    kv_dtype = (
        model_config.dtype if cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cache_dtype]
    )
    specs: dict[str, Any] = {}
    layers: list[tuple[int, str, str]] = []
    for index, layer_kind in enumerate(_layer_kinds(model_config)):
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
    groups = kcu.get_kv_cache_groups(vllm_config, dict(specs))  # type: ignore[arg-type]
    config = kcu.get_kv_cache_config_from_groups(
        vllm_config,  # type: ignore[arg-type]
        groups,
        case["kv_memory_bytes"],
    )
    tokens, _ = kcu.get_kv_cache_capacity(vllm_config, config)  # type: ignore[arg-type]

    def kind_of(spec: Any) -> str:
        return {
            "FullAttentionSpec": "full",
            "MLAAttentionSpec": "mla",
            "SlidingWindowSpec": "sliding",
            "ChunkedLocalAttentionSpec": "chunked",
            "MambaSpec": "state",
        }[type(spec).__name__]

    state = [s for s in specs.values() if isinstance(s, MambaSpec)]
    return {
        "block_size": cache.block_size,
        "model_dtype": str(model_config.dtype).removeprefix("torch."),
        "groups": [
            {
                "kind": kind_of(group.kv_cache_spec),
                "layers": len(group.layer_names),
                "block_size": group.kv_cache_spec.block_size,
                "page_bytes": group.kv_cache_spec.page_size_bytes,
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


def main(cases_file: str) -> None:
    cases = json.loads(Path(cases_file).read_text())
    results: dict[str, Any] = {}
    for case in cases:
        try:
            results[case["id"]] = layout(case)
        except Exception as exc:  # reported per case, so one bad config names itself
            results[case["id"]] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
