"""Resolve ``--model``: a local config.json or model directory, or a curated catalog name.

The catalog (``rules/models/catalog.toml``) holds config.json fields copied from cited
files; entries go through the same parser as local files, so a catalog model and its
downloaded config.json give identical figures.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir
from kvtool.sizing.hf_config import has_layout, spec_from_config
from kvtool.sizing.spec import ModelSpec

if TYPE_CHECKING:
    from kvtool.models.source import ModelConfig

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


def load_model_spec(path_or_name: str, *, release: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a config.json path, a model directory, or a catalog name.

    The model is found by :func:`kvtool.models.find_model_config`, the lookup every
    command shares. With ``release`` (a tabled vLLM version), an architecture that release
    no longer serves, or serves only through its Transformers backend when kvtool knows no
    layout for it, is refused with that fact (:mod:`kvtool.models.served`).
    """
    from kvtool.models.served import check_served
    from kvtool.models.source import find_model_config

    found = find_model_config(path_or_name)
    if found is None:
        known = ", ".join(e.name for e in catalog())
        raise KvtoolError(
            f"--model {path_or_name!r}: no such file or directory, and not in the catalog "
            f"({known}); pass a local config.json or model directory"
        )
    if release is not None:
        check_served(found, release, layout_known=has_layout(found.raw))
    return spec_from_model_config(found)


def spec_from_model_config(found: ModelConfig) -> ModelSpec:
    """The :class:`ModelSpec` of a config found by :func:`kvtool.models.find_model_config`."""
    return spec_from_config(
        found.raw,
        name=found.name,
        where=found.where,
        source=found.citation,
        quant_config=found.quant,
        quant_where=found.quant_where,
    )
