"""The cases the end-to-end oracle runs: every config in ``configs/e2e`` at TP 1 and TP 8,
and the deployments of :data:`VARIANTS`.

Each config.json there is a real model's file (``configs/e2e/README.md`` cites each).
A case is written to its own model directory as vLLM reads one; multimodal wrappers are
served as their text model (``*ForCausalLM`` of the ``text_config``), whose layers are the
whole KV cache, because this CPU environment has no torchvision for the vision towers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIGS = Path(__file__).with_name("configs") / "e2e"
GIB = 1 << 30
KV_MEMORY_GIB = 40
CPU_TIER_GIB = 100
LONGEST_CONTEXT = 8192
TP_SIZES = (1, 8)
# Text model classes of multimodal wrappers (vLLM's registry serves both).
TEXT_ARCHITECTURES = {
    "Gemma3ForConditionalGeneration": "Gemma3ForCausalLM",
    "Gemma4ForConditionalGeneration": "Gemma4ForCausalLM",
    "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM",
    "Mistral3ForConditionalGeneration": "MistralForCausalLM",
    "MuseGlimmerForConditionalGeneration": "MuseGlimmerForCausalLM",
}


def config_names() -> list[str]:
    return sorted(p.stem for p in CONFIGS.glob("*.json"))


def served_config(name: str) -> dict[str, Any]:
    """The config.json as the case serves it (a wrapper's text model)."""
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    text_arch = TEXT_ARCHITECTURES.get((config.get("architectures") or [""])[0])
    if text_arch is not None and "text_config" in config:
        dtype = config.get("torch_dtype", config.get("dtype", "bfloat16"))
        config = {**config["text_config"], "architectures": [text_arch], "torch_dtype": dtype}
    return config


def heads(config: dict[str, Any]) -> tuple[int, int]:
    query = int(config.get("num_attention_heads", 1))
    kv = int(config.get("num_key_value_heads") or config.get("multi_query_group_num") or query)
    return query, kv


def tp_sizes(config: dict[str, Any]) -> list[int]:
    """TP 1 and 8, or the largest TP under 8 vLLM accepts where 8 does not divide the heads."""
    query, kv = heads(config)
    wide = next(
        tp for tp in (8, 4, 2, 1)
        if query % tp == 0 and (kv % tp == 0 or tp % kv == 0)
    )
    return sorted({1, wide})


# transformers' PretrainedConfig default, what vLLM derives when a config names no length
UNSTATED_CONTEXT = 4096


def context_len(config: dict[str, Any]) -> int:
    text = config.get("text_config") or {}
    longest = (
        config.get("max_position_embeddings") or config.get("seq_length")
        or text.get("max_position_embeddings") or UNSTATED_CONTEXT
    )
    return min(LONGEST_CONTEXT, int(longest))


def case_id(name: str, tp: int, options: dict[str, Any] | None = None) -> str:
    suffix = "".join(f"-{key}={value}" for key, value in sorted((options or {}).items()))
    return f"{name}-tp{tp}{suffix}"


# Deployments beyond the default one at TP 1 and 8: other KV cache dtypes, block sizes,
# TP sizes, scheduler inputs and HMA choices, each as vLLM's EngineArgs field -> value
# (kvtool's Deployment takes the same names, ``enable_prefix_caching`` as
# ``prefix_caching``). One (config, TP, options) per entry, all run in the same vLLM
# process as the defaults.
VARIANTS: tuple[tuple[str, int, dict[str, Any]], ...] = (
    ("llama-3.1-8b", 2, {"kv_cache_dtype": "fp8"}),
    ("llama-3.1-8b", 4, {"kv_cache_dtype": "fp8_e5m2", "block_size": 32}),
    ("llama-3.1-70b", 4, {"block_size": 64}),
    ("qwen3-8b", 1, {"kv_cache_dtype": "fp8_e4m3", "block_size": 32}),
    ("qwen2.5-0.5b", 2, {"max_num_batched_tokens": 4096, "max_num_seqs": 64}),
    ("phi-3-medium-4k", 2, {"kv_cache_dtype": "fp8"}),
    ("gpt-oss-20b", 2, {"kv_cache_dtype": "fp8", "block_size": 32}),
    ("gpt-oss-120b", 4, {"disable_hybrid_kv_cache_manager": True}),
    ("gemma-2-9b", 2, {"block_size": 32}),
    ("gemma-3-27b", 4, {"kv_cache_dtype": "fp8"}),
    ("gemma-3-1b", 1, {"block_size": 64, "max_num_batched_tokens": 2048}),
    ("mistral-7b-v0.1", 2, {"block_size": 64}),
    ("llama-4-scout", 4, {"kv_cache_dtype": "fp8"}),
    ("deepseek-v3", 4, {"kv_cache_dtype": "fp8"}),
    ("deepseek-v2-lite", 2, {"block_size": 64}),
    ("kimi-k2", 8, {"kv_cache_dtype": "fp8"}),
    ("qwen3-next-80b-a3b", 4, {"kv_cache_dtype": "fp8"}),
    ("qwen3-next-80b-a3b", 2, {"enable_prefix_caching": False}),
    ("jamba-1.5-mini", 2, {"block_size": 32}),
    ("nemotron-h-8b", 2, {"enable_prefix_caching": False}),
    ("falcon-h1-0.5b", 2, {"kv_cache_dtype": "fp8"}),
    ("granite-4.0-h-tiny", 4, {"block_size": 64}),
    ("lfm2-1.2b", 2, {"kv_cache_dtype": "fp8"}),
    ("mixtral-8x7b", 2, {"kv_cache_dtype": "fp8_e5m2"}),
    ("qwen3-14b", 2, {"block_size": 16}),
    ("gemma-3-12b", 2, {"block_size": 16, "kv_cache_dtype": "fp8"}),
    ("glm-5", 4, {"block_size": 64}),
    ("qwen3.5-9b", 2, {"kv_cache_dtype": "fp8"}),
    ("exaone4-32b", 4, {"kv_cache_dtype": "fp8", "block_size": 32}),
    ("glm-4.7-flash", 4, {"kv_cache_dtype": "fp8"}),
    ("nemotron-3-nano-30b-a3b", 2, {"block_size": 32}),
)


def write_cases(root: Path) -> list[dict[str, Any]]:
    """One case per config and TP, each config written to ``root/<name>/config.json``."""
    cases = []
    for name in config_names():
        config = served_config(name)
        model_dir = root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(config))
        deployments = [(tp, {}) for tp in tp_sizes(config)]
        deployments += [(tp, options) for variant, tp, options in VARIANTS if variant == name]
        for tp, options in deployments:
            cases.append({
                "id": case_id(name, tp, options),
                "name": name,
                "model_dir": str(model_dir),
                "tp": tp,
                "max_model_len": context_len(config),
                "kv_memory_bytes": KV_MEMORY_GIB * GIB,
                "kv_offloading_size": CPU_TIER_GIB,
                "options": options,
                **options,
            })
    missing = sorted({variant for variant, _, _ in VARIANTS} - set(config_names()))
    if missing:
        raise ValueError(f"VARIANTS name configs that configs/e2e lacks: {missing}")
    return cases
