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


def _registry(*classes: type[DrainPolicy]) -> dict[PolicyName, type[DrainPolicy]]:
    registry: dict[PolicyName, type[DrainPolicy]] = {}
    for cls in classes:
        if cls.name in registry:
            raise RuntimeError(f"two drain policies are named {cls.name.value!r}")
        registry[cls.name] = cls
    missing = set(PolicyName) - set(registry)
    if missing:
        raise RuntimeError(f"no drain policy for {sorted(p.value for p in missing)}")
    return registry


POLICIES = _registry(EagerPolicy, FifoPolicy, EvictionAwarePolicy)
"""Every configurable policy name maps to exactly one class."""


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
