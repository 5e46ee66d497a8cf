"""Golden sizing figures, one per architecture class and formula (sizing.md §3.3 and §4.3).

Every golden value is asserted twice: the report ``kvtool.sizing`` computes must equal the
cited number, and the cited number must equal a second derivation written here from the
cited geometry (byte counts of torch tensors shaped like the cache, or the formula spelled
out with the worked-example inputs). "sizing.md" is /work/shared/reference/sizing.md.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from kvtool.sizing import SizingReport, compute, load_model_spec, make_deployment
from kvtool.sizing.arithmetic import kaito_l1_gib, total_from_per_rank_gib
from tests.sizing.cache_tensors import (
    gdn_state_bytes,
    kv_page_bytes,
    mamba1_state_bytes,
    mamba2_state_bytes,
    mla_page_bytes,
    model_kv_bytes,
)

# The release these goldens were derived for (vLLM 0.32.0's layout and capacity rules).
GOLDEN_RELEASE = "0.32.0"

GIB = 1 << 30


def report(model: str, **deployment: Any) -> SizingReport:
    return compute(
        load_model_spec(model), make_deployment(vllm_version=GOLDEN_RELEASE, **deployment)
    )


# G-B*: bytes per token for the whole model, BF16 unless noted (sizing.md §3.3 / §4.3).
# Geometry (layers, KV heads, head_dim) is the one the table cites for each model.
@pytest.mark.parametrize(
    ("model", "kv_dtype", "golden", "layers", "kv_heads", "head_dim", "element"),
    [
        ("llama-3.1-8b", "auto", 131_072, 32, 8, 128, 2),  # G-B1
        ("llama-3.1-8b", "fp8", 65_536, 32, 8, 128, 1),  # G-B1 FP8
        ("llama-3.1-70b", "auto", 327_680, 80, 8, 128, 2),  # G-B2
        ("qwen3-14b", "auto", 163_840, 40, 8, 128, 2),  # G-B3
        ("qwen3-32b", "auto", 262_144, 64, 8, 128, 2),  # G-B3
        ("mistral-7b-v0.3", "auto", 131_072, 32, 8, 128, 2),  # G-B4
        ("qwen3-8b", "auto", 147_456, 36, 8, 128, 2),  # G-B8 row (§3.3 Qwen3-8B)
        ("qwen3-30b-a3b", "auto", 98_304, 48, 4, 128, 2),  # MoE: config L48 KV4 D128
    ],
)
def test_dense_bytes_per_token(
    model: str, kv_dtype: str, golden: int, layers: int, kv_heads: int, head_dim: int, element: int
) -> None:
    assert report(model, kv_cache_dtype=kv_dtype).kv_bytes_per_token == golden
    assert model_kv_bytes(1, layers, kv_heads, head_dim, element) == golden


def test_llama_70b_gib_per_1k_tokens_matches_lmcache_faq() -> None:
    # G-B2: the LMCache FAQ lists 0.3052 GiB per 1k tokens for Llama-3.1-70B.
    r = report("llama-3.1-70b")
    assert round(r.kv_bytes_per_token * 1000 / GIB, 4) == 0.3052


def test_qwen3_8b_gib_per_1k_tokens_matches_lmcache_faq() -> None:
    # G-B8: FAQ 0.1373 GiB per 1k tokens.
    assert round(report("qwen3-8b").kv_bytes_per_token * 1000 / GIB, 4) == 0.1373


def test_mla_deepseek_v3() -> None:
    # G-B5: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) = 70,272 (bf16), 35,136 (fp8).
    assert report("deepseek-v3").kv_bytes_per_token == 70_272
    assert report("deepseek-v3", kv_cache_dtype="fp8").kv_bytes_per_token == 35_136
    assert sum(mla_page_bytes(1, 512 + 64, 2) for _ in range(61)) == 70_272
    # G-T4: every TP rank holds the whole latent; the naive sum over TP8 is 562,176.
    r = report("deepseek-v3", tp=8)
    assert r.kv_bytes_per_token_per_rank == 70_272
    assert r.kv_bytes_per_token_all_ranks == 562_176 == 8 * mla_page_bytes(1, 576, 2) * 61
    assert r.kv_bytes_per_token_stored_native == 70_272  # deduplicated
    assert "mla-latent-replicated" in {w.code for w in r.warnings}


def test_sliding_window_gemma3() -> None:
    # G-B6: 48 layers = 40 sliding (window 1024) + 8 full, 8 KV heads, head_dim 256.
    r = report("gemma-3-12b", context_len=100_000)
    assert r.kv_bytes_per_token == 393_216 == model_kv_bytes(1, 48, 8, 256, 2)
    assert r.kv_bytes_per_token_full_attention_only == 65_536 == model_kv_bytes(1, 8, 8, 256, 2)
    # G-H2: a 100k-token sequence is 39.32 GB in all layers, 6.889 GB GPU-resident with HMA.
    assert r.request_bytes_stored == 39_321_600_000
    assert r.gpu_resident_request_bytes_per_rank == 6_889_144_320
    assert model_kv_bytes(100_000, 8, 8, 256, 2) + 40 * kv_page_bytes(1024, 8, 256, 2) == (
        6_889_144_320
    )


def test_sliding_window_gpt_oss() -> None:
    # G-B7: 36 layers = 18 sliding (window 128) + 18 full, 8 KV heads, head_dim 64.
    r = report("gpt-oss-120b")
    assert r.kv_bytes_per_token == 73_728 == model_kv_bytes(1, 36, 8, 64, 2)
    assert r.kv_bytes_per_token_full_attention_only == 36_864 == model_kv_bytes(1, 18, 8, 64, 2)
    assert "kaito-offload-disabled" in {w.code for w in r.warnings}  # sizing.md §1.4


def test_mistral_v01_every_layer_slides() -> None:
    # sizing.md §3.3: v0.1 has sliding_window 4096 on all layers; offload still stores all.
    r = report("mistral-7b-v0.1", context_len=10_000)
    assert r.kv_bytes_per_token == 131_072
    assert r.kv_bytes_per_token_full_attention_only == 0
    assert r.gpu_resident_request_bytes_per_rank == 32 * kv_page_bytes(4096, 8, 128, 2)


@pytest.mark.parametrize(
    ("model", "tp", "per_rank", "all_ranks"),
    [
        ("llama-3.1-8b", 2, 65_536, 131_072),  # G-T1
        ("llama-3.1-70b", 8, 40_960, 327_680),  # G-T2
        ("llama-3.1-70b", 16, 40_960, 655_360),  # G-T3: 8 KV heads over 16 ranks, 2x replicas
    ],
)
def test_tp_split(model: str, tp: int, per_rank: int, all_ranks: int) -> None:
    r = report(model, tp=tp)
    assert (r.kv_bytes_per_token_per_rank, r.kv_bytes_per_token_all_ranks) == (per_rank, all_ranks)
    layers = 32 if model == "llama-3.1-8b" else 80
    heads_per_rank = max(1, 8 // tp)
    assert model_kv_bytes(1, layers, heads_per_rank, 128, 2) == per_rank
    assert tp * per_rank == all_ranks


def test_tp16_replication_warns() -> None:
    r = report("llama-3.1-70b", tp=16)
    assert r.kv_replication_factor == 2.0
    assert "kv-head-replication" in {w.code for w in r.warnings}


# G-N*: vLLM 0.32 native offload capacity (sizing.md §4.2 F2, §4.3).
@pytest.mark.parametrize(
    ("model", "tp", "size_gib", "golden_tokens", "golden_chunk", "dedup"),
    [
        ("llama-3.1-8b", 1, 100, 819_200, 2 * 1024 * 1024, True),  # G-N1
        ("llama-3.1-8b", 2, 100, 819_200, 2 * 1024 * 1024, True),  # G-N2: the flag is the total
        ("llama-3.1-70b", 8, 200, 655_360, 5 * 1024 * 1024, True),  # G-N3
        ("llama-3.1-70b", 8, 950, 3_112_960, 5 * 1024 * 1024, True),  # G-N5
        ("deepseek-v3", 8, 100, 1_525_200, 1_126_400, True),  # G-N4 dedup
        ("deepseek-v3", 8, 100, 190_992, 8_994_816, False),  # G-N4 no dedup (e.g. ROCm)
    ],
)
def test_native_offload_capacity(
    model: str, tp: int, size_gib: int, golden_tokens: int, golden_chunk: int, dedup: bool
) -> None:
    r = report(model, tp=tp, cpu_tier_gib=size_gib, mla_dedup=dedup)
    assert r.native_chunk_bytes == golden_chunk
    assert r.cpu_tier_tokens == golden_tokens
    assert r.kv_offloading_size_gib == size_gib
    # Second derivation: whole 4 KiB-aligned chunks of one 16-token block, copies included.
    stored_per_token = {
        "llama-3.1-8b": model_kv_bytes(1, 32, 8, 128, 2),
        "llama-3.1-70b": model_kv_bytes(1, 80, 8, 128, 2),
        "deepseek-v3": 61 * mla_page_bytes(1, 576, 2) * (1 if dedup else tp),
    }[model]
    chunk = math.ceil(16 * stored_per_token / 4096) * 4096
    assert chunk == golden_chunk
    assert size_gib * GIB // chunk * 16 == golden_tokens


def test_native_inverse_gives_a_size_that_holds_the_sessions() -> None:
    # Sizing for 4 sessions of 100k Llama-70B tokens: the returned flag value must hold them.
    r = report("llama-3.1-70b", tp=8, sessions=4, context_len=100_000)
    assert r.cpu_tier_basis is not None and "sessions" in r.cpu_tier_basis
    assert r.cpu_tier_tokens is not None and r.cpu_tier_tokens >= 400_000
    assert r.cpu_tier_sessions == 4
    # 400,000 tokens / 16 = 25,000 chunks of 5 MiB = 122.07 GiB.
    assert r.kv_offloading_size_gib == 25_000 * 5 * 1024 * 1024 / GIB


# G-K*: KAITO L1 = available x utilization / TP, emitted with Python's str(float).
@pytest.mark.parametrize(
    ("available", "util", "tp", "argv"),
    [(80.0, 0.5, 1, "40.0"), (450.0, 0.5, 2, "112.5"), (400.0, 0.5, 2, "100.0")],  # K1-K3
)
def test_kaito_l1(available: float, util: float, tp: int, argv: str) -> None:
    assert str(kaito_l1_gib(available, util, tp)) == argv
    assert str(available * util / tp) == argv


def test_kaito_l1_on_an_8_gpu_node_warns_and_matches_g_k4() -> None:
    # G-K4: avail 1900 GiB, util 0.5, TP8 -> L1 118.75 GiB; Llama-70B holds 389,120 tokens
    # (311,296 at the 0.8 watermark), vs 3,112,960 with the whole 950 GiB budget.
    r = report("llama-3.1-70b", tp=8, host_ram_gib=1900)
    assert r.l1_capacity_gib == 118.75
    assert r.lmcache_tokens_at_l1_capacity == 389_120
    assert r.lmcache_resident_tokens_at_watermark == 311_296
    assert r.lmcache_tokens_at_whole_budget == 3_112_960
    assert r.cpu_tier_tokens == 3_112_960
    assert "kaito-l1-divided-by-tp" in {w.code for w in r.warnings}
    # Second derivation: 10 MiB objects (256 tokens x 40,960 B), 8 pieces per chunk.
    obj = 256 * model_kv_bytes(1, 80, 1, 128, 2)
    assert int(118.75 * GIB) // (obj * 8) * 256 == 389_120
    assert int(389_120 * 0.8) == 311_296


# G-L*: LMCache MP server capacity (sizing.md §4.2 F5).
def test_lmcache_mp_llama_8b_tp1() -> None:
    # G-L1: L1 40.0 GiB, chunk 256: 32 MiB objects, 327,680 tokens.
    r = report("llama-3.1-8b", host_ram_gib=80.0)
    assert r.l1_capacity_gib == 40.0
    assert r.lmcache_object_bytes == 32 * 1024 * 1024 == 256 * model_kv_bytes(1, 32, 8, 128, 2)
    assert r.lmcache_tokens_at_l1_capacity == 327_680 == 40 * GIB // (32 * 1024 * 1024) * 256


def test_lmcache_mp_llama_8b_tp2() -> None:
    # G-L2: L1 112.5 GiB, TP2: 16 MiB objects x 2 pieces, 921,600 tokens.
    r = report("llama-3.1-8b", tp=2, host_ram_gib=450.0)
    assert r.l1_capacity_gib == 112.5
    assert (r.lmcache_object_bytes, r.lmcache_pieces_per_chunk) == (16 * 1024 * 1024, 2)
    assert r.lmcache_tokens_at_l1_capacity == 921_600 == int(112.5 * GIB) // (32 << 20) * 256


def test_lmcache_mp_deepseek_single_writer() -> None:
    # G-L3: L1 100 GiB, MLA stored once: object 17,989,632 B, 5,968 chunks, 1,527,808 tokens.
    r = report("deepseek-v3", tp=8, cpu_tier_gib=100)
    assert (r.lmcache_object_bytes, r.lmcache_pieces_per_chunk) == (17_989_632, 1)
    assert r.lmcache_tokens_at_whole_budget == 1_527_808
    obj = 256 * 61 * mla_page_bytes(1, 576, 2)
    assert obj == 17_989_632 and 100 * GIB // obj == 5_968 and 5_968 * 256 == 1_527_808


def test_cpu_tier_is_gib_not_gb() -> None:
    # G-S2: Qwen3-4B with a "6 GB" tier: 43,690 tokens if GiB, 40,690 if decimal GB; vLLM
    # uses GiB. Native offload stores whole 16-token chunks, so 43,690 floors to 43,680.
    r = report("qwen3-4b", cpu_tier_gib=6)
    per_token = model_kv_bytes(1, 36, 8, 128, 2)
    assert 6 * GIB // per_token == 43_690 and 6 * 10**9 // per_token == 40_690
    assert r.cpu_tier_tokens == 43_690 // 16 * 16


def test_sglang_per_rank_to_vllm_total() -> None:
    # G-S3: SGLang 200 GB per GPU x TP8 -> vLLM --kv-offloading-size 1600.
    assert total_from_per_rank_gib(200, 8) == 1600
    r = report("llama-3.1-70b", tp=8, cpu_tier_gib=1600)
    assert r.per_rank_gib == 200


def test_bench_sizing() -> None:
    # G-S1: num_gpu_blocks 1458, block 32, prefix 8000: G = 46,656; N_min = 12.
    r = report(
        "llama-3.1-8b", num_gpu_blocks=1458, block_size=32, prefix_len=8000, cpu_tier_gib=100
    )
    assert r.gpu_tier_tokens == 46_656 == 1458 * 32
    assert r.bench_num_prefixes_min == 12 == 2 * 46_656 // 8000 + 1
    assert r.cpu_tier_tokens is not None
    assert r.bench_num_prefixes_max == r.cpu_tier_tokens // 8000


def test_gpu_blocks_from_gpu_kv_gib() -> None:
    # KAITO PR #1326 log: "Available KV cache memory: 3.26 GiB ... 26,688 tokens" for
    # Llama-3.1-8B (sizing.md §3.3); 26,688 x 131,072 B = 3.258 GiB.
    r = report("llama-3.1-8b", gpu_kv_gib=26_688 * 131_072 / GIB)
    assert r.gpu_tier_tokens == 26_688


def test_load_times_llama_70b() -> None:
    # G-X1..X4: 100k tokens of Llama-70B = 32.768 GB stored; Gen5 x16 at 0.8 = 50.41 GB/s;
    # DRAM with TP8 links 0.081 s, one link 0.650 s; NVMe 6.5 GB/s 5.04 s, 5.0 GB/s 6.55 s.
    link = 32 * 16 * 128 / 130 / 8 * 0.8
    assert round(link, 2) == 50.41
    tp8 = report("llama-3.1-70b", tp=8, context_len=100_000)
    assert tp8.request_bytes_stored == 32_768_000_000
    assert round(tp8.pcie_gbps, 2) == 50.41
    assert tp8.load_seconds_dram is not None and round(tp8.load_seconds_dram, 3) == 0.081
    assert round(4_096_000_000 / (link * 1e9), 3) == 0.081
    tp1 = report("llama-3.1-70b", tp=1, context_len=100_000)
    assert tp1.load_seconds_dram is not None and round(tp1.load_seconds_dram, 3) == 0.650
    assert tp8.load_seconds_nvme is not None and round(tp8.load_seconds_nvme, 2) == 5.04
    slow = report("llama-3.1-70b", tp=8, context_len=100_000, nvme_gbps=5.0)
    assert slow.load_seconds_nvme is not None and round(slow.load_seconds_nvme, 2) == 6.55


def test_reprefill_time_uses_the_given_rate() -> None:
    # F11 with a measured rate: 100k tokens at 10,000 tokens/s take 10 s.
    r = report("llama-3.1-70b", tp=8, context_len=100_000, prefill_tok_s=10_000)
    assert r.load_seconds_reprefill == 100_000 / 10_000
    assert report("llama-3.1-70b", context_len=100_000).load_seconds_reprefill is None


def test_gdn_hybrid_qwen36_27b() -> None:
    # G-H1: Qwen3.6-27B, 16 full-attention layers (4 KV heads x 256) + 48 GDN layers
    # (Hk 16 x dk 128, Hv 48 x dv 128, conv 4): 78,446,592 B of state per sequence.
    # Geometry from sizing.md §3.3 (public copies of the HF config); num_attention_heads is
    # not given there and does not change any byte count.
    # vLLM 0.32 (platforms/interface.py _align_hybrid_block_size) raises the block in steps
    # of 16 until one attention page covers one state page, then pads the state page to
    # it: with a float32 SSM state that is the 784-token block operators see in the log.
    # (This replaces sizing.md's unpadded amortised figures 165,595 / 132,827 B/token.)
    from kvtool.sizing import spec_from_config

    config = {
        "model_type": "qwen3_5_text",
        "num_hidden_layers": 64,
        "full_attention_interval": 4,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_num_value_heads": 48,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "torch_dtype": "bfloat16",
    }
    spec = spec_from_config(config, name="qwen3.6-27b", where="test")
    bf16 = compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE))
    assert bf16.state_bytes_per_sequence == 78_446_592
    assert 48 * gdn_state_bytes(16, 128, 48, 128, 4, 2) == 78_446_592
    assert bf16.kv_bytes_per_token == 65_536 == model_kv_bytes(1, 16, 4, 256, 2)
    attention_page_per_token = kv_page_bytes(1, 4, 256, 2)
    bf16_state_page = gdn_state_bytes(16, 128, 48, 128, 4, 2)
    assert bf16.block_size == 16 * -(-bf16_state_page // (16 * attention_page_per_token)) == 400

    f32 = compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, mamba_ssm_dtype="float32"))
    conv_bytes = 2 * 3 * (2 * 16 * 128 + 48 * 128)  # conv state stays in the model dtype
    f32_state_page = conv_bytes + 4 * 48 * 128 * 128
    assert f32.state_page_bytes == f32_state_page
    assert f32.block_size == 16 * -(-f32_state_page // (16 * attention_page_per_token)) == 784
    assert f32.state_page_padded_bytes == kv_page_bytes(784, 4, 256, 2)
    # One padded state snapshot per 784-token block on top of the attention bytes.
    assert f32.amortised_bytes_per_token_per_rank == 65_536 + 48 * kv_page_bytes(1, 4, 256, 2)
    # A pinned block smaller than that is still raised, in steps of the pinned block.
    pinned = compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, block_size=64))
    assert pinned.block_size == 64 * -(-bf16_state_page // (64 * attention_page_per_token)) == 448


def test_mamba1_hybrid_jamba() -> None:
    # Jamba-1.5-Mini: attention every 8th layer from 4 -> 4 attention, 28 Mamba layers;
    # d_inner = 2 x 4096. Public test code for the same geometry (Jamba-v0.1) states
    # 28 x (conv (4-1) x 8192 x 2 + ssm 8192 x 16 x 4) = 16,056,320 B with an fp32 SSM state.
    r = report("jamba-1.5-mini", mamba_ssm_dtype="float32")
    assert r.kv_bytes_per_token == model_kv_bytes(1, 4, 8, 128, 2) == 16_384
    assert r.state_bytes_per_sequence == 16_056_320
    assert 28 * mamba1_state_bytes(8192, 4, 16, 2, 4) == 16_056_320


def test_mamba2_hybrid_nemotron_h_tp2() -> None:
    # Nemotron-H-8B: pattern has 4 '*' (attention) and 24 'M' (Mamba-2) blocks;
    # 128 heads x 64, 8 groups, state 128, conv 4. At TP2 each rank holds half the heads
    # and half the groups. vLLM 0.32 keeps Nemotron-H's SSM state in float32 unless the
    # config says otherwise (model_executor/models/config.py NemotronHForCausalLMConfig).
    r = report("nemotron-h-8b", tp=2)
    assert r.kv_bytes_per_token_per_rank == model_kv_bytes(1, 4, 4, 128, 2)
    per_rank = 24 * mamba2_state_bytes(64, 64, 4, 128, 4, conv_bytes=2, ssm_bytes=4)
    assert r.state_bytes_per_sequence_per_rank == per_rank
    assert r.state_bytes_per_sequence == 2 * per_rank
    state_page = per_rank // 24
    attention_page_per_token = kv_page_bytes(1, 4, 128, 2)
    assert r.block_size == 16 * -(-state_page // (16 * attention_page_per_token))
    assert r.state_page_padded_bytes == kv_page_bytes(r.block_size, 4, 128, 2)
