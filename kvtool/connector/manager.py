"""The lazy-offload manager: buffers store work, acts on the policy's decisions, keeps the ledger.

Runs in the scheduler process next to the engine's block pool. The adapter
translates engine events into calls here and ships the returned jobs to the
workers inside the connector metadata; workers answer with :class:`JobReport`.

Flow of one block: :meth:`LazyOffloadManager.buffer_blocks` snapshots its hash
(admitted, pending) -> the policy releases it -> the manager re-checks the
hash, reserves a host slot and emits a :class:`StoreJob` (in flight) -> every
worker reports -> the manager commits (stored) or aborts (failed) the slot.
Any other path ends in a counted drop (:class:`~kvtool.connector.stats.DropReason`).

No engine block is ever referenced by the manager. A store job is built in the
step whose scheduling pass already ran, and every worker copies the block after
that step's forward and before the next forward may overwrite it (the worker
fences its next step on the copy). The engine's own cache resets and
preemptions therefore never find a block the connector holds.

A buffered block the pass handed to another request (recycled before the policy
released it) still holds its KV: only a forward that schedules its new owner or
a load planned into it writes a block, and the manager sees both first (the
step's allocations, :meth:`LazyOffloadManager.plan_load`). So it is *rescued*,
not lost: its request's front through it is stored by a job the workers run
before this step's loads and forward (``StoreJob.before_forward``). A deferring
policy therefore never loses a block EAGER would have stored; what it defers
wrongly costs a copy ahead of the forward instead of after it (``rescued``).

Per-step cost is proportional to the blocks allocated this step (checked
against the buffer index to find recycled blocks early), the blocks the
policy inspects near the eviction head, and the blocks released or completed;
never to everything that is buffered.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kvtool.connector.blockpool import BlockHash, BlockPoolView
from kvtool.connector.config import ConnectorConfig, ShutdownMode
from kvtool.connector.policies import (
    DrainPolicy,
    Release,
    ReleaseReason,
    RequestKey,
    StepSignals,
    make_policy,
)
from kvtool.connector.stats import ConnectorStats, DropReason
from kvtool.connector.store import BlockKey, StoreIndex

logger = logging.getLogger(__name__)

STATS_LOG_INTERVAL_S = 30.0
"""At most one counters line per interval, and only when a counter moved: the
scheduler log is the operator's view of the ledger while the engine runs."""


# Jobs, reports and the per-step records are NamedTuples: they are built per
# transfer or on every engine step, where a frozen dataclass's __init__ costs
# several times as much. (Jobs and reports pickle by class, as dataclasses do,
# when vLLM ships them between processes.)
class StoreJob(NamedTuple):
    """Copy engine blocks ``block_ids[i]`` into host slot ``slots[i]``, tagged ``keys[i]``."""

    job_id: int
    block_ids: tuple[int, ...]
    slots: tuple[int, ...]
    keys: tuple[BlockKey, ...]
    before_forward: bool = False
    """A rescue (:meth:`LazyOffloadManager.step`): this step's scheduling pass handed
    the blocks to another request, so workers copy them before this step's loads and
    forward write into them, not after the forward."""


class LoadJob(NamedTuple):
    """Copy host slot ``slots[i]`` into engine block ``block_ids[i]`` after checking ``keys[i]``."""

    job_id: int
    block_ids: tuple[int, ...]
    slots: tuple[int, ...]
    keys: tuple[BlockKey, ...]


class JobReport(NamedTuple):
    """One worker's outcome for one job. Every worker reports every job exactly once."""

    job_id: int
    ok: bool


class StepInput(NamedTuple):
    """What the adapter knows when the engine schedules a step."""

    scheduled_tokens: int
    allocated_block_ids: Sequence[int] = ()
    """Block ids handed out this step (new requests' blocks and running requests'
    new blocks). A buffered block among them was possibly recycled."""


class StepResult(NamedTuple):
    store_jobs: tuple[StoreJob, ...] = ()


@dataclass(slots=True)
class _Buffered:
    block_id: int
    block_hash: BlockHash
    admitted_at: float


@dataclass
class _RequestBuffer:
    """Blocks one request generation buffered, in token order.

    Holds the ordinals ``front .. front + len(blocks) - 1``; releases pop the
    front and losses truncate the back, so the ordinals stay contiguous.
    """

    key: RequestKey
    order: int
    blocks: deque[_Buffered] = field(default_factory=deque)
    front: int = 0
    finished: bool = False
    broken: bool = False
    """An earlier block was lost: later blocks of this generation are refused."""

    @property
    def next_ordinal(self) -> int:
        return self.front + len(self.blocks)


@dataclass
class _InFlight:
    request: RequestKey | None
    block_ids: tuple[int, ...]
    hashes: tuple[BlockHash, ...]
    slots: tuple[int, ...]
    is_store: bool
    reports: int = 0
    ok: bool = True


class LazyOffloadManager:
    """Scheduler-side state of the reference connector (see module docstring).

    Invariants:

    - a buffered block's hash was read from the pool when it was buffered and
      is compared again in the step that ships its store job, after that
      step's scheduling pass; a block is stored only if both agree (None never
      agrees), or if this step's pass recycled it (a rescue, copied before
      anything writes the block), so another request's KV is never stored;
    - no engine block is referenced (see the module docstring); a host entry
      becomes servable only after all ``world_size`` workers reported its
      store, and a failed load or :meth:`reset` forgets the entries involved;
    - each block hash is buffered, in flight or stored at most once, so
      requests sharing a hot prefix do not store it twice;
    - the ledger in :class:`ConnectorStats` balances after every call, and a
      call that changes a counter bumps ``stats.revision``.
    """

    def __init__(
        self,
        config: ConnectorConfig,
        pool: BlockPoolView,
        store: StoreIndex,
        *,
        world_size: int = 1,
        group_tokens_per_block: Sequence[int] = (16,),
        clock: Callable[[], float] = time.monotonic,
        policy: DrainPolicy | None = None,
        null_block_id: int | None = None,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if any(tpb < 0 for tpb in group_tokens_per_block):
            raise ValueError(f"tokens per block must be >= 0, got {list(group_tokens_per_block)}")
        self.config = config
        self.pool = pool
        self.store = store
        self.world_size = world_size
        self.null_block_id = null_block_id
        """The engine's placeholder block (vLLM's null block, id 0): a sliding-window
        group's block table holds it for blocks outside the window. It is neither
        stored (nothing there) nor a break in the request's chain, and never loaded into."""
        # Groups with 0 tokens per block (scratch groups) consume no blocks per token.
        self._tokens_per_block = [tpb for tpb in group_tokens_per_block if tpb > 0]
        self._clock = clock
        self.policy = policy if policy is not None else make_policy(config)
        self.stats = ConnectorStats()

        self._serials = itertools.count()
        self._jobs_ids = itertools.count(1)
        self._live: dict[str, RequestKey] = {}
        self._buffers: dict[RequestKey, _RequestBuffer] = {}  # insertion = admission order
        self._ready: dict[RequestKey, int] = {}  # finished and buffering -> admission order
        # The same requests by admission order, lazily pruned: an entry whose request
        # left ``_ready`` is skipped when met and the heap is rebuilt once it doubles.
        self._ready_heap: list[tuple[int, RequestKey]] = []
        self._where: dict[int, tuple[RequestKey, int]] = {}  # buffered block id -> (key, ordinal)
        self._claimed: set[BlockHash] = set()  # hashes buffered or in flight
        # Deadline index, lazily pruned: (front block admitted_at, order, front ordinal, key).
        self._fronts: list[tuple[float, int, int, RequestKey]] = []
        self._jobs: dict[int, _InFlight] = {}
        # Fronts rescued because this pass recycled one of their blocks, found while it
        # is planned (loads, buffering) and in the step's allocations; shipped first
        # with the step, still counted as pending until then.
        self._rescues: list[tuple[_RequestBuffer, list[_Buffered]]] = []
        self._idle_steps = 0
        self._last_token_step: float | None = None
        self._logged: tuple[float, dict[str, int]] | None = None
        self._view = _View(self)  # stateless: one per manager, not one per step

    # ------------------------------------------------------------------ requests

    def on_request_arrived(self, request_id: str) -> RequestKey:
        """A request id is (re)scheduled; idempotent while the request is live."""
        key = self._live.get(request_id)
        if key is None:
            key = RequestKey(request_id, next(self._serials))
            self._live[request_id] = key
        return key

    def on_request_finished(self, request_id: str) -> None:
        """Finished or aborted: its blocks go back to the engine's free queue, still
        hashed, so what it buffered stays storable. A later arrival of the same id
        is a new generation."""
        key = self._live.pop(request_id, None)
        if key is None:
            return
        # The next pass may recycle its blocks before any decision could release
        # them: those are rescued in that step (_check_block), the rest wait for the policy.
        self._retire(key)

    def on_request_preempted(self, request_id: str) -> None:
        """The engine freed the request's blocks and will recompute it.

        What was buffered stays storable (hash-checked like any block) and is
        left to the step that reports the preemption; the resumed request starts
        a new generation, and its re-buffered blocks that are already buffered
        are skipped as duplicates.
        """
        key = self._live.pop(request_id, None)
        if key is not None:
            self._retire(key)

    def buffer_blocks(self, request_id: str, block_ids: Sequence[int]) -> int:
        """Buffer the request's newly full blocks, in token order; returns how many were admitted.

        Reads each block's hash from the pool now (vLLM hashes full blocks when
        it schedules them, before their KV is computed; the copy happens after
        the forward). Blocks without a hash are refused and end the request's
        chain; blocks whose hash is already buffered, in flight or stored are
        skipped.
        """
        key = self.on_request_arrived(request_id)
        buffer = self._buffers.get(key)
        now = self._clock()
        admitted = duplicates = 0
        where, claimed, read_hash = self._where, self._claimed, self.pool.block_hash
        known = self.store.known
        null = self.null_block_id
        for block_id in block_ids:
            if block_id == null:
                self.stats.skipped_outside_window += 1
                continue
            if buffer is not None and buffer.broken:
                self.stats.rejected_prefix_broken += 1
                continue
            block_hash = read_hash(block_id)
            if block_hash is None:
                self.stats.rejected_unhashed += 1
                if buffer is None:
                    buffer = self._new_buffer(key)
                buffer.broken = True
                continue
            if block_id in where:  # a stale entry for a recycled block goes first
                self._check_block(block_id)
            if block_hash in claimed or known(block_hash):
                duplicates += 1
                continue
            if buffer is None:
                buffer = self._new_buffer(key)
            blocks = buffer.blocks
            if not blocks:
                self._push_front(buffer, now)
            where[block_id] = (key, buffer.front + len(blocks))
            blocks.append(_Buffered(block_id, block_hash, now))
            claimed.add(block_hash)
            admitted += 1
        stats = self.stats
        stats.skipped_duplicate += duplicates
        stats.admitted += admitted
        stats.pending += admitted
        if block_ids:  # each block counted once: admitted, skipped or rejected
            self.stats.revision += 1
        return admitted

    # ------------------------------------------------------------------ steps

    def step(self, step: StepInput) -> StepResult:
        """One scheduler step: find recycled blocks, ask the policy, carry out its releases."""
        now = self._clock()
        tokens, allocated = step
        where = self._where
        if where:  # else nothing is buffered that could have been recycled
            # Most allocated blocks were never buffered: the filter runs in C. It tests
            # each block when reached, so one taken by an earlier check is skipped.
            for block_id in filter(where.__contains__, allocated):
                self._check_block(block_id)
        if tokens > 0:
            self._idle_steps = 0
            self._last_token_step = now
            idle_seconds = 0.0
        else:
            self._idle_steps += 1
            last = self._last_token_step
            idle_seconds = 0.0 if last is None else now - last
        # Inline where a call would do: this runs after every forward pass, with the
        # interpreter's caches cold, where each Python call costs microseconds.
        tpbs = self._tokens_per_block
        est_blocks = (-(-tokens // tpbs[0]) if len(tpbs) == 1  # ceil, one KV cache group
                      else sum(-(-tokens // tpb) for tpb in tpbs))
        signals = StepSignals(now, tokens, len(allocated), est_blocks, self._idle_steps,
                              idle_seconds)
        releases = self.policy.decide(signals, self._view, self.pool)
        if releases and any(r.reason is ReleaseReason.IDLE for r in releases):
            self.stats.idle_drains += 1
            self.stats.revision += 1
        jobs = (self._carry_out(releases, self.config.max_release_blocks_per_step)
                if releases else ())
        if self._rescues:  # not capped: the pass already took the blocks
            jobs = (*self._ship_rescues(), *jobs)
        logged = self._logged
        if logged is None or now - logged[0] >= STATS_LOG_INTERVAL_S:
            self._maybe_log_stats(now)
        return StepResult(jobs)

    def _maybe_log_stats(self, now: float) -> None:
        """The counters line, if a counter moved since the last one (see STATS_LOG_INTERVAL_S)."""
        counters = self.stats.as_dict()
        if self._logged is None or counters != self._logged[1]:
            logger.info("kvtool lazy offload counters: %s", self.stats.summary() or "none")
        self._logged = (now, counters)

    def on_job_reports(self, reports: Iterable[JobReport]) -> None:
        """Worker outcomes; a job completes when all ``world_size`` workers reported it."""
        for report in reports:
            job = self._jobs.get(report.job_id)
            if job is None:
                logger.warning("ignoring report for unknown or completed job %d", report.job_id)
                continue
            job.reports += 1
            job.ok = job.ok and report.ok
            if job.reports == self.world_size:
                del self._jobs[report.job_id]
                self._complete(job)

    def has_pending_work(self) -> bool:
        """Whether the engine should keep stepping for the connector (vLLM's
        ``has_pending_push_work``, which its shutdown loop honours too).

        True while jobs are in flight and, under ``shutdown=drain``, while blocks
        are buffered (the idle drain releases them within a bounded number of
        steps). Neither counts once ``shutdown_drain_seconds`` passed without a
        step that scheduled a token, so a worker that never reports cannot keep
        an idle or stopping engine stepping for ever.
        """
        if not self._jobs and (self.stats.pending == 0
                               or self.config.shutdown is ShutdownMode.DROP):
            return False
        last = self._last_token_step
        return last is None or self._clock() - last < self.config.shutdown_drain_seconds

    def shutdown(self, mode: ShutdownMode | None = None) -> StepResult:
        """Release everything buffered (``drain``) or drop it (``drop``), counted.

        Jobs still in flight afterwards stay counted as ``in_flight``.
        """
        if (mode or self.config.shutdown) is ShutdownMode.DROP:
            self._drop_rescues(DropReason.SHUTDOWN)
            for buffer in list(self._buffers.values()):
                if buffer.blocks:
                    self._lose_from(buffer, buffer.front, DropReason.SHUTDOWN, DropReason.SHUTDOWN)
            return StepResult()
        view = self._view
        releases = [
            Release(key, view.span(key)[1], ReleaseReason.SHUTDOWN) for key in view.iter_requests()
        ]
        return StepResult((*self._ship_rescues(), *self._carry_out(releases, budget=None)))

    def reset(self) -> bool:
        """vLLM's ``reset_cache`` (weights changed, or the operator cleared caches).

        Forgets every host entry (:meth:`StoreIndex.reset`: a new epoch) and
        drops everything buffered, counted as ``reset``; stores still in flight
        complete into nothing. Always succeeds: no engine block is held, so
        there is nothing to wait for.
        """
        self.on_prefix_cache_reset()
        self.store.reset()
        self.stats.resets += 1
        self.stats.revision += 1
        logger.info("kvtool lazy offload: host store reset (epoch %d)", self.store.epoch)
        return True

    def on_prefix_cache_reset(self) -> None:
        """The engine cleared every block hash (vLLM's ``reset_prefix_cache``, with or
        without the connector's reset): what is buffered is dropped, counted as
        ``reset``. A cleared hash is not a recycled block, so it must never be rescued
        (weights may have changed), and nothing the engine computes from now on
        chains to it."""
        self._drop_rescues(DropReason.RESET)
        for buffer in list(self._buffers.values()):
            if buffer.blocks:
                self._lose_from(buffer, buffer.front, DropReason.RESET, DropReason.RESET)
            buffer.broken = False  # the next generation may buffer again
        self._claimed = {h for job in self._jobs.values() if job.is_store for h in job.hashes}
        self.stats.revision += 1

    # ------------------------------------------------------------------ host hits

    def lookup(self, block_hashes: Sequence[BlockHash]) -> int:
        """Leading blocks of the chain available on the host. No side effects."""
        return self.store.longest_prefix(block_hashes)

    def plan_load(self, block_ids: Sequence[int], block_hashes: Sequence[BlockHash]) -> LoadJob:
        """A job loading stored ``block_hashes`` into the engine blocks ``block_ids``.

        The slots stay reserved for reading until every worker reports the job.
        """
        if len(block_ids) != len(block_hashes):
            raise ValueError("block_ids and block_hashes differ in length")
        where = self._where
        for block_id in block_ids:
            if block_id in where:  # recycled by this pass: rescued before the load lands
                self._check_block(block_id)
        null = self.null_block_id
        if null is not None and null in block_ids:
            # Outside a sliding window: the engine reads nothing there, so nothing is copied.
            pairs = [(b, h) for b, h in zip(block_ids, block_hashes, strict=True) if b != null]
            self.stats.skipped_outside_window += len(block_ids) - len(pairs)
            block_ids = [b for b, _ in pairs]
            block_hashes = [h for _, h in pairs]
        slots = self.store.acquire(block_hashes)
        job_id = next(self._jobs_ids)
        self._jobs[job_id] = _InFlight(None, tuple(block_ids), tuple(block_hashes),
                                       tuple(slots), is_store=False)
        self.stats.host_lookups += 1
        self.stats.host_hits += len(block_ids)
        self.stats.revision += 1
        return LoadJob(job_id, tuple(block_ids), tuple(slots),
                       self.store.keys(block_hashes))

    # ------------------------------------------------------------------ internals

    def _new_buffer(self, key: RequestKey) -> _RequestBuffer:
        buffer = _RequestBuffer(key, order=key.serial)
        self._buffers[key] = buffer
        return buffer

    def _push_front(self, buffer: _RequestBuffer, admitted_at: float) -> None:
        """Index the buffer's current front for deadlines; entries of old fronts stay
        until popped or until the heap doubles, when it is rebuilt (amortised O(1))."""
        heapq.heappush(self._fronts, (admitted_at, buffer.order, buffer.front, buffer.key))
        if len(self._fronts) > 2 * len(self._buffers) + 64:
            self._fronts = [
                (b.blocks[0].admitted_at, b.order, b.front, b.key)
                for b in self._buffers.values() if b.blocks
            ]
            heapq.heapify(self._fronts)

    def _retire(self, key: RequestKey) -> None:
        buffer = self._buffers.get(key)
        if buffer is None:
            return
        buffer.finished = True
        if buffer.blocks:
            self._ready[key] = buffer.order
            heapq.heappush(self._ready_heap, (buffer.order, key))
            if len(self._ready_heap) > 2 * len(self._ready) + 64:
                self._ready_heap = [(order, k) for k, order in self._ready.items()]
                heapq.heapify(self._ready_heap)
        else:
            del self._buffers[key]

    def _check_block(self, block_id: int) -> None:
        """A block was allocated by this step's pass (or is a load target it planned):
        if it was recycled, rescue its request's front through it.

        Its KV is intact: nothing wrote it since it was freed (the forward and the
        loads that will are this step's, and the rescue is copied before both).
        Every earlier pass's allocations were checked in their own step, so a
        changed hash here means this pass (or one that allocated it to a request
        not scheduled since, whose blocks nothing wrote either) recycled it.
        """
        where = self._where.get(block_id)
        if where is None:
            return
        key, ordinal = where
        buffer = self._buffers[key]  # a buffer stays indexed while it holds blocks
        if self.pool.block_hash(block_id) != buffer.blocks[ordinal - buffer.front].block_hash:
            # Out of the index now (the block's new owner may buffer it next); stored
            # with the step (_ship_rescues), first among its jobs.
            self._rescues.append((buffer, self._take_front(buffer, ordinal)))
            self._forget_if_empty(buffer)

    def _lose_from(
        self,
        buffer: _RequestBuffer,
        ordinal: int,
        first: DropReason,
        rest: DropReason = DropReason.PREFIX_BROKEN,
    ) -> int:
        """Drop buffered ordinals >= ``ordinal`` (``first`` for that block, ``rest`` for
        the later ones) and refuse the generation's later blocks; returns how many."""
        lost = 0
        while buffer.blocks and buffer.next_ordinal > ordinal:
            block = buffer.blocks.pop()
            del self._where[block.block_id]
            self._claimed.discard(block.block_hash)
            lost += 1
        if lost:
            self.stats.drop(first, 1)  # bumps the revision
            self.stats.drop(rest, lost - 1)
            self.stats.pending -= lost
        buffer.broken = True
        self._forget_if_empty(buffer)
        return lost

    def _forget_if_empty(self, buffer: _RequestBuffer) -> None:
        if buffer.blocks:
            return
        self._ready.pop(buffer.key, None)
        if buffer.finished:
            self._buffers.pop(buffer.key, None)

    def _carry_out(
        self, releases: Sequence[Release], budget: int | None, before_forward: bool = False
    ) -> tuple[StoreJob, ...]:
        jobs = []
        for release in releases:
            if budget is not None and budget <= 0:
                break
            buffer = self._buffers.get(release.request)
            if buffer is None or not buffer.blocks:
                continue
            through = min(release.through, buffer.next_ordinal - 1)
            if budget is not None:
                through = min(through, buffer.front + budget - 1)
            if through < buffer.front:
                continue  # nothing of that request left to release
            taken = self._take_front(buffer, through)
            if budget is not None:
                budget -= len(taken)
            job = self._release(buffer, taken, release.reason, before_forward)
            self._forget_if_empty(buffer)
            if job is not None:
                jobs.append(job)
        return tuple(jobs)

    def _take_front(self, buffer: _RequestBuffer, through: int) -> list[_Buffered]:
        """Pop the buffer's blocks through ordinal ``through`` out of the index (they
        stay counted as pending until :meth:`_release`)."""
        taken = [buffer.blocks.popleft() for _ in range(through - buffer.front + 1)]
        buffer.front = through + 1
        for block in taken:
            del self._where[block.block_id]
        if buffer.blocks:
            self._push_front(buffer, buffer.blocks[0].admitted_at)
        return taken

    def _release(
        self, buffer: _RequestBuffer, taken: list[_Buffered], reason: ReleaseReason,
        before_forward: bool = False,
    ) -> StoreJob | None:
        self.stats.pending -= len(taken)
        self.stats.released += len(taken)
        self.stats.released_by[reason.value] += len(taken)
        self.stats.revision += 1  # also for what _submit counts below
        return self._submit(buffer, taken, before_forward)

    def _ship_rescues(self) -> tuple[StoreJob, ...]:
        jobs = []
        for buffer, taken in self._rescues:
            job = self._release(buffer, taken, ReleaseReason.RECYCLED, before_forward=True)
            if job is not None:
                jobs.append(job)
        self._rescues = []
        return tuple(jobs)

    def _drop_rescues(self, reason: DropReason) -> None:
        for _, taken in self._rescues:
            for block in taken:
                self._claimed.discard(block.block_hash)
            self.stats.pending -= len(taken)
            self.stats.drop(reason, len(taken))
        self._rescues = []

    def _submit(
        self, buffer: _RequestBuffer, taken: list[_Buffered], before_forward: bool = False
    ) -> StoreJob | None:
        """Re-check (a rescue's blocks were recycled by this pass, their KV intact:
        see :meth:`_check_block`), reserve slots; everything not submitted is
        dropped, counted."""
        valid = len(taken)
        read_hash = self.pool.block_hash
        for i, block in enumerate(taken):
            if not before_forward and read_hash(block.block_id) != block.block_hash:
                valid = i
                break
        slots = self.store.reserve_run([block.block_hash for block in taken[:valid]])
        stored = len(slots)
        self.stats.store_evictions = self.store.evictions
        rejected = taken[stored:]
        if rejected:
            for block in rejected:
                self._claimed.discard(block.block_hash)
            first = DropReason.HASH_CHANGED_AT_RELEASE if stored == valid else DropReason.STORE_FULL
            self.stats.drop(first, 1)
            self.stats.drop(DropReason.PREFIX_BROKEN, len(rejected) - 1)
            behind = (self._lose_from(buffer, buffer.front, DropReason.PREFIX_BROKEN)
                      if buffer.blocks else 0)
            if first is DropReason.HASH_CHANGED_AT_RELEASE:
                self.stats.lost_to_recycling += len(rejected) + behind
            buffer.broken = True
            logger.warning(
                "kvtool lazy offload: request %s lost %d block(s) at release (%s)",
                buffer.key.request_id, len(rejected), first.value,
            )
        if not stored:
            return None
        kept = taken[:stored]
        job_id = next(self._jobs_ids)
        block_ids = tuple([b.block_id for b in kept])
        hashes = tuple([b.block_hash for b in kept])
        kept_slots = tuple(slots)
        self._jobs[job_id] = _InFlight(buffer.key, block_ids, hashes, kept_slots, is_store=True)
        self.stats.in_flight += stored
        if before_forward:
            self.stats.rescued += stored
        return StoreJob(job_id, block_ids, kept_slots, self.store.keys(hashes), before_forward)

    def _complete(self, job: _InFlight) -> None:
        self.stats.revision += 1  # every outcome below counts
        if not job.is_store:
            self.store.release(job.hashes, job.slots)
            if job.ok:
                self.stats.loaded += len(job.block_ids)
                self.stats.loaded_bytes += len(job.block_ids) * self.store.block_bytes
            else:
                # The entries' bytes are not trusted any more: without this every
                # later request with the prefix would fail its load too.
                self.stats.load_failed += len(job.block_ids)
                self.stats.evicted_after_failed_load += self.store.evict(job.hashes)
                logger.warning("kvtool lazy offload: a load of %d block(s) failed; "
                               "their host entries are evicted", len(job.block_ids))
            return
        n = len(job.block_ids)
        self.stats.in_flight -= n
        self._claimed.difference_update(job.hashes)
        committed = 0
        if job.ok:
            committed = self.store.commit_run(job.hashes, job.slots)
        else:
            for block_hash, slot in zip(job.hashes, job.slots, strict=True):
                self.store.abort(block_hash, slot)
        if job.ok and committed < n:  # the host store was reset while it was in flight
            self.stats.drop(DropReason.RESET, n - committed)
            n = committed
        if job.ok:
            self.stats.stored += n
            self.stats.stored_bytes += n * self.store.block_bytes
            return
        self.stats.failed += n
        buffer = self._buffers.get(job.request) if job.request is not None else None
        if buffer is not None:
            # Later blocks of this generation would be stored without their prefix.
            if buffer.blocks:
                failed = DropReason.FAILED_STORE
                self._lose_from(buffer, buffer.front, failed, failed)
            buffer.broken = True
        logger.warning("kvtool lazy offload: a store of %d block(s) failed", n)


class _View:
    """The manager as the policies see it (:class:`~kvtool.connector.policies.PendingView`)."""

    def __init__(self, manager: LazyOffloadManager) -> None:
        self._m = manager

    @property
    def pending_blocks(self) -> int:
        return self._m.stats.pending

    def finished_ready(self) -> Mapping[RequestKey, int]:
        return self._m._ready

    def oldest_ready(self, count: int) -> list[RequestKey]:
        ready, heap = self._m._ready, self._m._ready_heap
        found: list[tuple[int, RequestKey]] = []
        while heap and len(found) < count:
            entry = heapq.heappop(heap)
            if entry[1] in ready:  # else stale: released or lost since it finished
                found.append(entry)
        for entry in found:
            heapq.heappush(heap, entry)
        return [key for _, key in found]

    def block_index(self) -> Mapping[int, tuple[RequestKey, int]]:
        return self._m._where

    def span(self, request: RequestKey) -> tuple[int, int]:
        buffer = self._m._buffers[request]
        return buffer.front, buffer.next_ordinal - 1

    def admission_order(self, request: RequestKey) -> int:
        return self._m._buffers[request].order

    def iter_requests(self) -> Iterator[RequestKey]:
        for key, buffer in self._m._buffers.items():
            if buffer.blocks:
                yield key

    def iter_fronts_older_than(self, cutoff: float) -> Generator[RequestKey, None, None]:
        kept: list[tuple[float, int, int, RequestKey]] = []
        try:
            while self._m._fronts and self._m._fronts[0][0] <= cutoff:
                entry = heapq.heappop(self._m._fronts)
                buffer = self._m._buffers.get(entry[3])
                if buffer is None or not buffer.blocks or buffer.front != entry[2]:
                    continue  # stale: that front was released or lost since
                kept.append(entry)
                yield entry[3]
        finally:
            for entry in kept:
                heapq.heappush(self._m._fronts, entry)
