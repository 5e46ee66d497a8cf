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


PAIRS_TABLE = "vllm_pairs.json"


class PairWheel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    filename: str
    sha256: str


class PairProblem(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One vLLM/LMCache release pair whose connector cannot start, and why."""

    vllm: str
    lmcache: str
    connector: str  # LMCacheMPConnector or LMCacheConnectorV1
    reason: str  # the ImportError or TypeError Python raises
    where: str  # "<path in the wheel>:<line>" of the failing import or call


class PairTable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``rules/lmcache/vllm_pairs.json``, written by ``scripts/gen_lmcache_pairs.py``."""

    generator_version: int
    vllm_wheels: dict[str, PairWheel]
    lmcache_wheels: dict[str, PairWheel]
    pairs: tuple[PairProblem, ...]


@cache
def vllm_pairs() -> PairTable:
    """Every failing vLLM x LMCache pair the generator found, with the wheels it read."""
    path = rules_dir() / TABLE_DIR / PAIRS_TABLE
    try:
        return msgspec.json.decode(path.read_bytes(), type=PairTable)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise KvtoolError(f"LMCache/vLLM pair table {path} is missing or corrupt: {exc}") from exc


def pair_problem(vllm: str, lmcache: str, connector: str) -> PairProblem | None:
    """Why ``connector`` cannot start with this vLLM and LMCache release (None: it can, or
    the pair is not tabled)."""
    return next(
        (
            row
            for row in vllm_pairs().pairs
            if row.vllm == vllm and row.lmcache == lmcache and row.connector == connector
        ),
        None,
    )
