"""Start-up constraints read from the wheels: ports that collide (CN060) and NixlConnector
with pipeline parallelism (CN061).

The facts come from rules/audit/constraints.json (scripts/gen_constraints.py); the
releases checked are derived from it, so a moved default moves the test with it.
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from kvtool.audit.rules._constraints import (
    api_server_port_at,
    constraints_at,
    lmcache_api_port_start_at,
)
from kvtool.releases import release_index
from tests.audit.rulekit import codes, config, ktc, only, opt, run
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable

RELEASES = release_index().versions
# The shape vLLM's docs give for the ZMQ publisher (docs/features/kv_events, 0.10.2:
# https://github.com/vllm-project/vllm/blob/v0.10.2/vllm/config/kv_events.py).
EVENTS = opt("--kv-events-config", {"enable_kv_cache_events": True, "publisher": "zmq"})
NIXL = ktc(kv_connector="NixlConnector", kv_role="kv_both")


def _defaults_collide(version: str) -> bool:
    facts = constraints_at(version)
    assert facts is not None
    # Releases before KV events or before the NIXL side channel have nothing to collide.
    nixl_port = facts.env_ports.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
    if facts.kv_events_endpoint is None or nixl_port is None:
        return False
    return nixl_port == urlsplit(facts.kv_events_endpoint).port


def test_nixl_and_kv_events_collide_where_their_defaults_are_one_port() -> None:
    # vllm v0.10.2 vllm/envs.py: VLLM_NIXL_SIDE_CHANNEL_PORT "5557"; vllm/config/kv_events.py:
    # endpoint "tcp://*:5557" (the thread); 0.11.1 moved NIXL to 5600.
    colliding = [v for v in RELEASES if _defaults_collide(v)]
    assert "0.10.2" in colliding and RELEASES[-1] not in colliding
    for version in RELEASES:
        found = codes(run(config(version, NIXL, EVENTS)))
        assert ("CN060" in found) is (version in colliding), version
    finding = only(run(config("0.10.2", NIXL, EVENTS)), "CN060")
    assert "5557" in finding.message and "Address already in use" in finding.message


def test_moving_one_side_channel_quiets_the_collision() -> None:
    # Nearest neighbour: the documented fix, another base port for the NIXL side channel.
    moved = config("0.10.2", NIXL, EVENTS, env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "6000"})
    assert "CN060" not in codes(run(moved))
    # A connecting publisher endpoint binds nothing on this host.
    remote = opt(
        "--kv-events-config",
        {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://events:5557"},
    )
    assert "CN060" not in codes(run(config("0.10.2", NIXL, remote)))


def test_per_rank_offsets_reach_a_moved_publisher_port() -> None:
    # From 0.11.1 each DP rank's NIXL listener is base + DP rank (vllm v0.11.1
    # nixl_connector.py), and the publisher offsets its port by the DP rank too.
    newest = RELEASES[-1]
    facts = constraints_at(newest)
    assert facts is not None and facts.nixl_side_channel == "per_dp_rank"
    base = facts.env_ports["VLLM_NIXL_SIDE_CHANNEL_PORT"]
    events = opt(
        "--kv-events-config",
        {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{base + 3}"},
    )
    dp4 = opt("--data-parallel-size", "4")
    assert "CN060" in codes(run(config(newest, NIXL, events, dp4)))
    assert "CN060" not in codes(run(config(newest, NIXL, events, opt("--data-parallel-size", "2"))))


def _first_pp_aware() -> str:
    return next(v for v in RELEASES if constraints_at(v).nixl_pp.pp_aware)  # type: ignore[union-attr]


def test_nixl_with_pp_fails_before_the_release_that_knows_pipeline_parallelism() -> None:
    # vLLM#22430 and #40674: NixlConnector's handshake and registration assumed PP 1.
    first = _first_pp_aware()
    producer = ktc(kv_connector="NixlConnector", kv_role="kv_producer")
    pp2 = opt("--pipeline-parallel-size", "2")
    before = RELEASES[RELEASES.index(first) - 1]
    assert "pipeline-parallel support" in only(run(config(before, producer, pp2)), "CN061").message
    # Nearest neighbour: the same producer with PP 1.
    assert "CN061" not in codes(run(config(before, producer)))
    # From the PP-aware release on a producer with PP 2 starts (the push path supports it).
    assert "CN061" not in codes(run(config(first, producer, pp2)))


def test_a_decode_side_consumer_with_pp_is_refused_with_vllms_own_message() -> None:
    # vllm v0.32.0 nixl/base_worker.py: "Decode-side PP is unsupported" -> NotImplementedError.
    consumer = ktc(kv_connector="NixlConnector", kv_role="kv_consumer")
    pp2 = opt("--pipeline-parallel-size", "2")
    finding = only(run(config(RELEASES[-1], consumer, pp2)), "CN061")
    assert "NotImplementedError" in finding.message
    assert "CN061" not in codes(run(config(RELEASES[-1], consumer)))


@pytest.mark.network
@pytest.mark.timeout(900)
def test_constraints_match_the_wheels_at_the_oldest_and_newest_release() -> None:
    """scripts/gen_constraints.py --check re-reads two releases' wheels (cached or fetched)."""
    versions = [RELEASES[0], RELEASES[-1]]
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "gen_constraints.py"),
            "--check",
            "--versions",
            *versions,
        ],
        capture_output=True,
        text=True,
        timeout=840,
    )
    if proc.returncode != 0 and "pip download" in proc.stderr and not pypi_reachable():
        pytest.skip("a wheel is not cached and pypi.org:443 is unreachable")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no drift" in proc.stderr


def test_mooncake_bootstrap_port_against_a_publisher_moved_onto_it() -> None:
    # VLLM_MOONCAKE_BOOTSTRAP_PORT's default (vllm v0.32.0 vllm/envs.py, read per release).
    newest = RELEASES[-1]
    facts = constraints_at(newest)
    assert facts is not None
    bootstrap = facts.env_ports["VLLM_MOONCAKE_BOOTSTRAP_PORT"]
    mooncake = ktc(kv_connector="MooncakeConnector", kv_role="kv_producer")
    onto = opt(
        "--kv-events-config",
        {"enable_kv_cache_events": True, "endpoint": f"tcp://*:{bootstrap}"},
    )
    finding = only(run(config(newest, mooncake, onto)), "CN060")
    assert str(bootstrap) in finding.message and "Mooncake" in finding.message
    moved = config(newest, mooncake, onto, env={"VLLM_MOONCAKE_BOOTSTRAP_PORT": "9100"})
    assert "CN060" not in codes(run(moved))


def test_lmcache_internal_api_servers_against_the_api_server_port() -> None:
    # LMCache's internal API servers (LMCache v0.5.6 lmcache/v1/config.py
    # internal_api_server_enabled / internal_api_server_port_start; the scheduler on the
    # start port, worker i on start + 1 + i: lmcache/v1/internal_api_server/api_server.py).
    newest = RELEASES[-1]
    api = api_server_port_at(newest)
    start = lmcache_api_port_start_at(None)
    assert api is not None and start is not None
    lmcache = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    env = {"LMCACHE_INTERNAL_API_SERVER_ENABLED": "True", "PYTHONHASHSEED": "0"}
    # Worker 1 of TP 2 lands on the API server's port.
    onto = {**env, "LMCACHE_INTERNAL_API_SERVER_PORT_START": str(api - 2)}
    tp2 = opt("--tensor-parallel-size", "2")
    finding = only(run(config(newest, lmcache, tp2, env=onto)), "CN060")
    assert "LMCache" in finding.message and str(api) in finding.message
    # TP 1: the servers stop one port short of it; and the default start is clear of it.
    assert "CN060" not in codes(run(config(newest, lmcache, env=onto)))
    assert "CN060" not in codes(run(config(newest, lmcache, tp2, env=env)))
