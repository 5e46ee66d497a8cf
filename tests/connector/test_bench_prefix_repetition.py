"""The prefix-repetition benchmark's method (no engine here): the turn orders are
balanced and the ratios come from slices of engine steps paired with the baseline."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "scripts" / "bench" / "prefix_repetition.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prefix_repetition_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)  # puts scripts/ on sys.path for build_tiny_model
    finally:
        sys.path[:] = path
    return module


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_williams_orders_balance_first_place_and_predecessors(bench: ModuleType, n: int) -> None:
    rows = bench.williams_orders(n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    firsts = Counter(row[0] for row in rows)
    follows = Counter((a, b) for row in rows for a, b in itertools.pairwise(row))
    assert set(firsts.values()) == {len(rows) // n}
    # Every ordered pair of distinct configurations is adjacent equally often.
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1


def _slice(wall: float, steps: float = 60.0, others: float = 0.0) -> dict[str, float]:
    return {"wall_s": wall, "cpu_s": wall, "steps": steps, "others_cpus": others}


def _outcome(bench: ModuleType, hits: float = 0.0, blocks: float = 0.0) -> dict[str, float]:
    # 10 requests of 150 prompt + 8 output tokens, 20 ms to the first token each.
    return {"requests": 10.0, "ttft_s_sum": 0.2, "prompt_tokens": 1500.0,
            "tokens": 1580.0, "external_hits": hits, "blocks_stored": blocks,
            "bytes_stored": blocks * bench.BLOCK_BYTES}


def test_ratio_is_the_median_of_slices_paired_with_the_baseline(bench: ModuleType) -> None:
    # The machine slows down over the run (0.2 s -> 0.4 s per slice) and one EAGER
    # slice is hit by a 10x disturbance; paired slice by slice, EAGER is 0.95x the
    # baseline in 4 of 5 slices, so the median says 0.95 while the totals, which
    # the disturbance dominates, say much less.
    base_walls = [0.2, 0.25, 0.3, 0.35, 0.4]
    base = [_slice(w) for w in base_walls]
    eager = [_slice(w / 0.95) for w in base_walls]
    eager[2] = _slice(3.0, others=1.5)
    slices = {"none": base, "eager": eager, "eviction_aware": base}
    outcomes = {"none": [_outcome(bench)], "eager": [_outcome(bench, 300.0, 8.0)],
                "eviction_aware": [_outcome(bench, 300.0, 6.0)]}
    figures = bench.summarise(slices, outcomes)
    assert figures["throughput_ratio_eager"] == pytest.approx(0.95)
    assert figures["throughput_ratio_total_eager"] == pytest.approx(
        sum(base_walls) / (sum(base_walls[:2] + base_walls[3:]) / 0.95 + 3.0))
    assert figures["throughput_ratio_total_eager"] < 0.6
    lo, hi = figures["throughput_ratio_ci_lo_eager"], figures["throughput_ratio_ci_hi_eager"]
    assert lo <= 0.95 <= hi
    assert figures["throughput_ratio_eviction_aware"] == 1.0
    assert figures["throughput_ratio_ci_lo_eviction_aware"] == 1.0
    assert figures["external_hit_rate_eager"] == pytest.approx(300.0 / 1500.0)
    assert figures["bytes_ratio_eviction_aware_vs_eager"] == pytest.approx(6.0 / 8.0)
    assert figures["ttft_ms_eager"] == pytest.approx(20.0)
    assert figures["steps_eager"] == 300.0


def test_slices_are_compared_per_step_and_empty_ones_skipped(bench: ModuleType) -> None:
    # The last turn of a trial may hold fewer steps, or none once a configuration
    # finished: ratios compare steps per second, and a slice without steps is not a pair.
    base = [_slice(0.2), _slice(0.1, steps=30.0), _slice(0.0, steps=0.0)]
    fifo = [_slice(0.25), _slice(0.1, steps=24.0), _slice(0.01, steps=0.0)]
    figures = bench.summarise({"none": base, "fifo": fifo},
                              {"none": [_outcome(bench)], "fifo": [_outcome(bench)]})
    assert figures["throughput_ratio_fifo"] == pytest.approx(0.8)
    assert figures["throughput_ratio_ci_hi_fifo"] == pytest.approx(0.8)
    assert "bytes_ratio_eviction_aware_vs_eager" not in figures


def test_bootstrap_interval_narrows_with_more_slices(bench: ModuleType) -> None:
    few = [0.9, 1.0, 1.1, 0.95, 1.05]
    lo_few, hi_few = bench.bootstrap_median_interval(few)
    lo_many, hi_many = bench.bootstrap_median_interval(few * 20)
    assert lo_few <= lo_many <= 1.0 <= hi_many <= hi_few
    assert hi_many - lo_many < hi_few - lo_few
    # Seeded: the same slices always give the same interval.
    assert bench.bootstrap_median_interval(few) == (lo_few, hi_few)
