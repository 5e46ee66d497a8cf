"""Drain policies by name: the one registry of what exists.

A new policy is its own module plus one entry in the ``_registry`` call below;
``kvtool.policy``'s accepted values (kvtool/connector/config.py), ``kvtool
simulate --policy`` and the launch recipe's variants are derived from
:data:`POLICIES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from kvtool.connector.config import ConnectorConfig


def _registry(*classes: type[DrainPolicy]) -> dict[str, type[DrainPolicy]]:
    registry: dict[str, type[DrainPolicy]] = {}
    for cls in classes:
        if cls.name in registry:
            raise RuntimeError(f"two drain policies are named {cls.name!r}")
        registry[cls.name] = cls
    return registry


POLICIES = _registry(EagerPolicy, FifoPolicy, EvictionAwarePolicy)
"""Every configurable policy name maps to exactly one class, in the order users see them."""

POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)

DEFAULT_POLICY = EvictionAwarePolicy.name


def make_policy(config: ConnectorConfig) -> DrainPolicy:
    return POLICIES[config.policy](config)


__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "POLICY_NAMES",
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
