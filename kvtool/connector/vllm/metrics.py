"""The connector's counters as vLLM carries them: a ``KVConnectorStats`` per step
(aggregated across engines) and ``kvtool:*`` families on ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

from kvtool.connector.policies import ReleaseReason
from kvtool.connector.stats import ConnectorStats

GAUGES = ("pending", "in_flight")
"""Counters of ConnectorStats that are levels, not running totals."""


def _counter_names() -> list[str]:
    names = [k for k in ConnectorStats().as_dict() if k not in GAUGES]
    names += [f"released_by_{reason.value}" for reason in ReleaseReason]
    return sorted(set(names))


@dataclass
class KvtoolConnectorStats(KVConnectorStats):  # type: ignore[misc]
    """The manager's counters since the last report: ``{"counters": {name: increment},
    "gauges": {name: level}}``. Only the scheduler reports them (workers decide nothing)."""

    def reset(self) -> None:
        self.data: dict[str, Any] = {"counters": {}, "gauges": {}}

    def aggregate(self, other: KVConnectorStats) -> KvtoolConnectorStats:
        counters = dict(self.data.get("counters", {}))
        for name, increment in other.data.get("counters", {}).items():
            counters[name] = counters.get(name, 0) + increment
        gauges = {**self.data.get("gauges", {}), **other.data.get("gauges", {})}
        return KvtoolConnectorStats({"counters": counters, "gauges": gauges})

    def reduce(self) -> dict[str, int | float]:
        return {**self.data.get("counters", {}), **self.data.get("gauges", {})}

    def is_empty(self) -> bool:
        return not self.data.get("counters") and not self.data.get("gauges")


def _unregister_kvtool_metrics() -> None:
    """Forget kvtool metrics of an earlier engine in this process (as vLLM does for its
    own), so a second engine can register them again."""
    import prometheus_client

    registry = prometheus_client.REGISTRY
    for collector, names in list(registry._collector_to_names.items()):
        if any(name.startswith("kvtool:") for name in names):
            registry.unregister(collector)


class KvtoolPromMetrics(KVConnectorPromMetrics):  # type: ignore[misc]
    """``kvtool:<counter>_total`` and the ``kvtool:pending`` / ``kvtool:in_flight`` gauges
    (unit: KV blocks, or bytes for ``*_bytes``) on vLLM's /metrics."""

    def __init__(
        self,
        vllm_config: Any,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        _unregister_kvtool_metrics()
        self._counters = {
            name: self._per_engine(self._counter_cls(
                name=f"kvtool:{name}",
                documentation=f"kvtool lazy-offload connector: {name.replace('_', ' ')}",
                labelnames=labelnames,
            ))
            for name in _counter_names()
        }
        self._gauges = {
            name: self._per_engine(self._gauge_cls(
                name=f"kvtool:{name}",
                documentation=f"kvtool lazy-offload connector: blocks {name.replace('_', ' ')}",
                labelnames=labelnames,
                multiprocess_mode="mostrecent",
            ))
            for name in GAUGES
        }

    def _per_engine(self, metric: Any) -> dict[int, Any]:
        return {idx: metric.labels(*values) for idx, values in self.per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for name, increment in transfer_stats_data.get("counters", {}).items():
            if name in self._counters and increment > 0:
                self._counters[name][engine_idx].inc(increment)
        for name, level in transfer_stats_data.get("gauges", {}).items():
            if name in self._gauges:
                self._gauges[name][engine_idx].set(level)
