"""The per-release capacity table (scripts/gen_capacity_formulas.py) and its readers.

The classifiers are checked on the function shapes vLLM's releases have had (written here
in those shapes: https://github.com/vllm-project/vllm/blob/v0.26.0/vllm/v1/core/kv_cache_utils.py
and v0.27.0, v0.20.0, v0.21.0 of the same file); the committed table must cover every
tabled release, each row with its wheel's sha256.
"""

from __future__ import annotations

import json
import sys

from packaging.version import Version

from kvtool.releases import release_index
from kvtool.sizing.capacity import FORMULAS_FILE, capacity_formula
from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from gen_capacity_formulas import classify, classify_tokens, default_block_size, env_default

POOLED = """
def get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config):
    num_layer_per_group = max(len(g.layer_names) for g in kv_cache_config.kv_cache_groups)
    return kv_cache_config.num_blocks / cdiv(num_layer_per_group * 2, 3)
"""
PER_GROUP = """
def get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config):
    num_blocks_per_request = sum(
        cdiv(g.kv_cache_spec.max_memory_usage_bytes(vllm_config), g.kv_cache_spec.page_size_bytes)
        for g in kv_cache_config.kv_cache_groups
    )
    return kv_cache_config.num_blocks / num_blocks_per_request
"""


def test_the_block_count_formula_is_read_from_the_function_body() -> None:
    assert classify(POOLED) == ("pooled", 2)
    assert classify(PER_GROUP) == ("per_group", 2)
    assert classify("def other(): pass") is None


def test_the_token_figure_and_the_defaults_are_read_from_the_source() -> None:
    assert classify_tokens("n = int(max_concurrency * max_model_len)") == "concurrency"
    per_group = "n = kv_cache_config.num_blocks // len(kv_cache_config.kv_cache_groups) * b"
    assert classify_tokens(per_group) == "blocks_per_group"
    assert classify_tokens("n = num_blocks * block_size") == "blocks"
    envs = 'x = {"A": lambda: bool(int(os.getenv("A", "1")))}'
    assert env_default(envs, "A") == "1"
    assert env_default(envs, "B") is None
    cache = "class CacheConfig:\n    DEFAULT_BLOCK_SIZE: ClassVar[int] = 64\n"
    assert default_block_size([cache]) == 64
    assert default_block_size(["class CacheConfig:\n    block_size: int = None\n"]) is None


def test_the_table_covers_every_tabled_release_with_provenance() -> None:
    table = json.loads((REPO_ROOT / "rules" / FORMULAS_FILE).read_text())
    # Every tabled release from the first whose V1 KV cache utilities have the function
    # (the oldest tables predate the V1 engine).
    first = min(table["releases"], key=Version)
    versions = release_index().versions
    assert set(table["releases"]) == set(versions[versions.index(first) :])
    for version, row in table["releases"].items():
        assert len(row["sha256"]) == 64, version
        assert capacity_formula(version).blocks == row["formula"]
