"""What lets simulate replay a million requests quickly: the shortcuts it takes give
the same figures as the plain computation, and what it relies on holds."""

from __future__ import annotations

import gc
import hashlib
import random
from collections.abc import Hashable
from typing import Any

import pytest

from kvtool.simulate.blockhash import BlockHasher
from kvtool.simulate.engine import EngineSettings, Simulation
from kvtool.simulate.sweep import quiet_connector
from kvtool.simulate.trace import WORKLOADS, Request, generate, workload_params


def _chain_per_block(request: Request, block_size: int) -> list[Hashable]:
    """The plain derivation: walk every token boundary, chaining each segment in turn."""
    named = [*request.segments, (request.output_key or f"{request.id}\x00output",
                                 request.output_tokens)]
    out: list[Hashable] = []
    chain = position = 0
    for key, tokens in named:
        text = f"{chain}\x00{tokens}\x00{key}".encode()
        chain = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
        for _ in range(tokens):
            position += 1
            if position % block_size == 0:
                out.append(hash((chain, position)))
    return out


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize(("block_size", "cache_units"), [(16, 1 << 17), (7, 24), (1, 3)])
def test_segment_cached_hashes_equal_the_per_block_chain(workload: str, block_size: int,
                                                         cache_units: int) -> None:
    # Small caches evict in the middle of the workload, block sizes that do not divide
    # the segments put block ends inside every segment, and a shuffled order reaches
    # cached segments from other requests than the one that filled them.
    params = {"num_requests": 150, "output_tokens": 5}
    requests = list(generate(workload, workload_params(workload, params), 4))
    random.Random(0).shuffle(requests)
    hasher = BlockHasher(block_size, cache_units)
    for request in requests:
        assert hasher.hashes(request) == _chain_per_block(request, block_size), request.id


def test_requests_sharing_a_prefix_share_exactly_its_blocks() -> None:
    # vLLM's chain: blocks ending in the shared system prompt and document match, the
    # block that straddles into the question does not, nor anything after.
    params = {"num_requests": 40, "documents": 1, "hot_documents": 1, "system_tokens": 20,
              "document_tokens": 30, "question_tokens": 9, "output_tokens": 3}
    first, second = list(generate("rag", workload_params("rag", params), 0))[:2]
    a, b = BlockHasher(8).hashes(first), BlockHasher(8).hashes(second)
    assert len(a) == len(b) == (20 + 30 + 9 + 3) // 8
    assert a[:6] == b[:6] and not set(a[6:]) & set(b[6:])  # 50 shared tokens: 6 blocks


def _garbage_cycles_left(workload: str, requests: int, policy: str) -> int:
    """Objects only the cycle collector could free after one run with it paused."""
    settings = EngineSettings(num_gpu_blocks=128, host_blocks=300, block_bytes=4096)
    trace = generate(workload, workload_params(workload, {"num_requests": requests}), 0)
    simulation = Simulation(settings, {"kvtool.policy": policy, "kvtool.load_async": "true"})
    gc.collect()
    gc.disable()
    try:
        with quiet_connector():
            simulation.run(trace)
        return gc.collect()  # the simulation is still referenced: only garbage is counted
    finally:
        gc.enable()


@pytest.mark.parametrize(("workload", "policy"),
                         [("chat", "eager"), ("rag", "fifo"), ("chat", "eviction_aware")])
def test_a_run_leaves_no_reference_cycles_per_request(workload: str, policy: str) -> None:
    # Simulation.run pauses the cycle collector, so a cycle made per request or per
    # step would pile up: ten times the requests must leave no more garbage.
    few = _garbage_cycles_left(workload, 60, policy)
    many = _garbage_cycles_left(workload, 600, policy)
    assert many <= few, (few, many)


def test_the_cycle_collector_is_restored_after_a_run() -> None:
    trace: Any = generate("rag", workload_params("rag", {"num_requests": 5}), 0)
    settings = EngineSettings(num_gpu_blocks=64, host_blocks=64, block_bytes=4096)
    assert gc.isenabled()
    with quiet_connector():
        Simulation(settings, {"kvtool.policy": "eager"}).run(trace)
    assert gc.isenabled()


def test_the_scale_benchmark_quick_form_reports_simulates_figures() -> None:
    # scripts/bench/simulate_scale.py --quick: 20,000 requests under every policy, one
    # JSON object last; its figures are simulate's own (the eager run is replayed here).
    import importlib.util
    import json
    import subprocess
    import sys

    from kvtool.connector.policies import POLICY_NAMES
    from kvtool.simulate.sweep import WorkloadSource, run_setting
    from tests.conftest import REPO_ROOT

    bench = REPO_ROOT / "scripts" / "bench" / "simulate_scale.py"
    done = subprocess.run([sys.executable, str(bench), "--quick", "--json"], check=True,
                          capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["requests"] == 20_000
    runs = {run["policy"]: run for run in report["runs"]}
    assert list(runs) == list(POLICY_NAMES)
    assert all(run["cpu_s"] > 0 and run["peak_rss_mib"] > 0 for run in runs.values())
    assert report["wall_s"] > 0 and report["baseline_s"] > 0 and report["ratio_vs_baseline"] > 0

    spec = importlib.util.spec_from_file_location("simulate_scale_bench", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kind, params = module.WORKLOAD
    source = WorkloadSource(kind, generator=kind,
                            params=workload_params(kind, {**params, "num_requests": 20_000}))
    eager = run_setting(source, module.ENGINE, {"kvtool.policy": "eager"}, float("inf"))
    assert runs["eager"]["steps"] == eager.steps
    assert runs["eager"]["bytes_stored"] == eager.bytes_stored
    assert runs["eager"]["host_hit_rate"] == eager.external_hit_rate
