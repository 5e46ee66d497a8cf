"""Load the curated semantic rows the audit rules need (``rules/audit/semantics.toml``).

The table holds what flag presence cannot tell (backend -> connector, when HMA is
decided how, which releases needed PYTHONHASHSEED for the p2p tier...); each row
cites the reference section it was read from. Security-floor and known-bug rows
come from the release loader's curated tables when it offers them.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import tomllib
from pydantic import ValidationError

from kvtool.audit.context import (
    BackendMapping,
    ChoiceMigration,
    HmaDecision,
    Semantics,
    VersionRange,
)
from kvtool.resources import rules_dir


def _range(row: dict[str, Any]) -> VersionRange:
    return VersionRange(since=row.get("since"), until=row.get("until"))


def semantics_from_table(table: dict[str, Any]) -> Semantics:
    """Build :class:`Semantics` from the parsed TOML table (pure; raises ValueError on bad rows)."""
    try:
        return Semantics(
            backend_connectors=tuple(
                BackendMapping(
                    backend=row["backend"],
                    connector=row["connector"],
                    releases=_range(row),
                    env=row.get("env"),
                    size=row["size"],
                    source=row["source"],
                )
                for row in table["backend_connectors"]
            ),
            size_needs_backend=_range(table["size_needs_backend"]),
            size_overwrites_kv_transfer_config=_range(table["size_overwrites_kv_transfer_config"]),
            hma_decisions=tuple(
                HmaDecision(
                    releases=_range(row),
                    mode=row["mode"],
                    warning_names_connector=row["warning_names_connector"],
                    source=row["source"],
                )
                for row in table["hma_decisions"]
            ),
            p2p_requires_pythonhashseed=_range(table["p2p_requires_pythonhashseed"]),
            retention_interval_block_multiple=_range(table["retention_interval_block_multiple"]),
            mamba_requires_hma=_range(table["mamba_requires_hma"]),
            offload_connectors=tuple(table["offload"]["connectors"]),
            choice_migrations=tuple(
                ChoiceMigration(**row) for row in table.get("choice_migrations", [])
            ),
            lmcache_mp_keys=tuple(table["lmcache_mp"]["keys"]),
            lazy_offload_policies=tuple(table["lmcache_mp"]["lazy_offload_policies"]),
        )
    except (KeyError, ValidationError) as exc:
        raise ValueError(f"rules/audit/semantics.toml: bad or missing entry: {exc}") from exc


@cache
def load_semantics() -> Semantics:
    """The shipped semantic rows (cached: read once per process)."""
    path = rules_dir() / "audit" / "semantics.toml"
    with path.open("rb") as handle:
        return semantics_from_table(tomllib.load(handle))
