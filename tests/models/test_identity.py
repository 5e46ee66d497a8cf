"""Model identity from a config.json or the family table (kvtool.models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtool.errors import KvtoolError
from kvtool.models import TRAITS, classify_config, identify
from kvtool.models.identity import families

# Trimmed config.json shapes as published on the hub (fields the classifier reads).
# https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json (text_config.layer_types)
QWEN35 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "vision_config": {"depth": 27},
    "text_config": {
        "model_type": "qwen3_5_text",
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_size": 4096,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "torch_dtype": "bfloat16",
    },
}
# https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct/blob/main/config.json
LLAMA4 = {
    "model_type": "llama4",
    "vision_config": {"num_hidden_layers": 34},
    "text_config": {
        "model_type": "llama4_text",
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "attention_chunk_size": 8192,
        "num_local_experts": 16,
    },
}
# https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA31 = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
}


def test_qwen35_config_is_a_gated_deltanet_hybrid_in_a_vision_wrapper() -> None:
    identity = classify_config(QWEN35, name="Qwen/Qwen3.5-9B", where="config.json")
    assert {"gated_deltanet", "gqa", "multimodal"} <= identity.traits
    assert identity.has_state and identity.hybrid


def test_llama4_config_has_chunked_local_attention_and_experts() -> None:
    identity = classify_config(LLAMA4, name="llama4", where="config.json")
    assert {"chunked_local", "moe", "multimodal", "gqa"} <= identity.traits
    assert identity.hybrid and not identity.has_state


def test_dense_llama_is_not_hybrid() -> None:
    identity = classify_config(LLAMA31, name="llama", where="config.json")
    assert identity.traits == frozenset({"gqa"})
    assert not identity.hybrid


def test_unsupported_model_type_falls_back_to_layer_fields() -> None:
    # https://huggingface.co/tiiuae/Falcon-H1-7B-Instruct/blob/main/config.json shape:
    # a layer-type list naming mamba next to attention heads.
    raw = {
        "model_type": "some_new_hybrid",
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "layers_block_type": ["mamba", "attention", "mamba"],
    }
    identity = classify_config(raw, name="x", where="config.json")
    assert identity.has_state and "gqa" in identity.traits


def test_a_local_model_directory_is_read_before_the_family_table(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA31))
    identity = identify(str(tmp_path))
    assert identity is not None and identity.family is None
    assert identity.source.startswith("config.json at ")


def test_a_given_config_path_wins_over_the_name(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(QWEN35))
    identity = identify("meta-llama/Llama-3.1-8B", config_path=str(path))
    assert identity is not None and identity.has_state
    with pytest.raises(KvtoolError, match=r"no config\.json"):
        identify("m", config_path=str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    ("name", "state", "sliding"),
    [
        ("Qwen/Qwen3.5-397B-A17B", True, False),
        ("Qwen/Qwen3.6-27B", True, False),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", True, False),
        ("google/gemma-3-27b-it", False, True),
        ("openai/gpt-oss-20b", False, True),
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", True, False),
        ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", True, False),
        ("ibm-granite/granite-4.0-h-small", True, False),
        ("ai21labs/AI21-Jamba-Mini-1.7", True, False),
        ("tiiuae/Falcon-H1-34B-Instruct", True, False),
        ("MiniMaxAI/MiniMax-M1-80k", True, False),
        ("MiniMaxAI/MiniMax-M2", False, False),
        ("deepseek-ai/DeepSeek-V3.2-Exp", False, False),
        ("moonshotai/Kimi-K2-Instruct", False, False),
        ("zai-org/GLM-4.6", False, False),
        ("meta-llama/Llama-3.1-70B-Instruct", False, False),
    ],
)
def test_family_table_classifies_without_the_hub(name: str, state: bool, sliding: bool) -> None:
    identity = identify(name)
    assert identity is not None and identity.family is not None
    assert identity.has_state is state
    assert identity.sliding_window is sliding


def test_specific_rows_come_before_general_ones() -> None:
    identity = identify("deepseek-ai/DeepSeek-V3.2-Exp")
    assert identity is not None and identity.family == "DeepSeek-V3.2"


def test_unknown_name_is_none() -> None:
    assert identify("my-org/private-model") is None


def test_every_family_row_cites_a_public_config_json_and_uses_known_traits() -> None:
    for row in families():
        assert row.config.startswith("https://huggingface.co/") and row.config.endswith(
            "config.json"
        ), row.family
        assert set(row.traits) <= set(TRAITS)
