"""Drain policies by name: the one registry of what exists.

A new policy is its own module (naming its class ``POLICY``) plus one entry in the
``_registry`` call below;
``kvtool.policy``'s accepted values (kvtool/connector/config.py), ``kvtool
simulate --policy`` and the launch recipe's variants are derived from
:data:`POLICIES`.
"""

from __future__ import annotations

from importlib import import_module
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


def _registry(*modules: str) -> dict[str, type[DrainPolicy]]:
    """The ``POLICY`` class of each named module of this package, by its ``name``."""
    registry: dict[str, type[DrainPolicy]] = {}
    for module in modules:
        cls = import_module(f"{__name__}.{module}").POLICY
        if not (isinstance(cls, type) and issubclass(cls, DrainPolicy)):
            raise RuntimeError(f"{module}.POLICY is not a DrainPolicy subclass")
        if cls.name in registry:
            raise RuntimeError(f"two drain policies are named {cls.name!r}")
        registry[cls.name] = cls
    return registry


POLICIES = _registry("eager", "fifo", "eviction_aware")
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
