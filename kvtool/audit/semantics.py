"""Assemble :class:`~kvtool.audit.context.Semantics` for the rules.

Release semantics come from the release loader's curated tables (``rules/curated/``:
semantic facts, backend -> connector map, security floor); the audit-only
rows (LMCache MP keys and policies, choice migrations, which connectors offload) come
from ``rules/audit/semantics.toml``. Every row cites its source.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from kvtool.audit.context import ChoiceMigration, Semantics
from kvtool.releases.curated import (
    BackendConnectorRow,
    SecurityAdvisory,
    SemanticFact,
    Span,
)
from kvtool.resources import read_table, rules_dir

AUDIT_TABLE = "audit/semantics.toml"


def semantics_from_tables(
    audit: dict[str, Any],
    *,
    facts: tuple[SemanticFact, ...],
    backend_connectors: tuple[BackendConnectorRow, ...],
    security_floor: tuple[SecurityAdvisory, ...] = (),
) -> Semantics:
    """Combine the parsed audit table with curated release rows (pure; ValueError on bad rows)."""
    try:
        retention = audit["retention_interval_block_multiple"]
        return Semantics(
            facts=facts,
            backend_connectors=backend_connectors,
            retention_interval_block_multiple=msgspec.convert(retention, type=Span),
            offload_connectors=tuple(audit["offload"]["connectors"]),
            prefix_cache_connectors=tuple(audit["offload"]["prefix_cache_connectors"]),
            lmcache_connectors=tuple(audit["lmcache_mp"]["lmcache_connectors"]),
            lmcache_mp_keys=tuple(audit["lmcache_mp"]["keys"]),
            lazy_offload_policies=tuple(audit["lmcache_mp"]["lazy_offload_policies"]),
            choice_migrations=tuple(
                msgspec.convert(row, type=ChoiceMigration)
                for row in audit.get("choice_migrations", [])
            ),
            security_floor=security_floor,
        )
    except (KeyError, TypeError, msgspec.ValidationError) as exc:
        raise ValueError(f"rules/{AUDIT_TABLE}: bad or missing entry: {exc}") from exc


def audit_table() -> dict[str, Any]:
    return read_table(rules_dir() / AUDIT_TABLE)


@cache
def load_semantics() -> Semantics:
    """The shipped semantics (read once per process)."""
    from kvtool.releases import (
        backend_connector_map,
        security_floor,
        semantic_facts,
    )

    return semantics_from_tables(
        audit_table(),
        facts=semantic_facts(),
        backend_connectors=backend_connector_map(),
        security_floor=security_floor(),
    )
