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

import os
import zlib
from collections.abc import Callable
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


def read_table(
    path: Path, *, check: Callable[[Path, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """The TOML data table at ``path``; ``KvtoolError`` when missing or malformed.

    ``check`` (raising ``KvtoolError``) runs on the table as parsed, before it is cached:
    a cached entry records that it passed (the check is part of the key), so a check too
    costly for every cold start (compiling every regular expression a table holds) runs
    once per change of the table."""
    try:
        stat = path.stat()
    except FileNotFoundError as exc:
        raise KvtoolError(f"data table {path} is missing from this installation") from exc
    except OSError as exc:
        raise KvtoolError(f"data table {path} cannot be read: {exc}") from exc
    key = _cache_key(path, stat)
    if check is not None:
        key += f"\0{check.__module__}.{check.__qualname__}"
    cached = _cache_entry(key)
    if cached is not None:
        try:
            entry = msgspec.json.decode(cached.read_bytes(), type=_Entry)
            if entry.key == key:
                return entry.table
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            pass  # a missing or damaged entry, or another table's, is a miss
    import tomllib  # only on a miss: a warm cache never parses TOML

    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle)
    except FileNotFoundError as exc:
        raise KvtoolError(f"data table {path} is missing from this installation") from exc
    except tomllib.TOMLDecodeError as exc:
        raise KvtoolError(f"data table {path} is not valid TOML: {exc}") from exc
    if check is not None:
        check(path, table)
    if cached is not None:
        _store(cached, key, table)
    return table


class _Entry(msgspec.Struct, frozen=True):
    """A cached table with the key it was stored under (a name clash reads as a miss)."""

    key: str
    table: dict[str, Any]


def _cache_key(path: Path, stat: os.stat_result) -> str:
    """The table at ``path`` as it is now, in this kvtool release."""
    resolved = str(path.resolve()).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return f"{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}\0{__version__}"


def _cache_entry(key: str) -> Path | None:
    """Where the parsed form of the table of ``key`` is kept; None with caching off
    (``KVTOOL_TABLE_CACHE=0``). The name needs no cryptographic hash (the entry records
    its key, checked on every read), so the cold start does not load OpenSSL for it."""
    if os.environ.get("KVTOOL_TABLE_CACHE") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    data = key.encode("utf-8")
    name = f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"
    return Path(base) / "kvtool" / "tables" / f"{name}.json"


def _store(entry: Path, key: str, table: dict[str, Any]) -> None:
    """Keep ``table`` at ``entry`` (atomically: a reader never sees half of it)."""
    try:
        data = msgspec.json.encode(_Entry(key, table))
    except (TypeError, msgspec.EncodeError):
        return  # a TOML date or time has no JSON form: such a table is always parsed
    if msgspec.json.decode(data, type=_Entry).table != table:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        temporary = entry.with_name(f".{entry.name}.{os.getpid()}")
        temporary.write_bytes(data)
        os.replace(temporary, entry)
    except OSError:
        pass
