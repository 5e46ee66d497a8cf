"""How a vLLM release turns KV cache blocks into the capacity it logs (generated table).

``rules/models/capacity_formulas.json`` (``scripts/gen_capacity_formulas.py``, read from
each release's wheel) records, per release, how ``get_max_concurrency_for_kv_cache_config``
counts the blocks one max-length request takes (``per_group`` from vLLM 0.27, ``pooled``
before) and how the ``GPU KV cache size`` token figure is made (``concurrency``: concurrency
x max_model_len; ``blocks_per_group``: blocks // groups x smallest block; ``blocks``), and
the default of the environment variable that lets chunked local attention keep HMA on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from kvtool.errors import KvtoolError
from kvtool.resources import rules_dir

FORMULAS_FILE = "models/capacity_formulas.json"


@dataclass(frozen=True)
class CapacityFormula:
    release: str
    blocks: str  # per_group | pooled
    tokens: str  # concurrency | blocks_per_group | blocks
    source: str  # wheel member:line
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE when the deployment does not set it
    chunked_local_hma_env_default: str | None
    # CacheConfig.DEFAULT_BLOCK_SIZE (None: the platform's, before that class constant)
    default_block_size: int | None


@cache
def _table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads((rules_dir() / FORMULAS_FILE).read_text(encoding="utf-8"))
    return table


def capacity_formula(release: str) -> CapacityFormula:
    row = _table()["releases"].get(release)
    if row is None:
        raise KvtoolError(
            f"vLLM {release}: no capacity formula in rules/{FORMULAS_FILE} "
            "(regenerate with scripts/gen_capacity_formulas.py)"
        )
    return CapacityFormula(
        release, row["formula"], row["tokens"], row["source"],
        row.get("chunked_local_hma_env_default"), row.get("default_block_size"),
    )


def logged_tokens(
    formula: CapacityFormula, num_blocks: int, concurrency: float, max_model_len: int,
    groups: int, smallest_block: int,
) -> int:
    """The ``GPU KV cache size: N tokens`` the release logs."""
    if formula.tokens == "concurrency":
        return int(concurrency * max_model_len)
    if formula.tokens == "blocks_per_group":
        return num_blocks // groups * smallest_block
    return num_blocks * smallest_block
