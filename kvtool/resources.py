"""Locate the data tables shipped with kvtool (``rules/`` and ``recipes/``).

In a wheel they live under ``kvtool/_data/``; in a source checkout (editable
install, tests) they are the top-level ``rules/`` and ``recipes/`` folders.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

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
