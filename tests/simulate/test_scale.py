"""What lets simulate replay a million requests quickly: the shortcuts it takes give
the same figures as the plain computation, and what it relies on holds."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from kvtool.simulate.engine import EngineSettings, Simulation
from kvtool.simulate.sweep import quiet_connector
from kvtool.simulate.trace import generate, workload_params


def _garbage_cycles_left(workload: str, requests: int, policy: str) -> int:
    """Objects only the cycle collector could free after one run with it paused."""
    settings = EngineSettings(num_gpu_blocks=128, host_blocks=300, block_bytes=4096)
    trace = generate(workload, workload_params(workload, {"num_requests": requests}), 0)
    gc.collect()
    gc.disable()
    try:
        with quiet_connector():
            Simulation(settings, {"kvtool.policy": policy, "kvtool.load_async": "true"}).run(trace)
        return gc.collect()
    finally:
        gc.enable()


@pytest.mark.parametrize(("workload", "policy"),
                         [("chat", "eager"), ("rag", "fifo"), ("chat", "eviction_aware")])
def test_a_run_leaves_no_reference_cycles_per_request(workload: str, policy: str) -> None:
    # Simulation.run pauses the cycle collector, so a cycle made per request or per
    # step would pile up; ten times the requests must leave no more than a run's own
    # fixed set of objects (the manager and its view, the policy, the settings).
    few = _garbage_cycles_left(workload, 60, policy)
    many = _garbage_cycles_left(workload, 600, policy)
    assert many < few + 100, (few, many)


def test_the_cycle_collector_is_restored_after_a_run() -> None:
    trace: Any = generate("rag", workload_params("rag", {"num_requests": 5}), 0)
    settings = EngineSettings(num_gpu_blocks=64, host_blocks=64, block_bytes=4096)
    assert gc.isenabled()
    with quiet_connector():
        Simulation(settings, {"kvtool.policy": "eager"}).run(trace)
    assert gc.isenabled()
