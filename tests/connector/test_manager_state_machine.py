"""Random schedules against the manager, checking its invariants after every step.

Invariants (issues 5 and 14): no block is stored after its hash changed; the
manager never holds an engine block (only requests do); every admitted block
ends in exactly one outcome; nothing is lost silently; a load reads only slots
holding its key, also across resets. Simulated workers copy a block in the step
that ships its job (the worker fences its next forward on the copy), so a
stale store shows up there as a hash that differs from the job's key; a rescue
(``before_forward``) is copied before that step's forward, so it must match what
the block held before it (the KV of the last forward that wrote it).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvtool.connector.blockpool import BlockHash, InMemoryBlockPool
from kvtool.connector.config import ShutdownMode
from kvtool.connector.manager import JobReport, LoadJob, StoreJob
from kvtool.connector.store import BlockKey
from tests.connector.harness import Rig

REQUEST_IDS = ["r0", "r1", "r2", "r3"]
CONTENTS = st.lists(st.sampled_from("abcd"), min_size=1, max_size=4)


class ManagerMachine(RuleBasedStateMachine):
    rig: Rig
    pool: InMemoryBlockPool

    @initialize(
        policy=st.sampled_from(["eager", "fifo", "eviction_aware"]),
        world_size=st.integers(1, 3),
        capacity=st.integers(2, 24),
        cap=st.integers(1, 8),
    )
    def start(self, policy: str, world_size: int, capacity: int, cap: int) -> None:
        extra = {
            "kvtool.policy": policy,
            "kvtool.fifo.threshold": 2,
            "kvtool.fifo.select_count": 2,
            "kvtool.eviction_aware.max_deferral_seconds": 5,
            "kvtool.max_release_blocks_per_step": cap,
            "kvtool.idle_drain_steps": 2,
        }
        self.rig = Rig.with_config(extra, num_blocks=24, capacity_blocks=capacity,
                                   world_size=world_size)
        assert isinstance(self.rig.pool, InMemoryBlockPool)
        self.pool = self.rig.pool
        self.world_size = world_size
        # job id -> (job, workers that have not reported yet)
        self.jobs: dict[int, tuple[StoreJob | LoadJob, set[int]]] = {}
        self.voided: set[int] = set()  # store jobs in flight across a reset
        self.seen_counters = (self.rig.manager.stats.revision, self.rig.manager.stats.as_dict())
        self.job_ok: dict[int, bool] = {}
        self.arena: dict[int, BlockKey] = {}  # what the simulated workers wrote per slot
        self.stored_ok = 0
        self.chains: list[list[BlockHash]] = []
        self.content: dict[int, BlockHash | None] = {}  # block -> KV its last forward wrote

    # ------------------------------------------------------------------ engine

    @precondition(lambda self: len(self.rig.held) < len(REQUEST_IDS))
    @rule(data=st.data(), contents=CONTENTS)
    def new_request(self, data: st.DataObject, contents: list[str]) -> None:
        rid = data.draw(st.sampled_from([r for r in REQUEST_IDS if r not in self.rig.held]))
        self._compute(rid, contents)

    @precondition(lambda self: bool(self.rig.held))
    @rule(data=st.data(), contents=CONTENTS)
    def grow(self, data: st.DataObject, contents: list[str]) -> None:
        self._compute(data.draw(st.sampled_from(sorted(self.rig.held))), contents)

    @precondition(lambda self: bool(self.rig.held))
    @rule(data=st.data())
    def finish_or_abort(self, data: st.DataObject) -> None:
        self._forward_first()
        self.rig.finish(data.draw(st.sampled_from(sorted(self.rig.held))))

    @precondition(lambda self: bool(self.rig.held))
    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        self._forward_first()
        self.rig.preempt(data.draw(st.sampled_from(sorted(self.rig.held))))

    @rule()
    def reset_prefix_cache(self) -> None:
        if self.pool.reset_prefix_cache():
            # As the vLLM adapter does when it sees the engine's hash map replaced.
            self.rig.manager.on_prefix_cache_reset()

    @rule()
    def reset_connector(self) -> None:
        assert self.rig.manager.reset() is True
        # Stores in flight now complete into nothing (counted as dropped by reset).
        self.voided |= {job_id for job_id, (job, _) in self.jobs.items()
                        if isinstance(job, StoreJob)}

    @rule(tokens=st.sampled_from([0, 0, 16, 64]), seconds=st.sampled_from([0.0, 1.0, 6.0]))
    def step(self, tokens: int, seconds: float) -> None:
        self.rig.clock.now += seconds
        self._step(tokens)

    def _forward_first(self) -> None:
        """vLLM frees a request's blocks only after the forward of the pass that
        buffered them (a preemption frees what earlier forwards computed), so the
        blocks computed since the last step get their step first."""
        if self.rig.allocated:
            self._step(16)

    def _step(self, tokens: int) -> None:
        written = list(self.rig.allocated)  # this step's forward writes them
        for job in self.rig.step(tokens):
            self._emit(job)
        for block in written:
            self.content[block] = self.pool.block_hash(block)

    # ------------------------------------------------------------------ workers

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data(), ok=st.sampled_from([True, True, True, False]))
    def worker_reports(self, data: st.DataObject, ok: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        job, waiting = self.jobs[job_id]
        worker = data.draw(st.sampled_from(sorted(waiting)))
        if ok and isinstance(job, LoadJob):
            for slot, key in zip(job.slots, job.keys, strict=True):
                assert self.arena.get(slot) == key, "load reads a slot holding other bytes"
        waiting.discard(worker)
        self.job_ok[job_id] = self.job_ok.get(job_id, True) and ok
        if not waiting:
            del self.jobs[job_id]
            if isinstance(job, StoreJob) and self.job_ok[job_id] and job_id not in self.voided:
                self.stored_ok += len(job.block_ids)
        self.rig.manager.on_job_reports([JobReport(job_id, ok)])

    @precondition(lambda self: bool(self.chains))
    @rule(data=st.data())
    def host_hit(self, data: st.DataObject) -> None:
        chain = data.draw(st.sampled_from(self.chains))
        n = self.rig.manager.lookup(chain)
        if n:
            load = self.rig.manager.plan_load(list(range(n)), chain[:n])
            self.jobs[load.job_id] = (load, set(range(self.world_size)))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def ledger_balances(self) -> None:
        stats = self.rig.manager.stats
        assert stats.ledger_balanced(), stats.as_dict()
        shipped = [job for job, _ in self.jobs.values() if isinstance(job, StoreJob)]
        in_flight = sum(len(job.block_ids) for job in shipped)
        assert stats.in_flight == in_flight
        assert stats.stored == self.stored_ok

    @invariant()
    def counter_changes_bump_the_revision(self) -> None:
        """The metrics reader skips a step whose revision did not move; a counter
        change without a bump would go unreported."""
        stats = self.rig.manager.stats
        revision, counters = self.seen_counters
        if stats.as_dict() != counters:
            assert stats.revision != revision, "counters changed without a revision bump"
        self.seen_counters = (stats.revision, stats.as_dict())

    @invariant()
    def only_requests_reference_blocks(self) -> None:
        held = Counter(block for blocks in self.rig.held.values() for block in blocks)
        for block in range(self.pool.num_blocks):
            assert self.pool.ref_cnt(block) == held[block], f"block {block} held by the manager"

    def teardown(self) -> None:
        if not hasattr(self, "rig"):
            return
        for job_id, (_, waiting) in list(self.jobs.items()):
            self.rig.manager.on_job_reports([JobReport(job_id, True)] * len(waiting))
        self.rig.manager.shutdown(ShutdownMode.DROP)
        stats = self.rig.manager.stats
        assert stats.pending == 0 and stats.in_flight == 0
        assert stats.ledger_balanced()

    # ------------------------------------------------------------------ helpers

    def _compute(self, rid: str, contents: list[str]) -> None:
        if self.pool.num_free < len(contents):
            return
        blocks = self.rig.compute(rid, contents)
        self.chains.append([self.pool.block_hash(b) for b in self.rig.held[rid]])
        assert len(blocks) == len(contents)

    def _emit(self, job: StoreJob) -> None:
        for block, key in zip(job.block_ids, job.keys, strict=True):
            # Every worker copies in this step: the block must still hold the admitted KV
            # (a rescue: what it held before this step's forward).
            held = self.content.get(block) if job.before_forward else self.pool.block_hash(block)
            assert held == key.block_hash, "stale KV stored"
        for slot, key in zip(job.slots, job.keys, strict=True):
            self.arena[slot] = key
        self.jobs[job.job_id] = (job, set(range(self.world_size)))


ManagerMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestManagerStateMachine = ManagerMachine.TestCase
