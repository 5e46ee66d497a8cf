"""Locate the data tables shipped with kvtool (``rules/`` and ``recipes/``).

In a wheel they live under ``kvtool/_data/``; in a source checkout (editable
install, tests) they are the top-level ``rules/`` and ``recipes/`` folders.
Hand-curated tables under ``rules/`` are TOML: the audit's cold start already parses
TOML for its settings, and importing PyYAML alone would cost it ~30 ms.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from kvtool.errors import KvtoolError

_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def data_dir(name: str) -> Path:
    """Return the directory holding the shipped data folder ``name``."""
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"kvtool data folder {name!r} is missing from this installation")


def rules_dir() -> Path:
    return data_dir("rules")


def recipes_dir() -> Path:
    return data_dir("recipes")


def read_table(path: Path) -> dict[str, Any]:
    """The TOML data table at ``path``; ``KvtoolError`` when missing or malformed."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise KvtoolError(f"data table {path} is missing from this installation") from exc
    except tomllib.TOMLDecodeError as exc:
        raise KvtoolError(f"data table {path} is not valid TOML: {exc}") from exc
