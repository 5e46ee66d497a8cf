"""The curated model catalog (``rules/models/catalog.toml``): names, aliases, config fields.

Model identity, shared by every command that takes ``--model``: each entry keeps the
config.json fields that change KV-cache bytes, copied from a cited public file, and is
parsed like a local config.json (:func:`kvtool.models.find_model_config`).
"""

from __future__ import annotations

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


def closest_name(name: str) -> str | None:
    """The catalog name or alias that looks most like ``name`` (for "did you mean")."""
    from kvtool.suggest import closest

    names = {n.lower(): n for e in catalog() for n in (e.name, *e.aliases)}
    match = closest(name.lower(), names)
    return names[match] if match is not None else None
