"""scripts/bench/offload_pressure.py: its figures from per-request outcomes (no engine),
and ``--quick`` on the real engine (marker ``vllm``): every output equals no
connector's, the figures are printed, and its last line is the documented object."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvtool.simulate.trace import prompt_token_ids
from tests.vllm_env import vllm_python, vllm_subprocess_env

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "scripts" / "bench" / "offload_pressure.py"
FIGURES = {"host_hit_pct", "gpu_hit_pct", "bytes_stored", "lost_to_recycling", "preemptions",
           "ttft_hit_vs_recompute", "throughput_ratio", "outputs_equal"}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("offload_pressure_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)  # puts scripts/ and scripts/bench/ on sys.path
    finally:
        sys.path[:] = path
    return module


def _request(host: int, ttft_s: float, output: list[int]) -> dict[str, Any]:
    return {"prompt_tokens": 100, "output": output, "ttft_steps": 2, "ttft_cpu_s": ttft_s,
            "ttft_wall_s": 3 * ttft_s,
            "queued_ttft_steps": 5,
            "host_tokens": host, "gpu_tokens": 0}


def _record(config: str, mine: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    one = [{"wall_s": 1.0, "cpu_s": 1.0, "steps": 50.0}]
    return {"slices": {config: one, "none": one},
            "outcome": {config: {"requests": mine, "vllm_metrics": {"vllm:num_preemptions": 1.0},
                                 "connector": {"stored_bytes": 4096, "lost_to_recycling": 0,
                                               "rescued": 3, "dropped_store_full": 2,
                                               "dropped_reset": 0}},
                        "none": {"requests": base, "vllm_metrics": {}, "connector": {}}}}


def test_ttft_ratio_is_over_the_host_hit_requests_only(bench: ModuleType) -> None:
    # r0 hit the host and took 0.01 s against 0.02 s recomputed; r1 had no hit and is
    # left out, however slow it was.
    mine = {"r0": _request(64, 0.01, [1, 2]), "r1": _request(0, 0.5, [3])}
    base = {"r0": _request(0, 0.02, [1, 2]), "r1": _request(0, 0.05, [3])}
    f = bench.figures([_record("eager@small", mine, base)], "eager@small")
    assert f["ttft_hit_vs_recompute"] == pytest.approx(0.5)
    assert f["ttft_wall_hit_vs_recompute"] == pytest.approx(0.5)
    assert f["host_hit_pct"] == pytest.approx(32.0)  # 64 of 200 prompt tokens
    assert f["outputs_equal"] is True and f["preemptions"] == 1.0


def test_an_output_that_differs_from_no_connector_is_reported(bench: ModuleType) -> None:
    mine = {"r0": _request(0, 0.01, [1, 9])}
    base = {"r0": _request(0, 0.01, [1, 2])}
    f = bench.figures([_record("fifo@large", mine, base)], "fifo@large")
    assert f["outputs_equal"] is False and f["ttft_hit_vs_recompute"] is None


def test_rescues_and_drops_by_reason_are_reported_per_trial(bench: ModuleType) -> None:
    mine = {"r0": _request(0, 0.01, [1])}
    records = [_record("eviction_aware@small", mine, mine)] * 2
    f = bench.figures(records, "eviction_aware@small")
    # Two trials of 3 rescued and 2 dropped (the host store was full): per trial, and
    # a reason that never happened is left out.
    assert f["rescued"] == 3 and f["dropped"] == {"store_full": 2}


def test_the_traces_overflow_the_pool_and_share_multi_level_prefixes(bench: ModuleType) -> None:
    for name, requests in bench.workloads(0, quick=True).items():
        prompts = [prompt_token_ids(r) for r in requests]
        blocks = {tuple(p[:end]) for p in prompts
                  for end in range(bench.BLOCK_SIZE, len(p) + 1, bench.BLOCK_SIZE)}
        assert len(blocks) > bench.QUICK_POOL_BLOCKS, name
        assert max(len(p) + r.output_tokens for p, r in zip(prompts, requests, strict=True)) \
            <= bench.QUICK_MAX_MODEL_LEN
    chat = bench.workloads(0, quick=False)["chat"]
    # System prompt, then each turn's question and reply: the later turns follow a reply.
    assert max(len(r.segments) for r in chat) >= 5
    assert any(r.after is not None for r in chat)


@pytest.mark.vllm
def test_quick_run_on_the_engine_prints_figures_and_keeps_outputs_equal(tmp_path: Path) -> None:
    python = vllm_python()
    proc = subprocess.run(
        [str(python), str(BENCH), "--quick", "--json", "--cache", str(tmp_path / "cache"),
         "--dump", str(tmp_path / "dump")],
        capture_output=True, text=True, timeout=900, env=vllm_subprocess_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    print("\n".join(lines[:-1]))  # the figures, in the test log
    summary = json.loads(lines[-1])
    assert set(summary) == {"chat", "rag", "zipf"}
    for workload, stores in summary.items():
        policies = stores["small"]
        assert set(policies) == {"eager", "fifo", "eviction_aware"}
        for policy, figures in policies.items():
            assert set(figures) >= FIGURES, (workload, policy)
            assert figures["outputs_equal"] is True, (workload, policy)
        assert policies["eager"]["host_hit_pct"] > 0, f"{workload}: no host hit at all"
    dumped = sorted(p.name for p in (tmp_path / "dump" / "zipf" / "trial0").iterdir())
    assert "trace.jsonl" in dumped and "eviction_aware@small.json" in dumped
