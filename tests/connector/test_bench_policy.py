"""The LMCache comparison trace: kvtool stores at least as many blocks before eviction.

Needs PyPI once (the benchmark fetches the lmcache 0.5.6 wheel with ``pip download``
into its cache directory); the counts are deterministic (seeded trace), not timings.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "policy_step_cost.py"


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("policy_step_cost", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    """The benchmark module; the LMCache stand-ins it registers are removed afterwards."""
    before = set(sys.modules)
    yield _load_bench()
    for name in set(sys.modules) - before:
        if name == "policy_step_cost" or name.split(".")[0] == "lmcache":
            del sys.modules[name]


@pytest.mark.network
def test_kvtool_stores_at_least_as_many_blocks_as_lmcache_on_the_churn_trace(
    bench: ModuleType,
) -> None:
    lm = bench.load_lmcache(Path.home() / ".cache" / "kvtool" / "bench")
    stored = {}
    for name, make in (("kvtool", bench.KvtoolDriver),
                       ("lmcache", lambda pool: bench.LMCacheDriver(pool, lm))):
        pool = bench.LinkedPool(1024)
        driver = make(pool)
        bench.churn(driver, pool, 400, seed=7)
        driver.flush()
        stored[name] = (len(driver.stored_hashes), driver.stored_writes)
    assert stored["kvtool"][0] >= stored["lmcache"][0] > 0
    # Hot shared prefixes are written once by kvtool; LMCache writes duplicates.
    assert stored["kvtool"][1] == stored["kvtool"][0]
    assert stored["lmcache"][1] > stored["lmcache"][0]
