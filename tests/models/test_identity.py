"""Model identity from a config.json or the family table (kvtool.models)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtool.errors import KvtoolError
from kvtool.models import TRAITS, classify_config, identify
from kvtool.models.identity import FamilyRow, families, literal_prefix

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
        # A copy the row was checked against is pinned: owner/repo@commit, then a path.
        if row.copy:
            assert re.match(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40} \S+", row.copy), row.family


# Model ids as deployments serve them (each from a public deployment file or model card), with
# the family row that must win and the traits the cited config.json shows.
# Qwen/Qwen2.5-7B-Instruct: KServe and production-stack samples; the config.json fields are in
# rules/models/families.toml next to each row.
SERVED_IDS = [
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2 / Qwen2.5 (Instruct, Coder, Math) / QwQ", {"gqa"}),
    ("Qwen2.5-7B", "Qwen2 / Qwen2.5 (Instruct, Coder, Math) / QwQ", {"gqa"}),
    ("Qwen/Qwen2.5-Coder-32B-Instruct", "Qwen2 / Qwen2.5 (Instruct, Coder, Math) / QwQ", {"gqa"}),
    ("Qwen/QwQ-32B", "Qwen2 / Qwen2.5 (Instruct, Coder, Math) / QwQ", {"gqa"}),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2-VL / Qwen2.5-VL", {"gqa", "multimodal"}),
    ("Qwen/Qwen2-VL-2B-Instruct", "Qwen2-VL / Qwen2.5-VL", {"gqa", "multimodal"}),
    ("Qwen/Qwen3-VL-8B-Instruct", "Qwen3-VL", {"gqa", "multimodal"}),
    ("Qwen/Qwen3-8B", "Qwen3", {"gqa"}),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "DeepSeek-R1-Distill (Qwen base)", {"gqa"}),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "DeepSeek-R1-Distill (Llama base)", {"gqa"}),
    ("deepseek-ai/DeepSeek-R1", "DeepSeek-V3 / R1", None),
    ("meta-llama/Llama-2-7b-chat-hf", "Llama 2", {"dense"}),
    ("meta-llama/Llama-2-70b-chat-hf", "Llama 2 70B", {"gqa"}),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama 3", {"gqa"}),
    ("meta-llama/Llama-3.3-70B-Instruct", "Llama 3", {"gqa"}),
    ("meta-llama/Llama-3.2-11B-Vision-Instruct", "Llama 3.2 Vision", {"gqa", "multimodal"}),
    (
        "mistralai/Mistral-7B-Instruct-v0.3",
        "Mistral (7B v0.2+, Nemo, Small 24B 2501, Large 2)",
        {"gqa"},
    ),
    ("mistralai/Mistral-7B-v0.1", "Mistral 7B v0.1", {"gqa", "sliding_window"}),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "Mixtral", {"gqa", "moe"}),
    ("mistralai/Ministral-8B-Instruct-2410", "Ministral 8B (2410)", {"gqa", "sliding_window"}),
    (
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "Mistral Small 3.1 / 3.2",
        {"gqa", "multimodal"},
    ),
    ("microsoft/Phi-3-mini-4k-instruct", "Phi-3 mini 4k", {"dense", "sliding_window"}),
    ("microsoft/Phi-3.5-mini-instruct", "Phi-3 / Phi-3.5 mini (128k)", {"dense"}),
    ("microsoft/phi-4", "Phi-4", {"gqa"}),
    ("microsoft/Phi-4-mini-instruct", "Phi-4", {"gqa"}),
    ("google/gemma-2-9b-it", "Gemma 2", {"gqa", "sliding_window"}),
    ("01-ai/Yi-1.5-34B-Chat", "Yi", {"gqa"}),
    ("internlm/internlm2_5-7b-chat", "InternLM 2 / 2.5 / 3", {"gqa"}),
    ("OpenGVLab/InternVL2_5-8B", "InternVL", {"gqa", "multimodal"}),
    ("allenai/OLMo-2-1124-7B-Instruct", "OLMo 2", {"dense"}),
    ("allenai/OLMoE-1B-7B-0924", "OLMoE", {"dense", "moe"}),
    ("ibm-granite/granite-3.1-8b-instruct", "Granite 3", {"gqa"}),
    ("ibm-granite/granite-3.1-3b-a800m-instruct", "Granite 3 MoE", {"gqa", "moe"}),
    ("ibm-granite/granite-4.0-h-small", "Granite 4.0-H", None),
    ("CohereForAI/c4ai-command-r-v01", "Command R (v01)", {"dense"}),
    ("CohereForAI/c4ai-command-r-plus-08-2024", "Command R+ / Command R (08-2024)", {"gqa"}),
    ("CohereLabs/c4ai-command-r7b-12-2024", "Command R7B / Command A", {"gqa", "sliding_window"}),
    ("Qwen/Qwen3-30B-A3B", "Qwen3 MoE", {"gqa", "moe"}),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3 MoE", {"gqa", "moe"}),
    ("Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen3-VL MoE", {"gqa", "moe", "multimodal"}),
    (
        "Qwen/Qwen3.6-35B-A3B",
        "Qwen3.5 / Qwen3.6 MoE",
        {"gqa", "gated_deltanet", "moe", "multimodal"},
    ),
    ("google/gemma-3-1b-it", "Gemma 3 1B (text only)", {"gqa", "sliding_window"}),
    ("google/gemma-4-26B-A4B-it", "Gemma 4 MoE", {"gqa", "sliding_window", "moe", "multimodal"}),
    ("moonshotai/Kimi-K2.6", "Kimi K2.5 and later", {"mla", "moe", "multimodal"}),
    ("zai-org/GLM-4.7-Flash", "GLM-4.7-Flash", {"mla", "moe"}),
    ("internlm/internlm-chat-7b", "InternLM (first generation)", {"dense"}),
    ("internlm/internlm3-8b-instruct", "InternLM 2 / 2.5 / 3", {"gqa"}),
    ("microsoft/Phi-4-reasoning", "Phi-4", {"gqa"}),
    # KServe, llm-d-modelservice and KubeAI samples serve it as their smallest model.
    ("facebook/opt-125m", "OPT", {"dense"}),
]


@pytest.mark.parametrize(("name", "family", "traits"), SERVED_IDS)
def test_widely_served_ids_classify_by_the_right_row(
    name: str, family: str, traits: set[str] | None
) -> None:
    identity = identify(name)
    assert identity is not None and identity.family == family, (name, identity)
    if traits is not None:
        assert identity.traits == frozenset(traits)


def test_no_family_name_pattern_is_shadowed_by_an_earlier_row() -> None:
    # A row whose own cited config repository is claimed by an earlier row can never win.
    for index, row in enumerate(families()):
        repo = row.config.removeprefix("https://huggingface.co/").split("/blob/")[0]
        winner = next(r for r in families() if r.matches(repo))
        assert winner.family == row.family, (row.family, repo, winner.family, index)


# Trimmed from the phi-3_5-vision preset (a copy of microsoft/Phi-3.5-vision-instruct's
# config.json) in mlc-ai/mlc-llm@79d603f085f50500e9509fa01785ffa7ecfaaa93
# python/mlc_llm/model/model_preset.py: the image encoder is in img_processor/embd_layer.
PHI35_VISION = {
    "architectures": ["Phi3VForCausalLM"],
    "model_type": "phi3_v",
    "embd_layer": {"embedding_cls": "image", "projection_cls": "mlp"},
    "img_processor": {"image_dim_out": 1024, "name": "clip_vision_model"},
    "hidden_size": 3072,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 131072,
    "sliding_window": 262144,
}


def test_phi3_vision_is_a_wrapper_whose_window_is_never_reached() -> None:
    identity = classify_config(PHI35_VISION, name="phi-3.5-vision", where="test")
    assert identity.traits == frozenset({"dense", "multimodal"})
    # Phi-3-mini-4k's window (2047 of 4096 positions) is reached: a sliding-window model.
    mini_4k = {**PHI35_VISION, "max_position_embeddings": 4096, "sliding_window": 2047}
    del mini_4k["embd_layer"], mini_4k["img_processor"]
    assert classify_config(mini_4k, name="phi-3-mini-4k", where="test").traits == frozenset(
        {"dense", "sliding_window"}
    )


def test_every_family_pattern_is_a_regular_expression() -> None:
    # Patterns are compiled when a name first reaches their row, not at load: this is
    # the check the load no longer makes, over the whole shipped table.
    for row in families():
        for pattern in row.patterns:
            assert re.compile(pattern).pattern == pattern, row.family


def test_a_bad_family_pattern_is_a_clear_error_when_reached() -> None:
    row = FamilyRow(family="broken", patterns=("(",), traits=("dense",), config="https://x")
    with pytest.raises(KvtoolError, match="bad row broken: not a regular expression"):
        row.matches("any-model")


_NAME_PIECES = st.sampled_from(
    ["llama-3", "qwen2", ".5", "-vl", "qwen3-", "30b", "-a3b", "meta-", "/", "2", "x", "-", "."]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_NAME_PIECES, max_size=6).map("".join), st.data())
def test_a_pattern_skipped_by_its_literal_prefix_could_not_have_matched(
    name: str, data: st.DataObject
) -> None:
    """The prefix check only saves compiling: every row matches exactly the names its
    patterns would find searched one by one."""
    row = data.draw(st.sampled_from(families()))
    row_name = data.draw(st.sampled_from([name, f"org/{row.family.lower()}-8b", row.config]))
    expected = any(re.search(p, row_name.lower()) for p in row.patterns)
    assert row.matches(row_name) == expected


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [("qwen2(\\.5)?-vl", "qwen2"), ("llama-3\\.2-\\d+b", "llama-3.2-"), ("ab?c", "a"),
     ("a|b", ""), ("(?i)llama", ""), ("^x", ""), ("x{2}", ""), ("\\", "")],
)
def test_the_literal_prefix_is_what_every_match_starts_with(pattern: str, prefix: str) -> None:
    assert literal_prefix(pattern) == prefix
