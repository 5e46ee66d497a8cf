"""LMCache configuration facts per LMCache release, generated from its wheels.

``rules/lmcache/<version>.json`` is written by ``scripts/gen_lmcache_tables.py`` (AST of
``lmcache/v1/config.py`` and ``lmcache/integration/vllm/*``, sha256 of the wheel). A
serve configuration does not say which LMCache release runs next to vLLM, so the audit
asks which releases know a name (:func:`releases_with`), not whether "the" release does.
"""

from __future__ import annotations

import json
from functools import cache

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import rules_dir

TABLE_DIR = "lmcache"


class LmcacheWheel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    filename: str
    sha256: str
    generator_version: int


class LmcacheRelease(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one LMCache release reads: config names, their aliases, env vars, MP keys."""

    version: str
    wheel: LmcacheWheel
    config_names: tuple[str, ...]
    aliases: dict[str, str]  # deprecated config name -> current name
    env_vars: tuple[str, ...]
    mp_keys: tuple[str, ...]  # lmcache.mp.* extra-config keys of LMCacheMPConnector


@cache
def releases() -> tuple[LmcacheRelease, ...]:
    """Every tabled LMCache release, oldest first."""
    folder = rules_dir() / TABLE_DIR
    try:
        index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
        return tuple(
            msgspec.json.decode((folder / f"{v}.json").read_bytes(), type=LmcacheRelease)
            for v in index["versions"]
        )
    except (OSError, KeyError, ValueError, msgspec.ValidationError) as exc:
        raise KvtoolError(f"LMCache tables in {folder} are missing or corrupt: {exc}") from exc


def releases_with(kind: str, name: str) -> tuple[str, ...]:
    """LMCache versions whose ``kind`` (``env_vars``, ``config_names``, ``mp_keys``) has
    ``name``."""
    return tuple(r.version for r in releases() if name in getattr(r, kind))


@cache
def known(kind: str) -> frozenset[str]:
    """Every name of ``kind`` any tabled release reads."""
    return frozenset(n for r in releases() for n in getattr(r, kind))


def span(versions: tuple[str, ...]) -> str:
    """``0.3.1-0.5.6`` (first and last tabled release that have it), or ``0.4.7``."""
    if not versions:
        return "no release"
    return versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"
