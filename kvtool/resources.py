"""Locate the data tables shipped with kvtool (``rules/`` and ``recipes/``).

In a wheel they live under ``kvtool/_data/``; in a source checkout (editable
install, tests) they are the top-level ``rules/`` and ``recipes/`` folders.
Hand-curated tables under ``rules/`` are TOML: the audit's cold start already parses
TOML for its settings, and importing PyYAML alone would cost it ~30 ms. Parsing TOML in
pure Python still costs a cold start more than all the rules it feeds, so each table's
parsed form is kept as JSON under ``$XDG_CACHE_HOME/kvtool/tables`` (keyed by the table's
path, size, modification time and the kvtool version) and read from there while the table
is unchanged; a cache that cannot be read or written is passed over, never an error.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from kvtool import __version__
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
        stat = path.stat()
    except FileNotFoundError as exc:
        raise KvtoolError(f"data table {path} is missing from this installation") from exc
    except OSError as exc:
        raise KvtoolError(f"data table {path} cannot be read: {exc}") from exc
    cached = _cache_entry(path, stat)
    if cached is not None:
        try:
            table: dict[str, Any] = msgspec.json.decode(cached.read_bytes())
            return table
        except (OSError, msgspec.DecodeError):
            pass  # a missing or damaged entry is a miss
    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle)
    except FileNotFoundError as exc:
        raise KvtoolError(f"data table {path} is missing from this installation") from exc
    except tomllib.TOMLDecodeError as exc:
        raise KvtoolError(f"data table {path} is not valid TOML: {exc}") from exc
    if cached is not None:
        _store(cached, table)
    return table


def _cache_entry(path: Path, stat: os.stat_result) -> Path | None:
    """Where the parsed form of the table at ``path``, as it is now, is kept; None with
    caching off (``KVTOOL_TABLE_CACHE=0``)."""
    if os.environ.get("KVTOOL_TABLE_CACHE") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    key = f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0{__version__}"
    name = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return Path(base) / "kvtool" / "tables" / f"{name}.json"


def _store(entry: Path, table: dict[str, Any]) -> None:
    """Keep ``table`` at ``entry`` (atomically: a reader never sees half of it)."""
    try:
        data = msgspec.json.encode(table)
    except (TypeError, msgspec.EncodeError):
        return  # a TOML date or time has no JSON form: such a table is always parsed
    if msgspec.json.decode(data) != table:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        temporary = entry.with_name(f".{entry.name}.{os.getpid()}")
        temporary.write_bytes(data)
        os.replace(temporary, entry)
    except OSError:
        pass
