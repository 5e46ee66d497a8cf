"""The curated model catalog (``rules/models/catalog.toml``): names, aliases, config fields.

Model identity, shared by every command that takes ``--model``: each entry keeps the
config.json fields that change KV-cache bytes, copied from a cited public file, and is
parsed like a local config.json (:func:`kvtool.models.find_model_config`).
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import Any

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir

CATALOG_FILE = "models/catalog.toml"


class CatalogEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One curated model: its config.json fields and where they were copied from."""

    name: str
    aliases: tuple[str, ...] = ()
    source: str
    config: dict[str, Any]


@cache
def catalog() -> tuple[CatalogEntry, ...]:
    raw = read_table(rules_dir() / CATALOG_FILE)
    try:
        return msgspec.convert(raw.get("models"), type=tuple[CatalogEntry, ...])
    except msgspec.ValidationError as exc:
        raise KvtoolError(f"model catalog {rules_dir() / CATALOG_FILE} is corrupt: {exc}") from exc


def find_entry(name: str) -> CatalogEntry | None:
    """The entry whose name or alias equals ``name``, ignoring case."""
    wanted = name.lower()
    for entry in catalog():
        if wanted == entry.name.lower() or wanted in (a.lower() for a in entry.aliases):
            return entry
    return None


def close_names(name: str, limit: int = 3) -> list[str]:
    """Catalog names and aliases that look like ``name`` (for "did you mean")."""
    names = {n.lower(): n for e in catalog() for n in (e.name, *e.aliases)}
    return [names[m] for m in difflib.get_close_matches(name.lower(), list(names), limit, 0.6)]
