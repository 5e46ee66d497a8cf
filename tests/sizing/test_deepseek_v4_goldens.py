"""Golden DeepSeek-V4 figures at the block level, derived here from the config's fields.

The expected pages are spelled out from vLLM 0.32's DeepSeek-V4 cache construction
(``models/deepseek_v4/attention.py``, ``compressor.py``; fp8_ds_mla: 584 B per latent
state, pages padded to a multiple of 576 B) and the packed grouping
(``_get_packed_kv_cache_groups``: the sliding-window bucket splits in two, every other
bucket stays whole), independently of kvtool's per-layer code. The oracle test asks vLLM.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from kvtool.errors import KvtoolError
from kvtool.sizing import SizingReport, compute, make_deployment, spec_from_config
from tests.sizing.deepseek_v4_configs import DEEPSEEK_V4

# The release these goldens were derived for (vLLM 0.32.0's layout and capacity rules).
GOLDEN_RELEASE = "0.32.0"

GIB = 1 << 30
ALIGN, STATE = 576, 584
CONTEXT, IN_FLIGHT = 65_536, 8_192


def _pad(size: int) -> int:
    return math.ceil(size / ALIGN) * ALIGN


def _report(name: str, **deployment: Any) -> SizingReport:
    spec = spec_from_config(DEEPSEEK_V4[name], name=name, where=f"{name}/config.json")
    return compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, **deployment))


def _expected_groups(cfg: dict[str, Any]) -> list[tuple[int, int, int, int | None]]:
    """(layers, block, group bytes, window) per group, in any order."""
    ratios = cfg["compress_ratios"][: cfg["num_hidden_layers"]]
    layers, head, index_head = len(ratios), cfg["head_dim"], cfg["index_head_dim"]
    c4, c128 = ratios.count(4), ratios.count(128)
    window = cfg["sliding_window"]
    sliding_page = _pad(64 * STATE)
    index_key = index_head + index_head // 128 * 4
    compressed = (
        c4 * _pad(256 // 4 * STATE) + c128 * _pad(256 // 128 * STATE) + c4 * _pad(64 * index_key)
    )
    state4 = c4 * _pad(4 * 2 * 2 * head * 4) + c4 * _pad(4 * 2 * 2 * index_head * 4)
    state128 = c128 * _pad(8 * 2 * head * 4)
    half = math.ceil(layers / 2)
    return [
        (half, 64, half * sliding_page, window),
        (layers - half, 64, (layers - half) * sliding_page, window),
        (c4 * 2 + c128, 256, compressed, None),
        (c4 * 2, 4, state4, 8),
        (c128, 8, state128, 128),
    ]


def _blocks_per_request(layers_block_window: tuple[int, int | None]) -> int:
    block, window = layers_block_window
    if window is None:
        return math.ceil(CONTEXT / block)
    return math.ceil(min(window - 1 + IN_FLIGHT, CONTEXT) / block) + 1


@pytest.mark.parametrize("name", sorted(DEEPSEEK_V4))
@pytest.mark.parametrize("tp", [1, 8])
def test_deepseek_v4_fp8_groups_blocks_and_capacity(name: str, tp: int) -> None:
    # async scheduling (the default) keeps two batches in flight
    r = _report(
        name, tp=tp, gpu_kv_gib=80, context_len=CONTEXT, max_num_batched_tokens=IN_FLIGHT // 2
    )
    expected = _expected_groups(DEEPSEEK_V4[name])
    got = [
        (
            g.layers,
            g.block_size,
            sum(p.layers * p.page_bytes for p in g.layer_pages) or g.layers * g.page_bytes,
            g.window,
        )
        for g in r.kv_cache_groups
    ]
    assert sorted(got, key=str) == sorted(expected, key=str)
    widest = max(group_bytes for _, _, group_bytes, _ in expected)
    assert r.pool_block_bytes == _pad(widest)
    blocks = 80 * GIB // _pad(widest)
    assert r.num_gpu_blocks == blocks
    per_request = sum(_blocks_per_request((block, window)) for _, block, _, window in expected)
    assert r.gpu_tier_tokens == int(blocks / per_request * CONTEXT)
    assert r.kv_cache_dtype_resolved == "fp8_ds_mla"
    assert r.attention_backend == "FLASHMLA_SPARSE"


@pytest.mark.parametrize("gpu", ["h200", "b200"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float16"])
def test_deepseek_v4_plain_kv_dtype_is_refused_on_flashmla(gpu: str, kv_dtype: str) -> None:
    with pytest.raises(KvtoolError, match="fp8_ds_mla layout only supports fp8"):
        _report("deepseek-v4-flash", gpu=gpu, kv_cache_dtype=kv_dtype)


def test_deepseek_v4_fp8_is_stored_as_fp8_ds_mla() -> None:
    auto = _report("deepseek-v4-pro", gpu_kv_gib=80)
    fp8 = _report("deepseek-v4-pro", gpu_kv_gib=80, kv_cache_dtype="fp8")
    assert fp8.kv_cache_groups == auto.kv_cache_groups
    assert fp8.num_gpu_blocks == auto.num_gpu_blocks
    assert any("fp8_ds_mla" in a for a in fp8.assumptions)


def test_deepseek_v4_off_flashmla_is_refused() -> None:
    with pytest.raises(KvtoolError, match="FLASHMLA_SPARSE only"):
        _report("deepseek-v4-flash", gpu="a100")


@pytest.mark.parametrize("split", [{"pp": 2}, {"tp": 2, "dcp": 2}])
def test_deepseek_v4_split_layers_are_refused(split: dict[str, int]) -> None:
    with pytest.raises(KvtoolError, match="--pp 1 and --dcp 1 only"):
        _report("deepseek-v4-flash", **split)
