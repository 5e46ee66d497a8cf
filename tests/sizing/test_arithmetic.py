"""Properties of the sizing helpers other commands reuse, and the shipped data tables."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtool.models.catalog import catalog
from kvtool.sizing import arithmetic as ar
from kvtool.sizing import compute, load_model_spec, make_deployment
from kvtool.sizing.facts import sizing_facts

# The release these goldens were derived for (vLLM 0.32.0's layout and capacity rules).
GOLDEN_RELEASE = "0.32.0"

GIB = 1 << 30


@given(
    tokens=st.integers(min_value=1, max_value=10**9),
    bytes_per_token=st.integers(min_value=1, max_value=10**7),
    block=st.sampled_from([16, 32, 64, 128, 784]),
)
def test_native_size_for_tokens_holds_them_and_no_chunk_more(
    tokens: int, bytes_per_token: int, block: int
) -> None:
    chunk = ar.native_chunk_bytes(block * bytes_per_token, 1, 4096)
    size = ar.native_size_gib_for_tokens(tokens, chunk, block, GIB)
    held = ar.native_tokens(size, chunk, block, GIB)
    assert held >= tokens
    assert held - tokens < block  # the inverse rounds up to whole chunks, not more


@given(total=st.floats(min_value=0.01, max_value=1e5), ranks=st.integers(1, 64))
def test_per_rank_and_total_are_inverse(total: float, ranks: int) -> None:
    assert ar.total_from_per_rank_gib(ar.per_rank_gib(total, ranks), ranks) == pytest.approx(total)


@given(value=st.floats(min_value=0, max_value=1e6), decimals=st.sampled_from([2, 6]))
def test_round_up_gib_never_shrinks_and_prints_short(value: float, decimals: int) -> None:
    rounded = ar.round_up_gib(value, decimals)
    assert rounded >= value - 1e-9  # the inner round() forgives only float noise
    assert rounded - value <= 10**-decimals + 1e-9
    fraction = repr(rounded).partition(".")[2]
    assert "e" in fraction or len(fraction) <= decimals


@given(value=st.integers(0, 10**12), multiple=st.sampled_from([1, 512, 4096]))
def test_round_up(value: int, multiple: int) -> None:
    rounded = ar.round_up(value, multiple)
    assert rounded % multiple == 0 and 0 <= rounded - value < multiple


def test_catalog_entries_parse_cite_and_are_unique() -> None:
    names = [entry.name for entry in catalog()]
    aliases = [alias.lower() for entry in catalog() for alias in entry.aliases]
    assert len(set(names)) == len(names)
    assert len(set(aliases)) == len(aliases)
    for entry in catalog():
        assert "huggingface.co/" in entry.source or "sizing.md" in entry.source
        spec = load_model_spec(entry.name)
        assert spec.attention or spec.states


def test_every_architecture_class_is_in_the_catalog() -> None:
    classes = {load_model_spec(entry.name).architecture_class for entry in catalog()}
    assert classes == {"dense", "mla", "sliding-window", "hybrid-state"}


def test_facts_table_loads() -> None:
    facts = sizing_facts()
    assert facts.default_block_size > 0 and facts.lmcache_chunk_size % facts.default_block_size == 0


def _codes(model: str, **deployment: Any) -> set[str]:
    report = compute(
        load_model_spec(model), make_deployment(vllm_version=GOLDEN_RELEASE, **deployment)
    )
    return {warning.code for warning in report.warnings}


@pytest.mark.parametrize(
    ("deployment", "code"),
    [
        # 100 GiB of Llama-8B holds 819,200 tokens (G-N1): under 2x a 500k-token GPU tier.
        ({"cpu_tier_gib": 100, "num_gpu_blocks": 31_250}, "cpu-tier-small"),
        ({"cpu_tier_gib": 1, "num_gpu_blocks": 1000, "prefix_len": 8000}, "bench-range-empty"),
        ({"block_size": 96}, "lmcache-chunk-not-multiple-of-block"),
        ({"host_ram_gib": 100, "cpu_tier_gib": 120}, "cpu-tier-exceeds-host-ram"),
        ({"sessions": 10, "context_len": 100_000, "cpu_tier_gib": 10}, "sessions-do-not-fit"),
    ],
)
def test_warnings(deployment: dict[str, Any], code: str) -> None:
    assert code in _codes("llama-3.1-8b", **deployment)


def test_a_comfortable_deployment_has_no_warnings() -> None:
    assert (
        _codes("llama-3.1-8b", cpu_tier_gib=400, num_gpu_blocks=10_000, context_len=32_000) == set()
    )


def test_default_utilization_is_named_and_overridable() -> None:
    # sizing.md §1.2: KAITO's default utilization 0.5 halves host RAM for the tier; a
    # default that changes the flag value must be said out loud, and --utilization wins.
    spec = load_model_spec("llama-3.1-8b")
    defaulted = compute(spec, make_deployment(vllm_version=GOLDEN_RELEASE, host_ram_gib=100))
    assert defaulted.kv_offloading_size_gib == 100 * sizing_facts().kaito_default_utilization
    assert any("utilization" in a for a in defaulted.assumptions)
    given = compute(
        spec, make_deployment(vllm_version=GOLDEN_RELEASE, host_ram_gib=100, utilization=0.8)
    )
    assert given.kv_offloading_size_gib == 80
    assert not any("utilization" in a for a in given.assumptions)
