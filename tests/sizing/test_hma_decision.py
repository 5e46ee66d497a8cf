"""kvtool decides the hybrid KV cache manager (HMA) as the target vLLM release does.

The rule is the release table's (generated from each wheel's ``VllmConfig.__post_init__``):
a connector without ``SupportsHMA`` turns HMA off when the flag is unset; the flag turns it
off; forcing it on where it must be off is vLLM's ValueError. With HMA off a sliding +
full model is one full-attention group (``unify_hybrid_kv_cache_specs``) and a state
model cannot start. ``test_vllm_end_to_end.py`` checks the HMA-on side against vLLM.
"""

from __future__ import annotations

import pytest

from kvtool.errors import KvtoolError
from kvtool.releases import load_release
from kvtool.sizing import SizingReport, compute, load_model_spec, make_deployment

RELEASE = "0.32.0"


def _size(model: str, **deployment: object) -> SizingReport:
    return compute(
        load_model_spec(model),
        make_deployment(vllm_version=RELEASE, gpu_kv_gib=10, context_len=8192, **deployment),
    )


def _no_hma_connector() -> str:
    """A connector the release table says lacks SupportsHMA (derived, not typed)."""
    return next(c.name for c in load_release(RELEASE).connectors if c.supports_hma is False)


def test_a_connector_without_supports_hma_turns_it_off_and_all_layers_share_a_block() -> None:
    on = _size("gpt-oss-120b")
    off = _size("gpt-oss-120b", kv_connector=_no_hma_connector())
    assert on.hma_enabled and not off.hma_enabled
    assert _no_hma_connector() in off.hma_reason
    # 18 sliding + 18 full layers: one group's pages with HMA, all 36 layers' without.
    assert [(g.kind, g.layers) for g in off.kv_cache_groups] == [("full", 36)]
    assert off.bytes_per_block == 2 * on.bytes_per_block
    assert off.num_gpu_blocks == on.num_gpu_blocks // 2


def test_the_flag_decides_where_vllm_lets_it() -> None:
    assert not _size("gpt-oss-120b", disable_hybrid_kv_cache_manager=True).hma_enabled
    # Explicitly on, the connector is not consulted (the check sits under "flag unset").
    forced = _size(
        "gpt-oss-120b", kv_connector=_no_hma_connector(), disable_hybrid_kv_cache_manager=False
    )
    assert forced.hma_enabled
    # Chunked local attention with its env var at 0 must run without it: vLLM raises.
    with pytest.raises(KvtoolError, match="explicitly enabled"):
        _size(
            "llama-4-scout",
            env={"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"},
            disable_hybrid_kv_cache_manager=False,
        )


def test_state_models_cannot_start_without_it() -> None:
    with pytest.raises(KvtoolError, match="recurrent-state layers need it"):
        _size("nemotron-h-8b", kv_connector=_no_hma_connector())


def test_an_unknown_model_name_suggests_the_close_catalog_names() -> None:
    with pytest.raises(KvtoolError, match=r"did you mean 'llama-3\.1-8b'"):
        load_model_spec("llama-3.1-8")
