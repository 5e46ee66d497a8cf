"""Drain policies by name: the one registry of what exists."""

from __future__ import annotations

from kvtool.connector.config import ConnectorConfig, PolicyName
from kvtool.connector.policies.base import (
    DrainPolicy,
    EvictionOrder,
    PendingView,
    Release,
    ReleaseReason,
    RequestKey,
    StepSignals,
)
from kvtool.connector.policies.eager import EagerPolicy
from kvtool.connector.policies.eviction_aware import EvictionAwarePolicy
from kvtool.connector.policies.fifo import FifoPolicy

POLICIES: dict[PolicyName, type[DrainPolicy]] = {
    cls.name: cls for cls in (EagerPolicy, FifoPolicy, EvictionAwarePolicy)
}


def make_policy(config: ConnectorConfig) -> DrainPolicy:
    return POLICIES[config.policy](config)


__all__ = [
    "POLICIES",
    "DrainPolicy",
    "EagerPolicy",
    "EvictionAwarePolicy",
    "EvictionOrder",
    "FifoPolicy",
    "PendingView",
    "Release",
    "ReleaseReason",
    "RequestKey",
    "StepSignals",
    "make_policy",
]
