"""Goldens for the block-level figures vLLM 0.32 decides: backend block, groups, pool, dtypes.

Configs are the cited catalog entries (``rules/models/catalog.toml``) or real config.json
shapes written here with their source. Each expected value is derived in the test from
the rule vLLM applies (cited), with bytes from ``tests/sizing/cache_tensors.py``; the
oracle test (``test_vllm_end_to_end.py``) checks the same figures against vLLM itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtool.models.catalog import find_entry
from kvtool.sizing import SizingReport, compute, load_model_spec, make_deployment
from kvtool.sizing.backends import backend_table
from tests.sizing.cache_tensors import (
    ds_mla_page_bytes,
    dsa_indexer_page_bytes,
    kda_state_bytes,
    kv_page_bytes,
    mamba2_state_bytes,
    mla_page_bytes,
)

# The release these goldens were derived for (vLLM 0.32.0's layout and capacity rules).
GOLDEN_RELEASE = "0.32.0"

GIB = 1 << 30


def report(model: str, **deployment: Any) -> SizingReport:
    return compute(
        load_model_spec(model), make_deployment(vllm_version=GOLDEN_RELEASE, **deployment)
    )


def groups(r: SizingReport) -> list[tuple[str, int, int]]:
    return sorted((g.kind, g.layers, g.block_size) for g in r.kv_cache_groups)


@pytest.mark.parametrize("tp", [1, 8])
def test_mla_fp8_on_hopper_runs_flashmla_with_64_token_blocks(tp: int) -> None:
    # vLLM 0.32 platforms/cuda.py: on SM90 FLASH_ATTN_MLA comes first but takes no fp8 KV;
    # FLASHMLA (mla/flashmla.py) only takes 64-token kernel blocks.
    fp8 = report("deepseek-v3", tp=tp, kv_cache_dtype="fp8")
    assert (fp8.attention_backend, fp8.block_size) == ("FLASHMLA", 64)
    assert fp8.pool_block_bytes == 61 * mla_page_bytes(64, 512 + 64, 1)
    bf16 = report("deepseek-v3", tp=tp)
    assert (bf16.attention_backend, bf16.block_size) == ("FLASH_ATTN_MLA", 16)
    # Blackwell: FLASHINFER_MLA first, kernel blocks 32 or 64, so the smallest, 32.
    b200 = report("deepseek-v3", tp=tp, gpu="b200", kv_cache_dtype="fp8")
    assert (b200.attention_backend, b200.block_size) == ("FLASHINFER_MLA", 32)


def test_pinned_block_size_wins_for_plain_models_and_is_named() -> None:
    r = report("llama-3.1-8b", block_size=128)
    assert r.block_size == 128 and "--block-size 128" in r.block_size_reason
    assert report("llama-3.1-8b", attention_backend="FLASHMLA").block_size == 64


def test_every_known_gpu_maps_to_a_priority_list() -> None:
    table = backend_table()
    for gpu in table.gpus:
        assert report("llama-3.1-8b", gpu=gpu).attention_backend in table.backends


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_gpt_oss_two_groups_and_num_gpu_blocks_as_vllm_logs_them(tp: int, dtype: str) -> None:
    # gpt-oss-120b: 36 layers alternating sliding (window 128) and full; 8 KV heads x 64.
    # get_kv_cache_groups: two groups of 18 layers; one pool block is one group's pages.
    r = report("gpt-oss-120b", tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40)
    element = 1 if dtype == "fp8" else 2
    page = kv_page_bytes(16, 8 // tp, 64, element)
    assert groups(r) == [("full", 18, 16), ("sliding", 18, 16)]
    assert r.pool_block_bytes == 18 * page
    assert r.num_gpu_blocks == 40 * GIB // (18 * page)
    # The same number from vLLM's log gives the same GPU tier.
    again = report("gpt-oss-120b", tp=tp, kv_cache_dtype=dtype, num_gpu_blocks=r.num_gpu_blocks)
    assert again.gpu_tier_tokens == r.gpu_tier_tokens


def test_token_capacity_is_vllms_logged_figure() -> None:
    # get_max_concurrency_for_kv_cache_config: num_blocks / cdiv(max_model_len, block).
    r = report("llama-3.1-8b", num_gpu_blocks=1000, context_len=1000)
    assert r.gpu_tier_tokens == int(1000 / -(-1000 // 16) * 1000)
    # Sliding windows reserve window - 1 + in-flight tokens (+1 block); async scheduling
    # (vLLM's default) keeps two batches of --max-num-batched-tokens in flight.
    oss = report(
        "gpt-oss-120b", num_gpu_blocks=10_000, context_len=4096, max_num_batched_tokens=1024
    )
    full_blocks, sliding_blocks = 4096 // 16, -(-(128 - 1 + 2048) // 16) + 1
    assert oss.gpu_tier_tokens == int(10_000 / (full_blocks + sliding_blocks) * 4096)


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_llama4_chunked_local_attention_groups(tp: int, dtype: str) -> None:
    # Llama-4-Scout: every 4th layer global (NoPE), the other 36 chunked-local (8192).
    # Chunked local attention keeps the hybrid KV cache manager on only while
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 1 (config/vllm.py; default 1 at
    # 0.32): groups of 12 layers, 1 full + 3 chunked (llama4.py, kv_cache_utils.py). Set to
    # 0, all 48 layers are one full-attention group.
    element = 1 if dtype == "fp8" else 2
    forbidden = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}
    off = report("llama-4-scout", tp=tp, kv_cache_dtype=dtype, env=forbidden)
    assert not off.hma_enabled
    assert groups(off) == [("full", 48, 16)]
    assert off.bytes_per_block == 48 * kv_page_bytes(16, 8 // tp, 128, element)
    r = report("llama-4-scout", tp=tp, kv_cache_dtype=dtype)
    assert r.hma_enabled
    assert groups(r) == [("chunked", 12, 16)] * 3 + [("full", 12, 16)]
    assert r.pool_block_bytes == 12 * kv_page_bytes(16, 8 // tp, 128, element)
    assert r.kv_bytes_per_token == 48 * kv_page_bytes(1, 8, 128, element)


@pytest.mark.parametrize(("model", "layers"), [("glm-4.5-air", 46), ("minimax-m2", 62)])
@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_gqa_moe_models_now_supported(model: str, layers: int, tp: int, dtype: str) -> None:
    # GLM-4.5-Air and MiniMax-M2: 8 KV heads x 128 on every layer, one group.
    r = report(model, tp=tp, kv_cache_dtype=dtype)
    element = 1 if dtype == "fp8" else 2
    assert groups(r) == [("full", layers, 16)]
    assert r.kv_bytes_per_token_per_rank == layers * kv_page_bytes(1, 8 // tp, 128, element)
    assert r.pool_block_bytes == layers * kv_page_bytes(16, 8 // tp, 128, element)


def _model_dir(tmp_path: Path, config: dict[str, Any], quant: dict[str, Any] | None = None) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    if quant is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    return str(tmp_path)


LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("quantization_config", "beside", "expected"),
    [
        # nvidia/Llama-3.1-8B-Instruct-FP8 hf_quant_config.json (ModelOpt <= 0.29 layout).
        (
            None,
            {
                "producer": {"name": "modelopt", "version": "0.29.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
            },
            "fp8_e4m3",
        ),
        # ModelOpt >= 0.31 writes the same into config.json's quantization_config.
        (
            {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
            None,
            "fp8_e4m3",
        ),
        # neuralmagic/Meta-Llama-3-8B-Instruct-FP8-KV config.json (compressed-tensors).
        (
            {
                "quant_method": "compressed-tensors",
                "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
            },
            None,
            "fp8",
        ),
        # Qwen3-32B-FP8-Static-PerTensor config.json as copied in ai-dynamo/aiconfigurator
        # (src/aiconfigurator/model_configs): ModelOpt 0.31 producer with quant_algo at the
        # top level, not under "quantization": vLLM 0.32 does not mark it modelopt, so its
        # kv_cache_scheme is not read and auto stays the model dtype.
        (
            {
                "quant_algo": "FP8",
                "kv_cache_scheme": "FP8",
                "producer": {"name": "modelopt", "version": "0.31.0"},
            },
            None,
            "auto",
        ),
        # A weight-only FP8 checkpoint declares no KV scheme: auto stays the model dtype.
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, None, "auto"),
    ],
)
def test_auto_kv_dtype_follows_the_checkpoint(
    tmp_path: Path,
    quantization_config: dict[str, Any] | None,
    beside: dict[str, Any] | None,
    expected: str,
) -> None:
    config = dict(LLAMA_8B)
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    r = compute(
        load_model_spec(_model_dir(tmp_path, config, beside)),
        make_deployment(vllm_version=GOLDEN_RELEASE),
    )
    assert r.kv_cache_dtype_resolved == expected
    assert r.kv_dtype_bytes == (2 if expected == "auto" else 1)
    assert r.kv_bytes_per_token == 32 * kv_page_bytes(1, 8, 128, r.kv_dtype_bytes)


def test_modelopt_checkpoint_vllm_cannot_load_names_the_field(tmp_path: Path) -> None:
    # nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4 hf_quant_config.json (as copied in
    # ai-dynamo/aiconfigurator): producer modelopt, quantization.quant_algo MIXED_PRECISION.
    # vLLM 0.32's model_arch_config_convertor raises "Unknown ModelOpt quant algo".
    from kvtool.errors import KvtoolError

    beside = {
        "producer": {"name": "modelopt", "version": "0.44.0rc5"},
        "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8"},
    }
    with pytest.raises(KvtoolError, match=r"hf_quant_config.json: field 'quantization.quant_algo'"):
        load_model_spec(_model_dir(tmp_path, LLAMA_8B, beside))


def test_float32_config_is_downcast_like_vllm(tmp_path: Path) -> None:
    # config/model.py _resolve_auto_dtype: float32 checkpoints run in bfloat16 on CUDA.
    r = compute(
        load_model_spec(_model_dir(tmp_path, {**LLAMA_8B, "torch_dtype": "float32"})),
        make_deployment(vllm_version=GOLDEN_RELEASE),
    )
    assert (r.model_dtype, r.kv_dtype_bytes) == ("bfloat16", 2)
    assert any("downcast" in note for note in r.assumptions)


def test_llama4_no_rope_layers_contradicting_num_hidden_layers_names_the_field(
    tmp_path: Path,
) -> None:
    from kvtool.errors import KvtoolError

    config = {
        "architectures": ["Llama4ForCausalLM"],
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "head_dim": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "attention_chunk_size": 8192,
        "no_rope_layers": [1, 1, 1],
    }
    with pytest.raises(KvtoolError, match="no_rope_layers"):
        load_model_spec(_model_dir(tmp_path, config))


def _nas_block(n_heads_in_group: int | None) -> dict[str, Any]:
    attention = {"n_heads_in_group": n_heads_in_group, "no_op": n_heads_in_group is None}
    return {"attention": attention, "ffn": {"ffn_mult": 2.625, "no_op": False}}


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_nemotron_nas_per_layer_heads_and_no_op_layers(tmp_path: Path, tp: int, dtype: str) -> None:
    # Shape of nvidia/Llama-3_3-Nemotron-Super-49B-v1 config.json (model_type nemotron-nas,
    # DeciLMForCausalLM, one block_configs entry per layer; no_op attention blocks carry
    # n_heads_in_group null), with layers of 8 and 4 KV heads as in vLLM's own
    # NEMOTRON_NAS_MINI_CONFIG test fixture (n_heads_in_group 8 and 16 of 64 heads).
    blocks = [_nas_block(8)] * 6 + [_nas_block(None)] * 3 + [_nas_block(16)] * 3
    config = {
        "architectures": ["DeciLMForCausalLM"],
        "model_type": "nemotron-nas",
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_hidden_layers": len(blocks),
        "block_configs": blocks,
        "torch_dtype": "bfloat16",
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40),
    )
    element = 1 if dtype == "fp8" else 2
    # All full attention: vLLM keeps one group (UniformTypeKVCacheSpecs) of the 9 layers
    # that hold a cache; a pool block is every such layer's page.
    assert groups(r) == [("full", 9, 16)]
    pages = 6 * kv_page_bytes(16, max(1, 8 // tp), 128, element) + 3 * kv_page_bytes(
        16, max(1, 4 // tp), 128, element
    )
    assert r.pool_block_bytes == pages
    assert r.num_gpu_blocks == 40 * GIB // pages
    assert not any("multi-head" in note for note in r.assumptions)


def test_nemotron_nas_block_count_contradicting_layers_names_the_field(tmp_path: Path) -> None:
    from kvtool.errors import KvtoolError

    config = {
        "architectures": ["DeciLMForCausalLM"],
        "model_type": "nemotron-nas",
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_hidden_layers": 3,
        "block_configs": [_nas_block(8)] * 2,
    }
    with pytest.raises(KvtoolError, match="block_configs"):
        load_model_spec(_model_dir(tmp_path, config))


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_gemma4_two_page_sizes_double_the_smaller_pages_block(tp: int, dtype: str) -> None:
    # Gemma 4 31B: sliding layers 16 KV heads x 256, full layers 4 x 512 (attention_k_eq_v).
    # unify_kv_cache_spec_page_size: a smaller page that divides the largest gets a
    # proportionally larger block (kv_cache_utils.py); at TP 8 both pages are equal.
    # fp8 on H200 needs a pinned block (test_gemma4_fp8_on_hopper_...): 64 here.
    block = 64 if dtype == "fp8" else 16
    pinned = {"block_size": block} if dtype == "fp8" else {}
    r = report("gemma-4-31b", tp=tp, kv_cache_dtype=dtype, **pinned)
    element = 1 if dtype == "fp8" else 2
    sliding = kv_page_bytes(block, 16 // tp, 256, element)
    full = kv_page_bytes(block, max(1, 4 // tp), 512, element)
    assert r.pool_block_bytes == 10 * max(sliding, full)
    full_block = block * max(sliding, full) // full
    assert groups(r) == [("full", 10, full_block)] + [("sliding", 10, block)] * 5
    assert full_block == block * (2 if tp == 1 else 1)


@pytest.mark.parametrize("tp", [1, 8])
def test_gemma4_fp8_on_hopper_needs_a_block_fa4_can_split(tp: int) -> None:
    # vLLM 0.32 on SM90: FA3 stops at head size 256, so the 512-dim full layers run on FA4
    # (fa_utils.py get_flash_attn_version), whose fp8-KV kernel takes exactly 64-token
    # pages (flash_attn.py _get_sm90_fa4_fp8_kv_block_size). vLLM's default block follows
    # the config's head_dim (256): 16, doubled to 32 for the full layers at TP 1, and the
    # worker's select_common_block_size finds no kernel block (v1/worker/utils.py).
    from kvtool.errors import KvtoolError

    full_block = 16 * (2 if tp == 1 else 1)
    with pytest.raises(KvtoolError, match=rf"exactly 64 tokens.*{full_block}-token blocks"):
        report("gemma-4-31b", tp=tp, kv_cache_dtype="fp8")
    # The suggested pin: its full-layer block (x2 at TP 1) is a multiple of 64.
    suggested = 64 // (2 if tp == 1 else 1)
    r = report("gemma-4-31b", tp=tp, kv_cache_dtype="fp8", block_size=suggested)
    assert dict((kind, b) for kind, _, b in groups(r))["full"] == 64
    # bf16 runs every layer on FA4 with blocks of any multiple of 16; Blackwell and Ampere
    # pick other backends: none is refused.
    assert report("gemma-4-31b", tp=tp).block_size == 16
    assert report("gemma-4-31b", tp=tp, kv_cache_dtype="fp8", gpu="b200").block_size == 16


def test_gemma4_kv_shared_layers_hold_no_cache(tmp_path: Path) -> None:
    # gemma-4-E2B-style text config: the last num_kv_shared_layers reuse earlier caches.
    config = {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "hidden_size": 1536,
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 512,
        "num_kv_shared_layers": 6,
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)), make_deployment(vllm_version=GOLDEN_RELEASE)
    )
    # Layers 0-5 hold caches: five sliding, then layer 5 is the first full one (5:1).
    assert r.kv_bytes_per_token == 5 * kv_page_bytes(1, 1, 256, 2) + kv_page_bytes(1, 1, 512, 2)


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_mimo_v2_different_k_and_v_head_sizes_and_sliding_groups(
    tmp_path: Path, tp: int, dtype: str
) -> None:
    # Field names of XiaomiMiMo/MiMo-V2-Flash config.json as vLLM's mimo_v2.py reads them
    # (hybrid_layer_pattern, swa_num_key_value_heads, swa_head_dim, swa_v_head_dim,
    # sliding_window_size, head_dim, v_head_dim); the sizes here are illustrative.
    pattern = [0, 1, 1, 1, 1, 1] * 2
    config = {
        "architectures": ["MiMoV2FlashForCausalLM"],
        "model_type": "mimo_v2_flash",
        "hidden_size": 4096,
        "num_hidden_layers": len(pattern),
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 192,
        "v_head_dim": 128,
        "swa_num_attention_heads": 64,
        "swa_num_key_value_heads": 8,
        "swa_head_dim": 192,
        "swa_v_head_dim": 128,
        "sliding_window_size": 128,
        "hybrid_layer_pattern": pattern,
        "torch_dtype": "bfloat16",
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype),
    )
    element = 1 if dtype == "fp8" else 2
    per_token_layer = (8 // tp) * (192 + 128) * element  # K and V pages of unequal width
    assert r.kv_bytes_per_token_per_rank == 12 * per_token_layer
    # 2 full + 10 sliding: groups of 2 layers (the smaller kind's count).
    assert groups(r) == [("full", 2, 16)] + [("sliding", 2, 16)] * 5
    assert r.pool_block_bytes == 2 * 16 * per_token_layer


# 20 query heads: TP 8 does not divide them (vLLM refuses it too), so TP 4 is the wide case.
@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (4, "auto"), (1, "fp8"), (4, "fp8")])
def test_glm47_flash_latent_attention(tmp_path: Path, tp: int, dtype: str) -> None:
    # GLM-4.7-Flash (model_type glm4_moe_lite): the geometry of transformers'
    # models/glm4_moe_lite/configuration_glm4_moe_lite.py defaults (47 layers, 20 heads,
    # kv_lora_rank 512, qk_rope_head_dim 64), as zai-org/GLM-4.7-Flash config.json names it.
    config = {
        "architectures": ["Glm4MoeLiteForCausalLM"],
        "model_type": "glm4_moe_lite",
        "hidden_size": 2048,
        "num_hidden_layers": 47,
        "num_attention_heads": 20,
        "num_key_value_heads": 20,
        "kv_lora_rank": 512,
        "q_lora_rank": 768,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "torch_dtype": "bfloat16",
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype),
    )
    element = 1 if dtype == "fp8" else 2
    assert r.kv_bytes_per_token_per_rank == 47 * mla_page_bytes(1, 512 + 64, element)
    assert r.block_size == (64 if dtype == "fp8" else 16)  # FlashMLA for fp8 on Hopper
    assert r.pool_block_bytes == 47 * mla_page_bytes(r.block_size, 512 + 64, element)
    from kvtool.errors import KvtoolError

    with pytest.raises(KvtoolError, match="num_attention_heads 20"):
        compute(load_model_spec(str(tmp_path)), make_deployment(vllm_version=GOLDEN_RELEASE, tp=8))


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_qwen3_vl_text_part(tmp_path: Path, tp: int, dtype: str) -> None:
    # Qwen3-VL: the KV cache is the text model's (text_config, model_type qwen3_vl_text);
    # geometry of transformers' Qwen3VLTextConfig defaults (checkpoint Qwen/Qwen3-VL-4B-Instruct
    # docstring): 32 layers, 32 KV heads x 128.
    config = {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "text_config": {
            "model_type": "qwen3_vl_text",
            "hidden_size": 4096,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "head_dim": 128,
            "torch_dtype": "bfloat16",
        },
        "vision_config": {"depth": 27, "hidden_size": 1152},
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype),
    )
    element = 1 if dtype == "fp8" else 2
    assert groups(r) == [("full", 32, 16)]
    assert r.kv_bytes_per_token_per_rank == 32 * kv_page_bytes(1, 32 // tp, 128, element)


# transformers' NemotronHConfig names per block (current and legacy) -> pattern letter.
_BLOCK_NAMES = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_nemotron_h_layers_block_type_reads_as_the_pattern(
    tmp_path: Path, tp: int, dtype: str
) -> None:
    # nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B config.json (as copied in
    # ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs) lists its
    # blocks in layers_block_type ("mamba", "moe", "attention") and has no
    # hybrid_override_pattern; transformers' NemotronHConfig derives the pattern from the
    # list, which vLLM's nemotron_h.py reads. The same blocks must size alike.
    entry = find_entry("nemotron-h-8b")
    assert entry is not None
    config = dict(entry.config)
    pattern = config.pop("hybrid_override_pattern")
    config["layers_block_type"] = [_BLOCK_NAMES[c] for c in pattern]
    listed = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40),
    )
    lettered = report("nemotron-h-8b", tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40)
    assert groups(listed) == groups(lettered)
    assert (listed.block_size, listed.pool_block_bytes, listed.state_page_bytes) == (
        lettered.block_size,
        lettered.pool_block_bytes,
        lettered.state_page_bytes,
    )
    assert listed.num_gpu_blocks == lettered.num_gpu_blocks


def test_nemotron_h_unknown_block_type_names_the_field(tmp_path: Path) -> None:
    from kvtool.errors import KvtoolError

    config = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "layers_block_type": ["mamba", "attention", "conv"],
        "hidden_size": 1024,
        "num_attention_heads": 8,
    }
    with pytest.raises(KvtoolError, match="'layers_block_type' has unknown block types"):
        load_model_spec(_model_dir(tmp_path, config))


# Plain GQA decoders that vLLM 0.32 builds like llama.py: one full-attention group of
# num_key_value_heads x (head_dim, else hidden_size / num_attention_heads). Shapes as in
# the configs copied in mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py @ 79d603f
# (aya-23, stablelm-2-zephyr-1_6b, internlm2_5-7b, MiniCPM-2B, deepseek-moe-16b,
# Ministral-3-3B text_config) and ai-dynamo/aiconfigurator model_configs (MiMo-7B-Base).
GQA_DECODERS = {
    "cohere": ("CohereForCausalLM", 4096, 32, 32, 8, {}),
    "stablelm": ("StableLmForCausalLM", 2560, 32, 32, 32, {}),
    "internlm2": ("InternLM2ForCausalLM", 4096, 32, 32, 8, {}),
    "minicpm": ("MiniCPMForCausalLM", 2304, 40, 36, 36, {}),
    "deepseek": ("DeepseekForCausalLM", 2048, 28, 16, 16, {}),
    # GLM-4-0414: transformers' Glm4Config defaults.
    "glm4": ("Glm4ForCausalLM", 4096, 40, 32, 2, {"head_dim": 128}),
    # Qwen2-style window switched off: use_sliding_window false.
    "mimo": (
        "MiMoForCausalLM",
        4096,
        36,
        32,
        8,
        {"head_dim": 128, "sliding_window": 32768, "use_sliding_window": False},
    ),
}


@pytest.mark.parametrize("model_type", sorted(GQA_DECODERS))
@pytest.mark.parametrize("dtype", ["auto", "fp8"])
def test_gqa_decoders_size_as_one_full_group(tmp_path: Path, model_type: str, dtype: str) -> None:
    arch, hidden, layers, heads, kv_heads, extra = GQA_DECODERS[model_type]
    config = {
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "torch_dtype": "bfloat16",
        **extra,
    }
    tp = 4  # divides every head count above (vLLM refuses a TP that does not)
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40),
    )
    element = 1 if dtype == "fp8" else 2
    head = int(extra.get("head_dim", hidden // heads))
    assert groups(r) == [("full", layers, 16)]
    assert r.pool_block_bytes == layers * kv_page_bytes(16, max(1, kv_heads // tp), head, element)
    assert r.num_gpu_blocks == 40 * GIB // r.pool_block_bytes


def test_ministral3_text_part_is_mistral(tmp_path: Path) -> None:
    # Mistral3ForConditionalGeneration with a text_config of model_type ministral3
    # (Ministral-3-3B-Instruct-2512): vLLM builds the text part with mistral.py.
    config = {
        "architectures": ["Mistral3ForConditionalGeneration"],
        "model_type": "mistral3",
        "text_config": {
            "model_type": "ministral3",
            "hidden_size": 3072,
            "num_hidden_layers": 26,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "sliding_window": None,
        },
        "torch_dtype": "bfloat16",
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=8),
    )
    assert groups(r) == [("full", 26, 16)]
    assert r.kv_bytes_per_token_per_rank == 26 * kv_page_bytes(1, 1, 128, 2)


def test_starcoder2_window_slides_on_every_layer(tmp_path: Path) -> None:
    # bigcode/starcoder2-7b (as copied in mlc-ai/mlc-llm model_preset.py): sliding_window
    # 4096 and no layer_types. vLLM 0.32 runs it on
    # the Transformers backend, where the model-level window (CacheConfig.sliding_window,
    # set by EngineArgs when layer_types is absent) applies to every layer.
    config = {
        "architectures": ["Starcoder2ForCausalLM"],
        "model_type": "starcoder2",
        "hidden_size": 4608,
        "num_hidden_layers": 32,
        "num_attention_heads": 36,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
    }
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=4),
    )
    assert groups(r) == [("sliding", 32, 16)]
    assert r.kv_bytes_per_token_per_rank == 32 * kv_page_bytes(1, 1, 128, 2)


FALCON_H1_7B = {
    # tiiuae/Falcon-H1-7B-Instruct config.json, the fields sizing reads, as quoted in public
    # test code (a Swift context-sizing suite: "attention and Mamba-2 side by side in every
    # layer"); 44 layers, 2 KV heads x 128, Mamba-2 24 heads x 128, d_ssm 3072, state 256.
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "hidden_size": 3072,
    "num_hidden_layers": 44,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_d_conv": 4,
    "mamba_d_head": 128,
    "mamba_d_ssm": 3072,
    "mamba_d_state": 256,
    "mamba_expand": 2,
    "mamba_n_groups": 1,
    "mamba_n_heads": 24,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (2, "auto"), (1, "fp8"), (2, "fp8")])
def test_falcon_h1_every_layer_holds_attention_and_state(
    tmp_path: Path, tp: int, dtype: str
) -> None:
    # falcon_h1.py: FalconH1ParallelHybrid runs attention and a Mamba-2 mixer in each of the
    # 44 layers, so 44 KV pages and 44 state pages; vLLM raises the block until one
    # attention page covers the state page (platforms/interface.py
    # _align_hybrid_block_size) and pads the state page to it. 12 query heads: TP 8 does
    # not divide them (vLLM refuses it too), so TP 2 is the split case.
    r = compute(
        load_model_spec(_model_dir(tmp_path, FALCON_H1_7B)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40),
    )
    element = 1 if dtype == "fp8" else 2
    kv_heads = max(1, 2 // tp)
    state = mamba2_state_bytes(24 // tp, 128, 1, 256, 4, conv_bytes=2, ssm_bytes=2)
    per_token = kv_page_bytes(1, kv_heads, 128, element)
    block = 16 * -(-state // (16 * per_token))
    assert r.state_page_bytes == state
    assert r.block_size == block
    assert r.state_page_padded_bytes == kv_page_bytes(block, kv_heads, 128, element)
    assert r.kv_bytes_per_token_per_rank == 44 * per_token
    assert groups(r) == [("full", 44, block), ("state", 44, block)]


def test_falcon_h1_mixer_width_that_is_not_heads_x_head_dim_names_the_field(
    tmp_path: Path,
) -> None:
    from kvtool.errors import KvtoolError

    config = {**FALCON_H1_7B, "mamba_d_ssm": 4096}
    with pytest.raises(KvtoolError, match="'mamba_d_ssm'"):
        load_model_spec(_model_dir(tmp_path, config))


MIMO_V2_FLASH = {
    # XiaomiMiMo/MiMo-V2-Flash config.json as copied in ai-dynamo/aiconfigurator
    # (aic-core/src/aiconfigurator_core/model_configs): 48 layers, 9 full by
    # hybrid_layer_pattern, full layers 4 KV heads, sliding layers 8, K 192 and V 128 wide.
    "architectures": ["MiMoV2FlashForCausalLM"],
    "model_type": "mimo_v2_flash",
    "hidden_size": 4096,
    "num_hidden_layers": 48,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 192,
    "v_head_dim": 128,
    "swa_num_attention_heads": 64,
    "swa_num_key_value_heads": 8,
    "swa_head_dim": 192,
    "swa_v_head_dim": 128,
    "sliding_window": 128,
    "sliding_window_size": 128,
    "hybrid_layer_pattern": [0, 1, 1, 1, 1] + [0, 1, 1, 1, 1, 1] * 7 + [0],
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_mimo_v2_flash_full_layers_with_half_the_heads_double_their_block(
    tmp_path: Path, tp: int, dtype: str
) -> None:
    # A full layer's page (4 KV heads) is half a sliding layer's (8): vLLM 0.32 makes the
    # page sizes equal by raising the smaller page's block (kv_cache_utils
    # unify_kv_cache_spec_page_size), so at TP 1 the full group runs 32-token blocks. At
    # TP 8 both kinds hold one KV head per rank and keep the 16-token block.
    r = compute(
        load_model_spec(_model_dir(tmp_path, MIMO_V2_FLASH)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40),
    )
    element = 1 if dtype == "fp8" else 2
    full_heads, sliding_heads = max(1, 4 // tp), max(1, 8 // tp)
    full_block = 16 * sliding_heads // full_heads
    kinds = {(g.kind, g.block_size) for g in r.kv_cache_groups}
    assert kinds == {("full", full_block), ("sliding", 16)}
    assert {g.page_bytes for g in r.kv_cache_groups} == {16 * sliding_heads * 320 * element}
    assert sum(g.layers for g in r.kv_cache_groups if g.kind == "full") == 9
    assert sum(g.layers for g in r.kv_cache_groups if g.kind == "sliding") == 39


COMMAND_R7B = {
    # Command R7B shape (model_type cohere2): transformers' Cohere2Config defaults,
    # sliding_window 4096 and sliding_window_pattern 4, as public cohere2 test configs write
    # them, on a 32-layer, 8-KV-head geometry; newer configs list layer_types instead.
    "architectures": ["Cohere2ForCausalLM"],
    "model_type": "cohere2",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "sliding_window_pattern": 4,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("layer_types", [False, True])
def test_cohere2_every_fourth_layer_global_and_window_plus_one(
    tmp_path: Path, layer_types: bool
) -> None:
    # commandr.py gives sliding layers sliding_window + 1 (they see the window plus the
    # current token).
    config: dict[str, Any] = dict(COMMAND_R7B)
    if layer_types:
        del config["sliding_window_pattern"]
        config["layer_types"] = [
            "full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(32)
        ]
    spec = load_model_spec(_model_dir(tmp_path, config))
    windows = {g.kind.value: (g.num_layers, g.sliding_window) for g in spec.attention}
    assert windows == {"full": (8, None), "sliding": (24, 4097)}
    r = compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, tp=8, gpu_kv_gib=40))
    assert groups(r) == [("full", 8, 16)] + [("sliding", 8, 16)] * 3
    assert r.pool_block_bytes == 8 * kv_page_bytes(16, 1, 128, 2)


CHATGLM3_6B = {
    # ChatGLM2/3-6B config.json as copied in mlc-ai/mlc-llm model_preset.py ("chatglm"):
    # num_layers (not num_hidden_layers), multi_query_group_num KV heads.
    "architectures": ["ChatGLMModel"],
    "model_type": "chatglm",
    "hidden_size": 4096,
    "num_layers": 28,
    "num_attention_heads": 32,
    "multi_query_attention": True,
    "multi_query_group_num": 2,
    "kv_channels": 128,
    "seq_length": 8192,
    "torch_dtype": "float16",
}


@pytest.mark.parametrize("multi_query", [True, False])
@pytest.mark.parametrize("tp", [1, 8])
def test_chatglm_kv_heads_from_multi_query_group_num(
    tmp_path: Path, multi_query: bool, tp: int
) -> None:
    # chatglm.py GLMAttention: multi_query_group_num KV heads when multi_query_attention,
    # else one per query head; head size hidden_size / num_attention_heads.
    config = {**CHATGLM3_6B, "multi_query_attention": multi_query}
    spec = load_model_spec(_model_dir(tmp_path, config))
    r = compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, gpu_kv_gib=40))
    kv_heads = max(1, (2 if multi_query else 32) // tp)
    assert groups(r) == [("full", 28, 16)]
    assert r.pool_block_bytes == 28 * kv_page_bytes(16, kv_heads, 128, 2)
    assert not any("num_key_value_heads" in note for note in spec.assumptions)


# DeepSeek-V3.2 and GLM-5 (catalog entries): 61 / 78 layers, kv_lora_rank 512 + rope 64,
# index_head_dim 128, an indexer on every layer.
SPARSE_MLA_LAYERS = {"deepseek-v3.2": 61, "glm-5": 78}


@pytest.mark.parametrize("model", sorted(SPARSE_MLA_LAYERS))
@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_sparse_mla_latent_and_indexer_pages_share_one_group(
    model: str, tp: int, dtype: str
) -> None:
    # vLLM 0.32 on SM90 (platforms/cuda.py): only the sparse backends serve a config with
    # index_topk; FLASH_ATTN_MLA_SPARSE takes no fp8, so fp8 runs FLASHMLA_SPARSE, which
    # stores it as fp8_ds_mla (mla_attention.py). Both take MultipleOf(64) and the indexer
    # backend exactly 64, so the block is 64. The latent and indexer specs are both
    # MLAAttentionSpec: one UniformTypeKVCacheSpecs group, a pool block is every page.
    layers = SPARSE_MLA_LAYERS[model]
    r = report(model, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40, context_len=4096)
    latent = ds_mla_page_bytes(64, 512, 64, 128) if dtype == "fp8" else mla_page_bytes(64, 576, 2)
    indexer = dsa_indexer_page_bytes(64, 128, 128)
    backend = "FLASHMLA_SPARSE" if dtype == "fp8" else "FLASH_ATTN_MLA_SPARSE"
    assert (r.attention_backend, r.block_size) == (backend, 64)
    (group,) = r.kv_cache_groups
    assert (group.kind, group.layers, group.page_bytes) == ("mla", 2 * layers, latent)
    assert sorted((p.page_bytes, p.layers) for p in group.layer_pages) == sorted(
        [(latent, layers), (indexer, layers)]
    )
    assert r.pool_block_bytes == layers * (latent + indexer)
    assert r.num_gpu_blocks == 40 * GIB // r.pool_block_bytes
    # get_max_concurrency_for_kv_cache_config: blocks / cdiv(4096, 64) x 4096.
    assert r.gpu_tier_tokens == int(r.num_gpu_blocks / (4096 // 64) * 4096)
    # Every rank holds the whole latent and the whole indexer key (replicated).
    assert r.kv_bytes_per_token_per_rank == layers * (latent + indexer) // 64


def test_shared_indexer_layers_hold_no_indexer_cache(tmp_path: Path) -> None:
    # GLM-5.2 shape: index_topk_freq 4, index_skip_topk_offset 3. vLLM 0.32
    # models/deepseek_v32/attention.py builds an indexer where
    # max(i - offset + 1, 0) % freq == 0: layers 0-2, then 6, 10, ..., 74 of 78 (21).
    entry = find_entry("glm-5")
    assert entry is not None
    config = {**entry.config, "index_topk_freq": 4, "index_skip_topk_offset": 3}
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)), make_deployment(vllm_version=GOLDEN_RELEASE)
    )
    indexed = [i for i in range(78) if max(i - 3 + 1, 0) % 4 == 0]
    assert len(indexed) == 3 + len(range(6, 78, 4))
    latent, indexer = mla_page_bytes(64, 576, 2), dsa_indexer_page_bytes(64, 128, 128)
    assert r.pool_block_bytes == 78 * latent + len(indexed) * indexer
    # An explicit index_topk_pattern wins: "S" marks a layer that skips the indexer.
    pattern = {**config, "index_topk_pattern": "FS" * 39}
    r = compute(
        load_model_spec(_model_dir(tmp_path, pattern)), make_deployment(vllm_version=GOLDEN_RELEASE)
    )
    assert r.pool_block_bytes == 78 * latent + 39 * indexer


def test_sparse_mla_without_index_topk_names_the_field(tmp_path: Path) -> None:
    from kvtool.errors import KvtoolError

    entry = find_entry("deepseek-v3.2")
    assert entry is not None
    config = {k: v for k, v in entry.config.items() if k != "index_topk"}
    with pytest.raises(KvtoolError, match="index_topk"):
        load_model_spec(_model_dir(tmp_path, config))


def test_blackwell_sparse_mla_fp8_prefers_flashinfer_and_keeps_block_64() -> None:
    # platforms/cuda.py SM100 with an fp8 KV cache: FLASHINFER_MLA_SPARSE first
    # (MultipleOf(32)); with the indexer's [64] the common block is lcm(32, 64) = 64,
    # and fp8 stays plain fp8 (576 B): only FLASHMLA_SPARSE packs fp8_ds_mla.
    r = report("deepseek-v3.2", gpu="b200", kv_cache_dtype="fp8")
    assert (r.attention_backend, r.block_size) == ("FLASHINFER_MLA_SPARSE", 64)
    assert r.pool_block_bytes == 61 * (
        mla_page_bytes(64, 576, 1) + dsa_indexer_page_bytes(64, 128, 128)
    )


def test_glm5_auto_kv_dtype_is_fp8_on_blackwell_only() -> None:
    # vLLM 0.32 models/config.py GlmMoeDsaForCausalLM.verify_and_update_config: "auto"
    # becomes fp8_e4m3 on SM100-family GPUs; Hopper keeps the bf16 model dtype.
    b200 = report("glm-5", gpu="b200")
    assert (b200.kv_cache_dtype_resolved, b200.kv_dtype_bytes) == ("fp8_e4m3", 1)
    assert any("config hook" in note for note in b200.assumptions)
    assert report("glm-5").kv_cache_dtype_resolved == "auto"
    assert report("glm-5", gpu="b200", kv_cache_dtype="bfloat16").kv_dtype_bytes == 2
    # DeepSeek-V3.2 has no such hook.
    assert report("deepseek-v3.2", gpu="b200").kv_cache_dtype_resolved == "auto"


def test_a_pinned_block_no_kernel_divides_is_refused_naming_the_backends() -> None:
    from kvtool.errors import KvtoolError

    # v1/worker/utils.py select_common_block_size: the kernel block must divide the block;
    # the DSA indexer's backend takes exactly 64, FLASH_ATTN multiples of 16.
    with pytest.raises(KvtoolError, match="DEEPSEEK_V32_INDEXER"):
        report("deepseek-v3.2", block_size=32)
    assert report("deepseek-v3.2", block_size=128).block_size == 128
    with pytest.raises(KvtoolError, match=r"--block-size 8: .*FLASH_ATTN"):
        report("llama-3.1-8b", block_size=8)
    # A hybrid's block is raised past the pinned one, as vLLM does, so it is not refused.
    assert report("qwen3-coder-next", block_size=8).block_size % 16 == 0


def _kimi_linear_48b() -> dict[str, Any]:
    # The catalog entry (rules/models/catalog.toml, cited there): 27 layers, KDA on the
    # 1-based kda_layers (20), MLA on 4, 8, ..., 24, 27 (7); KDA 32 heads x 128, conv 4.
    entry = find_entry("kimi-linear-48b")
    assert entry is not None
    return dict(entry.config)


KIMI_K3_FULL_LAYERS = [*range(4, 93, 4), 93]
KIMI_K3 = {
    # moonshotai/Kimi-K3 config.json as copied in ai-dynamo/aiconfigurator
    # (aic-core/src/aiconfigurator_core/model_configs/moonshotai--Kimi-K3_config.json):
    # a multimodal wrapper whose text_config is kimi_linear, 93 layers, MLA on every 4th
    # (1-based) and the last, KDA on the other 69 with 96 heads x 128 and a full-rank gate.
    "architectures": ["KimiK3ForConditionalGeneration"],
    "model_type": "kimi_k3",
    "dtype": "bfloat16",
    "text_config": {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "hidden_size": 7168,
        "num_hidden_layers": 93,
        "num_attention_heads": 96,
        "num_key_value_heads": 96,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mla_use_nope": True,
        "linear_attn_config": {
            "full_attn_layers": KIMI_K3_FULL_LAYERS,
            "kda_layers": [n for n in range(1, 94) if n not in KIMI_K3_FULL_LAYERS],
            "head_dim": 128,
            "num_heads": 96,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
        },
        "dtype": "bfloat16",
    },
}


@pytest.mark.parametrize(
    ("model", "mla_layers", "kda_layers", "heads", "layer_groups"),
    [
        ("kimi-linear-48b", 7, 20, 32, [7, 7, 6]),
        ("kimi-k3", 24, 69, 96, [23, 23, 23]),
    ],
    ids=["kimi-linear-48b", "kimi-k3"],
)
@pytest.mark.parametrize(("tp", "dtype"), [(1, "auto"), (8, "auto"), (1, "fp8"), (8, "fp8")])
def test_kimi_delta_attention_state_and_mla_share_one_block(
    tmp_path: Path,
    model: str,
    mla_layers: int,
    kda_layers: int,
    heads: int,
    layer_groups: list[int],
    tp: int,
    dtype: str,
) -> None:
    # vLLM 0.32 models/kimi_k3/nvidia/model.py: KDA where is_kda_layer, MLA (latent
    # 512 + 64, replicated) elsewhere. KDA state (mamba_utils.py kda_state_shape /
    # kda_state_dtype): conv 3 x heads x 128 wide in the model dtype, recurrent heads x 128
    # x 128 in float32 under "auto"; heads split by TP. _align_hybrid_block_size raises
    # the block in steps of 128 (MLA hybrids) until one latent page covers the state page.
    config = _kimi_linear_48b() if model == "kimi-linear-48b" else KIMI_K3
    r = compute(
        load_model_spec(_model_dir(tmp_path, config)),
        make_deployment(vllm_version=GOLDEN_RELEASE, tp=tp, kv_cache_dtype=dtype, gpu_kv_gib=40),
    )
    element = 1 if dtype == "fp8" else 2
    state = kda_state_bytes(heads // tp, 128, 4, conv_bytes=2, ssm_bytes=4)
    per_token = mla_page_bytes(1, 512 + 64, element)
    block = 128 * -(-state // (128 * per_token))
    assert r.attention_backend == ("FLASHMLA" if dtype == "fp8" else "FLASH_ATTN_MLA")
    assert (r.state_page_bytes, r.block_size) == (state, block)
    assert r.state_page_padded_bytes == mla_page_bytes(block, 512 + 64, element)
    assert r.kv_bytes_per_token_per_rank == mla_layers * per_token
    assert r.state_bytes_per_sequence_per_rank == kda_layers * state
    # get_kv_cache_groups: the state layers split into groups no larger than the MLA
    # group; one pool block is the largest group's pages.
    assert groups(r) == sorted(
        [("mla", mla_layers, block)] + [("state", n, block) for n in layer_groups]
    )
    assert r.pool_block_bytes == max(mla_layers, *layer_groups) * r.state_page_padded_bytes
    assert r.num_gpu_blocks == 40 * GIB // r.pool_block_bytes


def test_kimi_linear_kda_layers_outside_the_model_name_the_field(tmp_path: Path) -> None:
    from kvtool.errors import KvtoolError

    config = _kimi_linear_48b()
    linear = {**config["linear_attn_config"], "kda_layers": [1, 2, 28]}
    with pytest.raises(KvtoolError, match=r"'linear_attn_config.kda_layers' names layers \[28\]"):
        load_model_spec(_model_dir(tmp_path, {**config, "linear_attn_config": linear}))
    without = {k: v for k, v in config.items() if k != "linear_attn_config"}
    with pytest.raises(KvtoolError, match="'linear_attn_config'"):
        load_model_spec(_model_dir(tmp_path, without))
    # TP must split the KDA heads, as vLLM's divide() requires (24 KDA heads, TP 16).
    linear = {**config["linear_attn_config"], "num_heads": 24}
    spec = load_model_spec(_model_dir(tmp_path, {**config, "linear_attn_config": linear}))
    with pytest.raises(KvtoolError, match=r"linear_attn_config\.num_heads 24"):
        compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, tp=16))
