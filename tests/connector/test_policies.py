"""Drain policies through the manager: FIFO's documented examples, EVICTION_AWARE
under a scripted free queue, idle tail drain, scratch KV groups, per-step cost."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvtool.connector.blockpool import InMemoryBlockPool
from kvtool.connector.manager import StoreJob
from kvtool.connector.policies import POLICY_NAMES
from tests.connector.harness import Rig, released_blocks

FIFO_20_10 = {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 20, "kvtool.fifo.select_count": 10}


def _finished_requests(rig: Rig, names: list[str]) -> dict[str, int]:
    """One single-block request per name, finished; returns name -> block id."""
    blocks = {}
    for name in names:
        (blocks[name],) = rig.compute(name, [name])
        rig.finish(name)
    return blocks


def test_fifo_threshold_20_select_10_releases_10_then_waits_for_10_more() -> None:
    # shared/seeds/000 (LMCache docs): "with a threshold of 20 and a select count of
    # 10, the first trigger submits 10 requests and leaves 10 ready. Another 10
    # requests must finish before the count reaches 20"; lazy-offload.md §2 with 25
    # finished: drains [10, 0, 0, 0].
    rig = Rig.with_config(FIFO_20_10, num_blocks=64)
    blocks = _finished_requests(rig, [f"r{i}" for i in range(25)])
    per_step = [rig.step() for _ in range(4)]
    assert [len(jobs) for jobs in per_step] == [10, 0, 0, 0]
    assert released_blocks(per_step[0]) == [blocks[f"r{i}"] for i in range(10)]
    _finished_requests(rig, [f"s{i}" for i in range(4)])
    assert rig.step() == []  # 19 ready
    _finished_requests(rig, ["s4"])
    second = rig.step()  # 20 ready: the 10 admitted first go
    assert released_blocks(second) == [blocks[f"r{i}"] for i in range(10, 20)]


def test_fifo_threshold_1_select_2_six_requests_three_batches() -> None:
    # LMCache test_pop_items_for_offload_multiple_batches (lazy-offload.md §7.1):
    # threshold 1 / select 2, six finished -> batches from req-0, req-2, req-4, then none.
    rig = Rig.with_config({"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1,
                           "kvtool.fifo.select_count": 2})
    blocks = _finished_requests(rig, [f"req-{i}" for i in range(6)])
    batches = [released_blocks(rig.step()) for _ in range(4)]
    assert batches == [
        [blocks["req-0"], blocks["req-1"]],
        [blocks["req-2"], blocks["req-3"]],
        [blocks["req-4"], blocks["req-5"]],
        [],
    ]


def test_fifo_counts_only_finished_requests_and_needs_a_token_step() -> None:
    rig = Rig.with_config({"kvtool.policy": "fifo", "kvtool.fifo.threshold": 2,
                           "kvtool.fifo.select_count": 5})
    rig.compute("running", ["a", "b"])
    _finished_requests(rig, ["done"])
    assert rig.step() == []  # one ready: below threshold
    _finished_requests(rig, ["done2"])
    assert rig.step(tokens=0) == []  # threshold met, but no token scheduled
    done = {((), "done"), ((), "done2")}
    released = released_blocks(rig.step())
    assert sorted(released) == [b for b in range(rig.num_blocks) if rig.pool.block_hash(b) in done]
    assert rig.manager.stats.pending == 2  # the running request is untouched


def test_fifo_orders_by_admission_not_by_finish() -> None:
    rig = Rig.with_config({"kvtool.policy": "fifo", "kvtool.fifo.threshold": 2,
                           "kvtool.fifo.select_count": 1})
    (first,) = rig.compute("first", ["x"])
    rig.compute("second", ["y"])
    rig.finish("second")
    rig.finish("first")
    assert released_blocks(rig.step()) == [first]


def _ea_rig(**extra: object) -> Rig:
    return Rig.with_config({"kvtool.policy": "eviction_aware", **extra}, num_blocks=16)


def test_eviction_aware_releases_when_blocks_near_the_eviction_head() -> None:
    rig = _ea_rig()
    a = rig.compute("a", ["a0", "a1", "a2", "a3"])   # blocks 0-3
    b = rig.compute("b", ["b0", "b1", "b2", "b3"])   # blocks 4-7, stays running
    rig.finish("a")  # free queue: 8..15, then a3, a2, a1, a0 (reverse order, at the tail)
    # One block per step (16 tokens / 16 per block): depth ceil(max(EWMA 8, 1) * 2.5) = 20
    # on the first step, because the 8 allocations seed the EWMA.
    jobs = rig.step()
    assert released_blocks(jobs) == a, "a's blocks are inside the 20-block window"
    assert b[0] not in released_blocks(jobs)


def test_eviction_aware_waits_while_blocks_are_far_from_the_head() -> None:
    rig = _ea_rig()
    rig.step(tokens=16)  # seeds the EWMA with 0 allocations
    a = rig.compute("a", ["a0", "a1"])
    rig.finish("a")  # free queue: 2..15 (14 blocks), a1, a0
    rig.allocated.clear()  # a's allocation happened on an earlier step
    for _ in range(3):  # depth ceil(max(EWMA, 1) * 2.5) = 3: a1 is at position 14
        assert rig.step() == []
    rig.pool.allocate(12)  # other requests consume the head: a1 at position 2
    jobs = rig.step(tokens=16)
    assert released_blocks(jobs) == a  # a1 entered the window; the due front is a0..a1
    assert rig.manager.stats.released_by["eviction_window"] == 2


def _freed_in_order(rig: Rig, a: list[int], others: list[int]) -> None:
    """Fill the rest of the pool, then free a[:2], others, a[2:] in that order."""
    rig.allocated.clear()
    rig.pool.allocate(rig.pool.num_free)
    rig.pool.free(a[:2])
    rig.pool.free(others)
    rig.pool.free(a[2:])


def test_eviction_aware_releases_only_the_due_front() -> None:
    rig = _ea_rig()
    rig.step()
    a = rig.compute("a", ["a0", "a1", "a2", "a3"])
    rig.manager.on_request_finished("a")
    others = rig.pool.allocate(3)  # another request's blocks, nothing buffered
    for i, block in enumerate(others):
        rig.pool.set_hash(block, ("other", i))
    # Queue: a0, a1, o0, o1, o2, a2, a3 (a freed front first, as a sliding window
    # retires blocks).
    _freed_in_order(rig, a, others)
    jobs = rig.step(tokens=16)  # depth 3 (EWMA 0, one block per step)
    assert released_blocks(jobs) == a[:2]
    assert rig.manager.stats.pending == 2  # a2, a3 sit behind three other blocks


def test_eviction_aware_counts_positions_after_its_own_releases_leave_the_queue() -> None:
    # Protecting a0, a1 moves o0 and a2 towards the head: with depth 3, a2 would be
    # at position 1 once they leave, so it is due now (the pin cascade, §6.11).
    rig = _ea_rig()
    rig.step()
    a = rig.compute("a", ["a0", "a1", "a2", "a3"])
    rig.manager.on_request_finished("a")
    others = rig.pool.allocate(1)
    rig.pool.set_hash(others[0], ("other", 0))
    _freed_in_order(rig, a, others)  # queue: a0, a1, o0, a2, a3
    assert released_blocks(rig.step(tokens=16)) == a


def test_eviction_aware_reads_only_the_danger_window() -> None:
    """Per-step cost: 2,000 buffered blocks, none near the head -> 3 queue reads; and
    none at all while only running requests buffer (their blocks cannot be queued)."""
    rig = Rig.with_config({}, num_blocks=4096)
    rig.step()
    rig.compute("hot", [f"h{i}" for i in range(2000)])  # running: not in the free queue
    rig.allocated.clear()
    reads = 0
    iterate = rig.pool.iter_eviction_order

    def counting() -> Iterator[int]:
        nonlocal reads
        for block in iterate():
            reads += 1
            yield block

    rig.pool.iter_eviction_order = counting  # type: ignore[method-assign]
    assert rig.step() == []
    assert reads == 0
    rig.compute("done", ["d0"])
    rig.finish("done")  # its block joins the free queue's tail, far from the head
    rig.allocated.clear()
    assert rig.step() == []
    assert reads == 3  # ceil(max(EWMA 0, 1 block) * 2.5)


def test_deadline_releases_an_old_request_after_window_candidates() -> None:
    rig = _ea_rig(**{"kvtool.eviction_aware.max_deferral_seconds": 30})
    rig.step()
    a = rig.compute("a", ["a0"])  # running: never in the window
    rig.allocated.clear()
    rig.clock.now += 25
    assert rig.step() == []
    rig.clock.now += 6
    jobs = rig.step()
    assert released_blocks(jobs) == a
    assert rig.manager.stats.released_by["deadline"] == 1


def test_every_policy_drains_the_tail_when_the_engine_goes_idle() -> None:
    for policy in ("eager", "fifo", "eviction_aware"):
        rig = Rig.with_config({"kvtool.policy": policy, "kvtool.idle_drain_steps": 3,
                               "kvtool.idle_drain_seconds": 0})
        rig.step()
        blocks = rig.compute("tail", ["t0", "t1"])
        rig.finish("tail")
        if policy == "eager":
            assert released_blocks(rig.step()) == blocks
            continue
        rig.allocated.clear()
        assert rig.manager.has_pending_work(), "keeps the engine stepping until drained"
        assert rig.step(tokens=0) == [] and rig.step(tokens=0) == []
        jobs = rig.step(tokens=0)
        assert released_blocks(jobs) == blocks, policy
        assert rig.manager.stats.released_by["idle"] == 2
        rig.complete(jobs)
        assert not rig.manager.has_pending_work()


def test_idle_drain_by_seconds() -> None:
    rig = Rig.with_config({"kvtool.idle_drain_steps": 1000, "kvtool.idle_drain_seconds": 2})
    rig.step()
    blocks = rig.compute("tail", ["t0"])
    rig.finish("tail")
    rig.allocated.clear()
    rig.clock.now += 1
    assert rig.step(tokens=0) == []
    rig.clock.now += 1.5
    assert released_blocks(rig.step(tokens=0)) == blocks


def test_release_cap_spreads_a_big_drain_over_steps() -> None:
    rig = Rig.with_config({"kvtool.policy": "eager", "kvtool.max_release_blocks_per_step": 3})
    blocks = rig.compute("big", [f"b{i}" for i in range(7)])
    assert [released_blocks(rig.step()) for _ in range(3)] == [blocks[:3], blocks[3:6], blocks[6:]]


def test_zero_tokens_per_block_group_does_not_divide_by_zero() -> None:
    # LMCache 0.5.6 raises ZeroDivisionError with group_tokens_per_block=[16, 0]
    # (lazy-offload.md §6.5, §9 run A).
    rig = Rig.with_config({}, tokens_per_block=(16, 0))
    rig.compute("a", ["a0"])
    assert rig.step(tokens=4096) == []  # est 256 blocks from the 16-token group only
    assert rig.manager.stats.pending == 1


def test_block_pool_reproduces_vllm_free_queue_order() -> None:
    pool = InMemoryBlockPool(6)
    a = pool.allocate(3)
    for i, block in enumerate(a):
        pool.set_hash(block, i)
    pool.free(list(reversed(a)))
    assert list(pool.iter_eviction_order()) == [3, 4, 5, 2, 1, 0]
    pool.touch([1])  # prefix-cache hit
    assert list(pool.iter_eviction_order()) == [3, 4, 5, 2, 0]
    (b,) = pool.allocate(1)
    pool.free([b])  # unhashed: back to the head
    assert next(pool.iter_eviction_order()) == b
    assert pool.allocate(5)[-1] == 0 and pool.block_hash(0) is None  # recycled: hash reset


def _pool_nearly_full(rig: Rig) -> list[int]:
    """Request "a" holds 4 buffered blocks, others hold all but 3 of the rest, and
    a decode phase (no allocations) decays the consumption estimate to a 2-block
    window, which a burst of admissions outruns."""
    a = rig.compute("a", ["a0", "a1", "a2", "a3"])
    rig.compute("others", [f"o{i}" for i in range(rig.pool.num_free - 3)])
    for _ in range(12):  # EWMA 21 blocks, then x0.7 per step: 0.42 x horizon 2.5 -> 2
        rig.step(tokens=1)
    return a


def _rescued(jobs: list[StoreJob]) -> list[int]:
    return [block for job in jobs if job.before_forward for block in job.block_ids]


def test_a_preempting_pass_rescues_the_running_buffers_it_hands_out() -> None:
    # 3 free blocks: the next pass may preempt a running request and hand its blocks
    # out at once. Nothing is released for that in advance (running buffers stay
    # buffered); the step of that pass copies them before its forward instead.
    rig = Rig.with_config({"kvtool.policy": "eviction_aware"}, num_blocks=24)
    a = _pool_nearly_full(rig)
    assert rig.manager.stats.released == 0
    rig.preempt("a")
    rig.allocated += rig.pool.allocate(7)  # the pass that preempted a recycles its blocks
    jobs = rig.step()
    assert _rescued(jobs) == a
    rig.complete(jobs)
    stats = rig.manager.stats
    assert (stats.stored, stats.rescued, stats.lost_to_recycling) == (4, 4, 0)
    assert stats.pending == 17 and stats.ledger_balanced()  # the others stay lazy


def test_a_roomy_pool_leaves_running_buffers_alone() -> None:
    rig = Rig.with_config({"kvtool.policy": "eviction_aware"}, num_blocks=64)
    rig.compute("a", ["a0", "a1", "a2", "a3"])
    assert rig.step(tokens=1) == [] and rig.manager.stats.pending == 4


def _churn(policy: str) -> tuple[int, int, int]:
    """A pool with 3 usable blocks, every request's blocks recycled by the next one:
    (blocks stored, still buffered at the end, lost to recycling)."""
    rig = Rig.with_config({"kvtool.policy": policy, "kvtool.fifo.threshold": 100},
                          num_blocks=3)
    for i in range(16):
        rig.compute(f"r{i}", [f"r{i}.0", f"r{i}.1"])
        rig.complete(rig.step())
        rig.finish(f"r{i}")
    rig.complete(rig.step())
    stats = rig.manager.stats
    return stats.stored, stats.pending, stats.lost_to_recycling


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_churning_pool_loses_nothing_eager_would_store(policy: str) -> None:
    # Issue 25: with 3 usable blocks eviction_aware stored 3 of 32 blocks, eager 16 of 16.
    # Now every recycled block is rescued; only the last request's, which the engine
    # still holds, may be left buffered (not written: the lazy saving).
    stored, pending, lost = _churn(policy)
    assert _churn("eager") == (32, 0, 0)
    assert (stored + pending, lost) == (32, 0)
    assert pending <= 2


def test_a_pass_that_recycles_finished_blocks_before_the_step_rescues_their_front() -> None:
    # a finishes into a 3-block queue; the next pass admits a 5-block prefill before any
    # step decides and recycles a3 and a2 (freed last-first, nearest the head). The
    # front through a3 is copied before that step's forward: nothing is lost.
    rig = Rig.with_config({"kvtool.policy": "eviction_aware"}, num_blocks=24)
    a = _pool_nearly_full(rig)
    rig.finish("a")  # queue: 3 others, a3, a2, a1, a0
    rig.allocated += rig.pool.allocate(5)
    jobs = rig.step()
    assert _rescued(jobs) == a
    stats = rig.manager.stats
    assert (stats.rescued, stats.lost_to_recycling, sum(stats.dropped.values())) == (4, 0, 0)
    assert stats.ledger_balanced()


def test_rescues_are_not_capped_by_the_step_release_cap() -> None:
    # The pass already took the blocks: a cap would lose them.
    rig = Rig.with_config({"kvtool.policy": "eviction_aware",
                           "kvtool.max_release_blocks_per_step": 1}, num_blocks=24)
    a = _pool_nearly_full(rig)
    rig.finish("a")
    rig.allocated += rig.pool.allocate(7)
    assert _rescued(rig.step()) == a


def test_eviction_aware_stays_lazy_when_the_queue_ahead_outlasts_the_next_pass() -> None:
    rig = Rig.with_config({"kvtool.policy": "eviction_aware"}, num_blocks=64)
    rig.step()
    rig.compute("a", ["a0", "a1"])
    rig.finish("a")  # 62 free blocks ahead of a's: no pass can reach them
    assert rig.step(tokens=1) == []
    assert rig.manager.stats.released == 0 and rig.pool.num_free == 64
