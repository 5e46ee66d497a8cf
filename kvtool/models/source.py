"""Find a model's config.json: the one lookup ``size``, ``launch`` and ``audit`` share.

A name is, in this order, a local config.json or model directory (read through
:mod:`kvtool.fsio`, with an ``hf_quant_config.json`` beside it), or a curated catalog
entry (``rules/models/catalog.toml``, fields copied from cited config.json files). The
family table (:mod:`kvtool.models.identity`) only ever names traits, never geometry, so
it is not a config source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtool.errors import KvtoolError
from kvtool.models.catalog import CATALOG_FILE, find_entry

# Older ModelOpt checkpoints declare quantization (and KV dtype) beside config.json.
QUANT_CONFIG_FILE = "hf_quant_config.json"


@dataclass(frozen=True)
class ModelConfig:
    """A config.json mapping and where it came from.

    ``where`` names the file (or the catalog entry) for error messages; ``citation`` is
    the public source of a catalog entry's fields (None for a local file, which cites
    itself). ``quant`` is a separate ``hf_quant_config.json`` read from ``quant_where``.
    """

    name: str
    raw: Mapping[str, Any]
    where: str
    citation: str | None = None
    quant: Mapping[str, Any] | None = None
    quant_where: str | None = None

    @property
    def architectures(self) -> tuple[str, ...]:
        """The config's ``architectures`` (the text part's when the wrapper has none)."""
        for part in (self.raw, self.raw.get("text_config")):
            if isinstance(part, Mapping):
                names = part.get("architectures")
                if isinstance(names, list) and names:
                    return tuple(str(n) for n in names)
        return ()


def read_config_json(config_path: Path, given: Path) -> dict[str, Any]:
    """The JSON object in ``config_path``; ``given`` is the path the user named."""
    if not config_path.is_file():
        raise KvtoolError(f"{given}: no config.json there")
    from kvtool.fsio import read_input_text
    from kvtool.nesting import loads_json

    text = read_input_text(config_path)  # a regular file within the input size limit
    try:
        loaded = loads_json(text, str(config_path))  # refuses nesting past the named limit
    except json.JSONDecodeError as exc:
        raise KvtoolError(f"{config_path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise KvtoolError(f"{config_path}: not usable JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise KvtoolError(f"{config_path}: expected a JSON object at the top level")
    return loaded


def _local(name: str, path: Path) -> ModelConfig:
    config_path = path / "config.json" if path.is_dir() else path
    raw = read_config_json(config_path, path)
    quant_path = config_path.with_name(QUANT_CONFIG_FILE)
    quant = read_config_json(quant_path, path) if quant_path.is_file() else None
    return ModelConfig(
        name=name,
        raw=raw,
        where=str(config_path),
        quant=quant,
        quant_where=str(quant_path) if quant is not None else None,
    )


def find_model_config(
    name: str, *, config_path: str | None = None, catalog: bool = True
) -> ModelConfig | None:
    """The config.json of ``name``: ``config_path`` when given, a local path, else the catalog.

    A given ``config_path`` (or an existing local path) that holds no readable config.json
    is an error (``KvtoolError``); a name no source knows gives None. ``catalog=False``
    skips the catalog (the audit asks the family table for names instead).
    """
    if config_path is not None:
        return _local(name, Path(config_path).expanduser())
    path = Path(name).expanduser()
    if path.exists():
        return _local(name, path)
    if not catalog:
        return None
    entry = find_entry(name)
    if entry is None:
        return None
    return ModelConfig(
        name=entry.name,
        raw=entry.config,
        where=f"catalog entry {entry.name!r} in {CATALOG_FILE}",
        citation=entry.source,
    )
