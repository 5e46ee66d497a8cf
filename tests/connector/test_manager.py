"""Manager behaviour: hash re-checks, dedupe, worker reports, request lifecycle, shutdown."""

from __future__ import annotations

import logging

import pytest

from kvtool.connector.config import ShutdownMode
from kvtool.connector.manager import STATS_LOG_INTERVAL_S, JobReport
from kvtool.connector.stats import DropReason
from kvtool.connector.store import BlockKey
from tests.connector.harness import BLOCK_BYTES, Rig, released_blocks

EAGER = {"kvtool.policy": "eager"}
FIFO_1 = {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1, "kvtool.fifo.select_count": 100}


def _dropped(rig: Rig, reason: DropReason) -> int:
    return rig.manager.stats.dropped[reason.value]


def test_store_takes_no_block_reference_and_commits_on_completion() -> None:
    rig = Rig.with_config(EAGER)
    blocks = rig.compute("a", ["a0", "a1"])
    rig.finish("a")
    (job,) = rig.step()
    # Never referenced: the engine's reset_prefix_cache and preemptions always succeed.
    assert [rig.pool.ref_cnt(b) for b in blocks] == [0, 0]
    assert rig.pool.reset_prefix_cache() is True
    assert rig.manager.lookup([job.keys[0].block_hash]) == 0  # not yet stored
    rig.complete([job])
    assert rig.manager.lookup([k.block_hash for k in job.keys]) == 2
    stats = rig.manager.stats
    assert (stats.stored, stats.stored_bytes, stats.in_flight) == (2, 2 * BLOCK_BYTES, 0)
    assert stats.ledger_balanced()


def test_a_recycled_block_is_rescued_with_its_front_before_the_forward() -> None:
    # vLLM frees a request's blocks last-first, so a2 and a3 sit nearest the head; the
    # next pass hands a2 to another request before FIFO's next decision could release
    # it. Its KV is still there until that step's forward: the front through it is
    # copied ahead of the forward, a3 (not recycled) after it, and nothing is lost.
    rig = Rig.with_config(FIFO_1, num_blocks=8)
    blocks = rig.compute("a", ["a0", "a1", "a2", "a3"])
    rig.manager.on_request_finished("a")
    rig.pool.free([blocks[2], blocks[3], blocks[0], blocks[1]])
    rig.allocated.clear()
    rig.pool.allocate(4)  # blocks 4-7
    recycled = rig.pool.allocate(1)  # a2: its hash is reset
    assert recycled == [blocks[2]]
    rig.allocated = recycled
    rescue, after = rig.step()
    assert (rescue.block_ids, rescue.before_forward) == (tuple(blocks[:3]), True)
    assert (after.block_ids, after.before_forward) == ((blocks[3],), False)
    stats = rig.manager.stats
    assert (stats.rescued, stats.released_by["recycled"], stats.lost_to_recycling) == (3, 3, 0)
    assert sum(stats.dropped.values()) == 0
    rig.complete([rescue, after])
    assert rig.manager.lookup([k.block_hash for k in (*rescue.keys, *after.keys)]) == 4
    assert stats.ledger_balanced()


def test_a_load_into_a_recycled_block_rescues_it_first() -> None:
    # A host hit's load lands in a block the pass recycled: the rescue is found when
    # the load is planned, and ships in the same step (workers copy it before loads).
    rig = Rig.with_config(FIFO_1, num_blocks=3)
    hot = rig.compute("hot", ["h0"])
    rig.finish("hot")
    (job,) = rig.step()
    rig.complete([job])
    blocks = rig.compute("a", ["a0", "a1"])
    rig.manager.on_request_finished("a")
    rig.pool.free(list(reversed(blocks)))
    rig.allocated.clear()
    target = rig.pool.allocate(2)[1:]  # after hot's block (the free queue's head)
    assert target == [blocks[1]]
    rig.manager.plan_load(target, [job.keys[0].block_hash])
    (rescue,) = rig.step()  # the pass reported no allocation: found at the load
    assert (rescue.block_ids, rescue.before_forward) == (tuple(blocks), True)
    assert (rig.manager.stats.rescued, rig.manager.stats.lost_to_recycling) == (2, 0)
    assert hot != blocks


def test_a_prefix_cache_reset_drops_what_is_buffered_instead_of_rescuing_it() -> None:
    # A cleared hash is not a recycled block (the weights may have changed): once the
    # adapter reports the reset, a later allocation of the block stores nothing.
    rig = Rig.with_config({"kvtool.policy": "eviction_aware"}, num_blocks=4)
    rig.compute("a", ["a0", "a1"])
    rig.finish("a")
    rig.allocated.clear()
    assert rig.pool.reset_prefix_cache()
    rig.manager.on_prefix_cache_reset()
    rig.allocated = rig.pool.allocate(4)
    assert rig.step() == []
    assert _dropped(rig, DropReason.RESET) == 2 and rig.manager.stats.rescued == 0
    assert rig.manager.stats.ledger_balanced()


def test_hash_change_seen_only_at_release_is_caught() -> None:
    rig = Rig.with_config(FIFO_1)
    blocks = rig.compute("a", ["a0", "a1", "a2"])
    rig.finish("a")
    rig.allocated.clear()
    assert rig.pool.reset_prefix_cache()  # every hash cleared, no allocation seen
    assert rig.step() == []
    assert _dropped(rig, DropReason.HASH_CHANGED_AT_RELEASE) == 1
    assert _dropped(rig, DropReason.PREFIX_BROKEN) == 2
    assert [rig.pool.ref_cnt(b) for b in blocks] == [0, 0, 0]
    assert rig.manager.stats.ledger_balanced()


def test_duplicate_hot_prefix_is_buffered_and_stored_once() -> None:
    rig = Rig.with_config(EAGER)
    leader = rig.compute("leader", ["sys", "doc", "q1"])
    follower = rig.compute("follower", ["sys", "doc", "q2"])  # prefix-cache hit on 2 blocks
    assert follower[:2] == leader[:2]
    stats = rig.manager.stats
    assert (stats.admitted, stats.skipped_duplicate) == (4, 2)
    jobs = rig.step()
    assert sorted(released_blocks(jobs)) == sorted([*leader, follower[2]])
    rig.complete(jobs)
    # A later request over the stored prefix skips it too.
    rig.finish("leader")
    rig.finish("follower")
    rig.compute("third", ["sys", "doc", "q1"])
    assert rig.step() == [] and stats.skipped_duplicate == 5


def test_an_entry_is_servable_only_after_every_worker_reports() -> None:
    rig = Rig.with_config(EAGER, world_size=2)
    (block,) = rig.compute("a", ["a0"])
    (job,) = rig.step()
    block_hash = job.keys[0].block_hash
    rig.manager.on_job_reports([JobReport(job.job_id, True)])
    assert rig.manager.lookup([block_hash]) == 0  # the second worker may still be copying
    assert rig.pool.ref_cnt(block) == 1  # only the request's own reference
    rig.manager.on_job_reports([JobReport(job.job_id, True)])
    assert rig.manager.lookup([block_hash]) == 1 and rig.manager.stats.stored == 1


def test_worker_failure_aborts_the_slot_and_drops_the_held_back_blocks() -> None:
    rig = Rig.with_config(EAGER | {"kvtool.max_release_blocks_per_step": 1}, world_size=2)
    blocks = rig.compute("a", ["a0", "a1", "a2"])
    (job,) = rig.step()
    rig.manager.on_job_reports([JobReport(job.job_id, True), JobReport(job.job_id, False)])
    stats = rig.manager.stats
    assert stats.failed == 1
    assert _dropped(rig, DropReason.FAILED_STORE) == 2
    assert rig.manager.lookup([rig.pool.block_hash(blocks[0])]) == 0
    assert rig.pool.ref_cnt(blocks[0]) == 1  # the request's own reference only
    assert rig.step() == []
    rig.compute("a", ["a3"])
    assert stats.rejected_prefix_broken == 1  # later blocks of that generation are refused
    assert stats.ledger_balanced()


def test_abort_keeps_buffered_blocks_storable() -> None:
    rig = Rig.with_config(FIFO_1)
    blocks = rig.compute("a", ["a0", "a1"])
    rig.finish("a")  # vLLM calls request_finished for aborts too
    assert released_blocks(rig.step()) == blocks


def test_preemption_keeps_what_was_buffered_and_the_resume_is_deduplicated() -> None:
    rig = Rig.with_config(FIFO_1)
    first = rig.compute("a", ["a0", "a1"])
    rig.preempt("a")
    rig.compute("a", ["a0", "a1", "a2"])  # resumed: recomputes from token 0
    stats = rig.manager.stats
    assert stats.skipped_duplicate == 2 and stats.admitted == 3
    jobs = rig.step()  # the preempted generation counts as finished
    assert released_blocks(jobs) == first
    rig.finish("a")
    rig.complete(jobs)
    assert len(released_blocks(rig.step())) == 1
    assert stats.ledger_balanced()


def test_request_id_reuse_starts_a_new_generation() -> None:
    rig = Rig.with_config(FIFO_1 | {"kvtool.fifo.select_count": 1})
    old = rig.compute("r", ["old"])
    rig.finish("r")
    new = rig.compute("r", ["new"])
    assert released_blocks(rig.step()) == old  # the old generation is finished and ready
    assert rig.step() == []  # the new one is still running
    rig.finish("r")
    assert released_blocks(rig.step()) == new


def test_store_full_of_in_flight_writes_drops_and_counts() -> None:
    rig = Rig.with_config(EAGER, capacity_blocks=2)
    rig.compute("a", ["a0", "a1", "a2"])
    (job,) = rig.step()
    assert len(job.block_ids) == 2
    assert _dropped(rig, DropReason.STORE_FULL) == 1
    rig.complete([job])
    rig.compute("b", ["b0"])
    (job_b,) = rig.step()
    assert job_b.slots == (job.slots[0],)  # LRU: the oldest stored block's slot is reused
    assert rig.manager.stats.ledger_balanced()


@pytest.mark.parametrize("mode", [ShutdownMode.DRAIN, ShutdownMode.DROP])
def test_shutdown_drains_or_drops_with_counts(mode: ShutdownMode) -> None:
    rig = Rig.with_config({"kvtool.shutdown": mode.value})
    blocks = rig.compute("a", ["a0", "a1"])
    result = rig.manager.shutdown()
    stats = rig.manager.stats
    if mode is ShutdownMode.DRAIN:
        assert released_blocks(result.store_jobs) == blocks
        assert stats.released_by["shutdown"] == 2
    else:
        assert result.store_jobs == ()
        assert _dropped(rig, DropReason.SHUTDOWN) == 2
    assert stats.pending == 0 and stats.ledger_balanced()


def test_drain_keeps_the_engine_stepping_for_buffered_blocks_until_the_deadline() -> None:
    rig = Rig.with_config({"kvtool.policy": "fifo", "kvtool.shutdown_drain_seconds": 5})
    rig.compute("a", ["a0"])
    assert rig.step() == []  # FIFO holds it: buffered
    assert rig.manager.has_pending_work()
    rig.clock.now += 4.9
    assert rig.manager.has_pending_work()
    rig.clock.now += 0.2  # 5.1 s without a token step
    assert not rig.manager.has_pending_work()
    rig.step(tokens=16)  # a token step restarts the clock
    assert rig.manager.has_pending_work()


@pytest.mark.parametrize("mode", [ShutdownMode.DRAIN, ShutdownMode.DROP])
def test_stores_in_flight_keep_the_engine_stepping_until_the_deadline(
    mode: ShutdownMode,
) -> None:
    rig = Rig.with_config({**EAGER, "kvtool.shutdown": mode.value,
                           "kvtool.shutdown_drain_seconds": 5})
    rig.compute("a", ["a0"])
    (job,) = rig.step()
    assert rig.manager.has_pending_work(), "a copy under way is awaited under both modes"
    rig.clock.now += 6  # a worker that never reports does not hold the engine for ever
    assert not rig.manager.has_pending_work()
    rig.complete([job])
    assert rig.manager.stats.stored == 1


def test_drop_lets_the_engine_stop_with_blocks_buffered() -> None:
    rig = Rig.with_config({"kvtool.policy": "fifo", "kvtool.shutdown": "drop"})
    rig.compute("a", ["a0", "a1"])
    assert rig.step() == []
    assert not rig.manager.has_pending_work()
    rig.manager.shutdown()
    assert _dropped(rig, DropReason.SHUTDOWN) == 2 and rig.manager.stats.ledger_balanced()


def test_load_job_reserves_slots_until_reported() -> None:
    rig = Rig.with_config(EAGER, capacity_blocks=1)
    (block,) = rig.compute("a", ["a0"])
    rig.complete(rig.step())
    block_hash = rig.pool.block_hash(block)
    load = rig.manager.plan_load([block], [block_hash])
    assert load.keys[0] == (rig.store.fingerprint, block_hash)
    rig.compute("b", ["b0"])
    assert rig.step() == []  # the only slot is being read: nothing can be evicted
    assert _dropped(rig, DropReason.STORE_FULL) == 1
    rig.manager.on_job_reports([JobReport(load.job_id, True)])
    stats = rig.manager.stats
    assert (stats.host_hits, stats.loaded) == (1, 1)


def test_unknown_report_is_ignored() -> None:
    rig = Rig.with_config(EAGER)
    rig.manager.on_job_reports([JobReport(999, True)])
    assert rig.manager.stats.stored == 0


def test_counters_are_logged_when_they_move_at_most_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig.with_config(EAGER)
    with caplog.at_level(logging.INFO, logger="kvtool.connector.manager"):
        rig.step()  # first step: logs the (empty) ledger once
        rig.compute("a", ["a0"])
        rig.complete(rig.step())  # counters moved, but within the interval
        rig.clock.now += STATS_LOG_INTERVAL_S
        rig.step()
        rig.clock.now += STATS_LOG_INTERVAL_S
        rig.step()  # nothing moved since the last line
    lines = [r.getMessage() for r in caplog.records if "counters" in r.getMessage()]
    assert len(lines) == 2
    assert "admitted=1" in lines[1] and "stored=1" in lines[1]


def test_reset_forgets_the_host_store_drops_buffered_work_and_voids_in_flight_stores() -> None:
    rig = Rig.with_config(EAGER)
    rig.compute("a", ["a0"])
    rig.complete(rig.step())  # a0 stored
    rig.compute("b", ["b0"])
    (in_flight,) = rig.step()  # b0 being copied
    rig.compute("c", ["c0"])  # c0 buffered
    stored_key = BlockKey(rig.store.fingerprint, ((), "a0"))
    assert rig.manager.lookup([stored_key.block_hash]) == 1
    assert rig.manager.reset() is True
    stats = rig.manager.stats
    assert rig.manager.lookup([stored_key.block_hash]) == 0  # old weights' KV is gone
    assert stats.pending == 0 and stats.resets == 1
    rig.complete([in_flight])  # the store that was in flight lands in nothing
    assert rig.manager.lookup([in_flight.keys[0].block_hash]) == 0
    assert stats.dropped[DropReason.RESET.value] == 2  # c0 buffered, b0 in flight
    assert rig.store.fingerprint != stored_key.fingerprint  # old slot tags never match
    assert stats.ledger_balanced()


def test_a_reset_slot_is_not_reused_while_its_transfer_runs() -> None:
    rig = Rig.with_config(EAGER, capacity_blocks=1)
    rig.compute("a", ["a0"])
    (job,) = rig.step()
    rig.manager.reset()
    rig.finish("a")
    rig.compute("b", ["b0"])
    assert rig.step() == []  # the only slot is still being written by a's store
    assert rig.manager.stats.dropped[DropReason.STORE_FULL.value] == 1
    rig.complete([job])
    rig.compute("c", ["c0"])
    (c_job,) = rig.step()
    assert c_job.slots == job.slots  # freed once the old transfer ended


def test_a_failed_load_evicts_what_it_read_so_the_next_request_misses_cleanly() -> None:
    rig = Rig.with_config(EAGER)
    blocks = rig.compute("a", ["a0", "a1"])
    (job,) = rig.step()
    rig.complete([job])
    hashes = [k.block_hash for k in job.keys]
    load = rig.manager.plan_load(blocks, hashes)
    rig.manager.on_job_reports([JobReport(load.job_id, False)])
    stats = rig.manager.stats
    assert (stats.load_failed, stats.evicted_after_failed_load) == (2, 2)
    assert rig.manager.lookup(hashes) == 0


def test_null_blocks_outside_a_sliding_window_are_skipped_not_a_broken_chain() -> None:
    # vLLM's block table for a sliding-window request that extends a cached prefix:
    # the null block (id 0) for the blocks outside the window, then real blocks
    # (issue 25: [0, 0, 0, 0, 5, 6, ...]). Block 0 is the rig's stand-in null block.
    rig = Rig.with_config(EAGER, null_block_id=0)
    rig.pool.allocate(1)  # the engine keeps its null block out of the free queue
    blocks = rig.compute("b", ["b0", "b1"])
    assert rig.manager.buffer_blocks("c", [0, 0, *blocks]) == 0  # b's: duplicates
    new = rig.compute("c", ["c0", "c1"])
    stats = rig.manager.stats
    assert (stats.skipped_outside_window, stats.rejected_unhashed) == (2, 0)
    assert stats.rejected_prefix_broken == 0 and stats.admitted == 4
    jobs = rig.step()
    assert set(new) <= set(released_blocks(jobs))
    rig.complete(jobs)
    hashes = [rig.pool.block_hash(b) for b in new]
    load = rig.manager.plan_load([0, 0, *new], [object(), object(), *hashes])
    assert load.block_ids == tuple(new), "a load never copies into the null block"
    assert stats.skipped_outside_window == 4
