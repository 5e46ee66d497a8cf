"""Resolve ``--model``: a local config.json or model directory, or a curated catalog name.

The catalog (``rules/models/catalog.toml``) holds config.json fields copied from cited
files; entries go through the same parser as local files, so a catalog model and its
downloaded config.json give identical figures.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir
from kvtool.sizing.hf_config import spec_from_config
from kvtool.sizing.spec import ModelSpec

CATALOG_FILE = "models/catalog.toml"
QUANT_CONFIG_FILE = "hf_quant_config.json"


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


def _read_config(config_path: Path, given: Path) -> dict[str, Any]:
    """The JSON object in ``config_path``; ``given`` is what ``--model`` named."""
    if not config_path.is_file():
        raise KvtoolError(f"--model {given}: no config.json in that directory")
    from kvtool.fsio import read_input_text
    from kvtool.nesting import loads_json

    text = read_input_text(config_path)  # a regular file within the input size limit
    try:
        loaded = loads_json(text, str(config_path))
    except json.JSONDecodeError as exc:
        raise KvtoolError(f"{config_path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise KvtoolError(f"{config_path}: not usable JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise KvtoolError(f"{config_path}: expected a JSON object at the top level")
    return loaded


def load_model_spec(path_or_name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a config.json path, a model directory, or a catalog name."""
    path = Path(path_or_name).expanduser()
    if path.exists():
        config_path = path / "config.json" if path.is_dir() else path
        config = _read_config(config_path, path)
        # Older ModelOpt checkpoints declare quantization (and KV dtype) beside config.json.
        quant_path = config_path.with_name(QUANT_CONFIG_FILE)
        quant = _read_config(quant_path, path) if quant_path.is_file() else None
        return spec_from_config(
            config,
            name=path_or_name,
            where=str(config_path),
            quant_config=quant,
            quant_where=str(quant_path),
        )
    entry = find_entry(path_or_name)
    if entry is None:
        known = ", ".join(e.name for e in catalog())
        raise KvtoolError(
            f"--model {path_or_name!r}: no such file or directory, and not in the catalog "
            f"({known}); pass a local config.json or model directory"
        )
    return spec_from_config(
        entry.config,
        name=entry.name,
        where=f"catalog entry {entry.name!r} in {CATALOG_FILE}",
        source=entry.source,
    )
