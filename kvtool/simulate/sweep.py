"""Run one workload under every requested policy and knob setting, within one work bound.

Knobs are ``kv_connector_extra_config`` keys of the reference connector
(kvtool/connector/config.py). A policy-specific key (``kvtool.<policy>.*``) is
swept only for that policy; other keys for all. Settings may run in parallel
processes (``jobs``): each regenerates its requests from the workload source,
so no process holds another's.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from kvtool.connector.config import ConnectorConfig
from kvtool.connector.policies import POLICY_NAMES
from kvtool.simulate.budget import REQUEST_WORK, WorkMeter
from kvtool.simulate.engine import EngineSettings, SimResult, Simulation
from kvtool.simulate.trace import Request, WorkloadParams, generate

Knobs = dict[str, list[str]]



@dataclass(frozen=True)
class WorkloadSource:
    """Where a run's requests come from: a trace read into memory, or a generator."""

    label: str
    requests: tuple[Request, ...] | None = None
    generator: str | None = None
    params: WorkloadParams | None = None
    seed: int = 0

    def open(self) -> Iterator[Request]:
        if self.requests is not None:
            return iter(self.requests)
        assert self.generator is not None and self.params is not None
        return generate(self.generator, self.params, self.seed)

    @property
    def num_requests(self) -> int:
        if self.requests is not None:
            return len(self.requests)
        assert self.params is not None
        return self.params.num_requests

    def work_bound(self, block_size: int) -> int:
        """Work units its requests charge in one run, at most (see kvtool.simulate.budget)."""
        if self.requests is not None:
            return sum(math.ceil((r.prompt_tokens + r.output_tokens) / block_size) + REQUEST_WORK
                       for r in self.requests)
        assert self.params is not None
        per_request = math.ceil(self.params.request_tokens_bound() / block_size) + REQUEST_WORK
        return self.params.num_requests * per_request


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


def count_settings(policies: Sequence[str], knobs: Knobs) -> int:
    """How many settings :func:`settings_for` would make, without making them."""
    return sum(math.prod(len(knobs[k]) for k in knobs if _applies(k, p)) for p in policies)


def validate(configs: Sequence[dict[str, str]]) -> None:
    """Raise the connector's own ConnectorConfigError (a KvtoolError) for a bad key or value."""
    for config in configs:
        ConnectorConfig.from_extra_config(config)


@contextlib.contextmanager
def quiet_connector() -> Iterator[None]:
    """The manager logs each lost block as an engine would; a simulation counts them."""
    log = logging.getLogger("kvtool.connector")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def run_setting(source: WorkloadSource, engine: EngineSettings, config: dict[str, str],
                work_limit: float) -> SimResult:
    """One setting, in this process, stopped once it used ``work_limit`` units."""
    meter = WorkMeter(work_limit, f"simulate {config['kvtool.policy']}")
    with quiet_connector():
        result = Simulation(engine, config, meter).run(source.open())
    # A run's manager and clock refer back to it: freed by the cycle collector, now,
    # so that the settings a process runs one after another never hold two runs.
    gc.collect()
    return result


def check_work(source: WorkloadSource, engine: EngineSettings, settings: int) -> float:
    """Refuse a sweep whose estimated work is over ``simulate_work``; returns the limit."""
    meter = WorkMeter.from_limits("simulate")
    per_run = source.work_bound(engine.block_size) + engine.num_gpu_blocks
    meter.check_estimate(per_run * settings,
                         f"simulate: {settings:,} setting(s) x {source.num_requests:,} requests")
    return meter.limit


def sweep(
    source: WorkloadSource,
    engine: EngineSettings,
    configs: Sequence[dict[str, str]],
    *,
    jobs: int = 1,
    progress: Callable[[int, dict[str, str]], None] | None = None,
) -> list[SimResult]:
    """Every setting over the same workload; refused up front when the estimated work
    (requests' blocks over every setting) is over ``simulate_work``, and each setting
    stopped at its share of that bound."""
    validate(configs)
    share = check_work(source, engine, len(configs)) / len(configs)
    if jobs <= 1 or len(configs) == 1:
        results = []
        for index, config in enumerate(configs):
            if progress is not None:
                progress(index, config)
            results.append(run_setting(source, engine, config, share))
        return results
    with ProcessPoolExecutor(max_workers=min(jobs, len(configs))) as pool:
        futures = [pool.submit(run_setting, source, engine, config, share) for config in configs]
        out = []
        for index, (future, config) in enumerate(zip(futures, configs, strict=True)):
            if progress is not None:
                progress(index, config)
            out.append(future.result())
        return out
