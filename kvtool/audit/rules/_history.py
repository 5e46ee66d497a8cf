"""Flags removed before the oldest generated release table (curated, with citations).

``rules/curated/removed_before_tables.toml``: the tables start at one release; a flag
already gone there appears in none of them, so the index cannot say it was removed.
"""

from __future__ import annotations

from functools import cache

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir
from kvtool.versions import InvalidVersion, Version

TABLE = "removed_before_tables.toml"


class PreTableRemoval(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str  # the flag as vLLM spelled it, "--num-scheduler-steps"
    gone_by: str  # the oldest tabled release that already lacks it
    removed: str  # what went away, in a few words
    replacement: str
    source: str

    def __post_init__(self) -> None:
        try:
            Version(self.gone_by)
        except InvalidVersion as exc:
            raise ValueError(f"{self.name}: gone_by is not a release: {self.gone_by!r}") from exc


@cache
def pre_table_removals() -> dict[str, PreTableRemoval]:
    """Flag name -> its curated removal; ``KvtoolError`` when the table is malformed."""
    path = rules_dir() / "curated" / TABLE
    try:
        rows = msgspec.convert(read_table(path).get("rows", []), type=tuple[PreTableRemoval, ...])
    except (msgspec.ValidationError, ValueError) as exc:
        raise KvtoolError(f"curated table {path}: {exc}") from exc
    return {row.name: row for row in rows}
