"""Run one trace under every requested policy and knob setting.

Knobs are ``kv_connector_extra_config`` keys of the reference connector
(kvtool/connector/config.py). A policy-specific key (``kvtool.fifo.*``,
``kvtool.eviction_aware.*``) is swept only for that policy; other keys for all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from kvtool.connector.config import ConnectorConfig
from kvtool.connector.policies import POLICY_NAMES
from kvtool.simulate.engine import EngineSettings, SimResult, Simulation
from kvtool.simulate.workload import TraceRequest

Knobs = dict[str, list[str]]


def _applies(key: str, policy: str) -> bool:
    for name in POLICY_NAMES:
        if key.startswith(f"kvtool.{name}."):
            return name == policy
    return True


def settings_for(policies: Sequence[str], knobs: Knobs) -> list[dict[str, str]]:
    """Every extra config to run: per policy, the product of the knobs that apply to it."""
    configs: list[dict[str, str]] = []
    for policy in policies:
        keys = [k for k in knobs if _applies(k, policy)]
        for values in itertools.product(*(knobs[k] for k in keys)):
            configs.append({"kvtool.policy": policy, **dict(zip(keys, values, strict=True))})
    return configs


def validate(configs: Sequence[dict[str, str]]) -> None:
    """Raise the connector's own ConnectorConfigError (a KvtoolError) for a bad key or value."""
    for config in configs:
        ConnectorConfig.from_extra_config(config)


def sweep(
    trace: Sequence[TraceRequest],
    engine: EngineSettings,
    configs: Sequence[dict[str, str]],
    progress: Callable[[int, dict[str, str]], None] | None = None,
) -> list[SimResult]:
    validate(configs)
    results = []
    for index, config in enumerate(configs):
        if progress is not None:
            progress(index, config)
        results.append(Simulation(engine, config).run(trace))
    return results
