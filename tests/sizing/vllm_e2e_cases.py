"""The cases the end-to-end oracle runs: every config in ``configs/e2e`` at TP 1 and TP 8.

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


def case_id(name: str, tp: int) -> str:
    return f"{name}-tp{tp}"


def write_cases(root: Path) -> list[dict[str, Any]]:
    """One case per config and TP, each config written to ``root/<name>/config.json``."""
    cases = []
    for name in config_names():
        config = served_config(name)
        model_dir = root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(config))
        for tp in tp_sizes(config):
            cases.append({
                "id": case_id(name, tp),
                "name": name,
                "model_dir": str(model_dir),
                "tp": tp,
                "max_model_len": context_len(config),
                "kv_memory_bytes": KV_MEMORY_GIB * GIB,
                "kv_offloading_size": CPU_TIER_GIB,
            })
    return cases
