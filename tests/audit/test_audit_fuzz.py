"""Hypothesis: whatever argv, env or JSON a user writes, the rules stage never raises.

The inputs are built from the real release table's flags (so most options are known and
reach the rules) mixed with junk, and JSON values for the KV transfer config drawn from
every JSON shape, including the lmcache.mp.* keys the lazy-offload rules parse.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_argv
from kvtool.audit.normalize import normalize
from kvtool.audit.settings import AuditSettings
from kvtool.audit.tables import ShippedTables
from kvtool.errors import KvtoolError
from kvtool.releases import load_release

VERSIONS = ("0.11.1", "0.21.0", "0.22.0", "0.27.1", "0.32.0", "0.33.0")
FLAGS = sorted(
    {f.name for f in load_release("0.32.0").flags} | {"--calculate-kv-scales", "--swap-space"}
)
KEYS = [
    "kv_connector",
    "kv_role",
    "kv_buffer_size",
    "kv_connector_extra_config",
    "lmcache.mp.lazy_offload",
    "lmcache.mp.lazy_offload_policy",
    "lmcache.mp.lazy_offload_threshold",
    "lmcache.mp.lazy_offload_max_drain_per_step",
    "lmcache.mp.lazy_offload_horizon_steps",
    "connectors",
    "secondary_tiers",
    "spec_name",
    "type",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
words = st.one_of(
    st.sampled_from(FLAGS),
    st.sampled_from(
        ["all", "lmcache", "native", "fp8", "0", "-1", "1e9", "8", "LMCacheMPConnector"]
    ),
    st.text(max_size=10),
    json_values.map(json.dumps),
)
env_names = st.sampled_from(
    [
        "PYTHONHASHSEED",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "VLLM_USE_SIMPLE_KV_OFFLOAD",
        "VLLM_X",
        "LMCACHE_LOCAL_CPU",
    ]
)


def audit(argv: list[str], version: str, host_ram: float | None) -> None:
    settings_ = AuditSettings(vllm_version=version, host_ram_gib=host_ram)
    try:
        invocation = read_argv(argv)
        Auditor(ShippedTables(), normalize, settings_).run([invocation])
    except KvtoolError:
        pass  # bad input is allowed to end the run with a one-line message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(VERSIONS),
    args=st.lists(words, max_size=12),
    env=st.dictionaries(env_names, st.text(max_size=6), max_size=3),
    host_ram=st.none() | st.floats(min_value=0.5, max_value=4096),
)
def test_random_argv_never_raises_past_the_rules(
    version: str, args: list[str], env: dict[str, str], host_ram: float | None
) -> None:
    prefix = [f"{k}={v}" for k, v in env.items()]
    audit([*prefix, "vllm", "serve", "m", *args], version, host_ram)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(VERSIONS),
    config=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5),
    extra=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5),
    offload=st.booleans(),
)
def test_random_kv_transfer_config_never_raises_past_the_rules(
    version: str, config: dict[str, Any], extra: dict[str, Any], offload: bool
) -> None:
    config = {**config, "kv_connector_extra_config": extra}
    argv = ["vllm", "serve", "m", "--kv-transfer-config", json.dumps(config), "-tp", "2"]
    if offload:
        argv += ["--kv-offloading-size", "10"]
    audit(argv, version, 64.0)
