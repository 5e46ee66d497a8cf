"""Replay a trace through the reference connector's manager, modelling vLLM's scheduler
and kvtool's vLLM adapter, over an in-memory block pool.

The connector core is the real one (:class:`~kvtool.connector.manager.LazyOffloadManager`,
its policies and host store index); what is modelled is what surrounds it:

- **vLLM's scheduler** (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule`` at
  https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/core/sched/scheduler.py):
  running requests first, in order, each taking what it still needs up to the
  step's token budget (chunked prefill); a running request that cannot get its
  blocks preempts the last running one (whose blocks are freed and who is
  recomputed later from the front of the waiting queue), and no waiting request
  is admitted in a step that preempted. Then waiting requests, those holding
  loaded KV first, while a running slot and budget are left: the local
  prefix-cache hit (never the last token), then the host hit; admission needs
  the whole prompt to fit the free blocks (``scheduler_reserve_full_isl``), an
  asynchronous load also what in-flight prefills still need. Full blocks are
  hashed when scheduled; finished requests free their blocks last-first to the
  free queue's tail, still hashed.
- **Asynchronous loads** (``kvtool.load_async``, the default): the request gets
  its blocks and waits in ``WAITING_FOR_REMOTE_KVS`` instead of running; the load
  finishes within the step, and from the next step on it is first in line for a
  running slot, which it may wait for (``load_wait_steps``). Synchronous loads
  run the request in the step that loads it.
- **The adapter** (``kvtool/connector/vllm/scheduler.py``): each step buffers the
  newly full prompt blocks of the scheduled requests (decode blocks too with
  ``kvtool.store_decode``), reports preemptions, passes the step's allocated
  block ids (a new or resumed request's whole block table) to the manager's step,
  and the single worker reports every job done in the same step. With work
  buffered the engine keeps stepping with no tokens (``has_pending_push_work``),
  so the idle drain runs.

Counters are the connector's own (:class:`~kvtool.connector.stats.ConnectorStats`)
plus vLLM's prefix-cache and connector prefix-cache statistics (queries and hits
of first admissions, as vLLM records them).
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field

from kvtool.connector.blockpool import InMemoryBlockPool
from kvtool.connector.config import ConnectorConfig
from kvtool.connector.manager import (
    JobReport,
    LazyOffloadManager,
    StepInput,
)
from kvtool.connector.store import StoreIndex
from kvtool.errors import KvtoolError
from kvtool.simulate.blockhash import BlockHasher
from kvtool.simulate.budget import REQUEST_WORK, WorkMeter
from kvtool.simulate.trace import Request

_WAITING, _LOADING, _PREEMPTED, _RUNNING = range(4)


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    num_gpu_blocks: int = Field(ge=1)  # bounded by the work limit (it is allocated)
    block_size: int = Field(default=16, ge=1, le=1 << 16)
    max_num_seqs: int = Field(default=8, ge=1, le=1 << 20)
    max_batched_tokens: int = Field(default=2048, ge=1, le=1 << 26)
    host_blocks: int = Field(ge=1, le=1 << 30)
    block_bytes: int = Field(ge=1, le=1 << 40)
    step_seconds: float = Field(default=0.05, gt=0, le=3600)
    idle_stepping: bool = True
    """Between arrivals, keep stepping while the connector holds work, as vLLM's
    server loop does (``has_pending_push_work``); False: step only while requests
    are unfinished, as an offline driver does (``LLM.generate``, the benchmarks),
    so only the end of the trace drains idle."""


class SimResult(BaseModel):
    """One run: what the engine served and what the connector did with its blocks."""

    extra_config: dict[str, Any]
    steps: int
    requests: int
    prompt_tokens: int
    gpu_hit_tokens: int
    external_hit_tokens: int
    blocks_buffered: int
    blocks_stored: int
    bytes_stored: int
    lost_to_recycling: int
    """Buffered blocks vLLM recycled before release, and those behind them (the
    connector's counter of the same name)."""
    blocks_loaded: int
    preemptions: int
    async_loads: int
    load_wait_steps: int
    """Steps async-loaded requests waited for a running slot after their load finished."""
    idle_steps: int
    """Steps with no token scheduled that the engine took because work was buffered."""
    peak_requests_held: int
    """Most requests the simulation held at once (running, waiting, loading): with the
    pool, the host store and the manager's buffer, what its memory grows with."""
    stats: dict[str, int]

    @computed_field  # type: ignore[prop-decorator]  # in model_dump and the JSON schema
    @property
    def external_hit_rate(self) -> float:
        return self.external_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu_hit_rate(self) -> float:
        return self.gpu_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class _Req:
    """One request inside the engine (slots: a million of these pass through)."""

    __slots__ = ("blocks", "buffered", "cached", "computed", "generated", "hashes",
                 "num_tokens", "output_tokens", "preempted", "prompt_blocks", "prompt_len",
                 "ready_at", "request", "status")

    def __init__(self, request: Request, block_size: int, hasher: BlockHasher) -> None:
        self.request = request
        self.hashes = hasher.hashes(request)
        self.prompt_len = request.prompt_tokens
        self.prompt_blocks = self.prompt_len // block_size
        self.num_tokens = self.prompt_len  # prompt plus tokens generated so far
        self.output_tokens = request.output_tokens
        self.generated = 0
        self.computed = 0
        self.blocks: list[int] = []
        self.cached = 0  # leading blocks that carry their hash
        self.buffered = 0  # leading blocks the adapter handed to the manager
        self.status = _WAITING
        self.preempted = False
        self.ready_at = -1  # step an async load finished


class _Pass:
    """One scheduling pass: what it scheduled and allocated, as the adapter reports it."""

    __slots__ = ("allocated", "new", "preempted", "scheduled", "to_buffer", "tokens")

    def __init__(self) -> None:
        self.scheduled: list[tuple[_Req, int]] = []  # (request, tokens), in order
        self.allocated: list[int] = []
        self.preempted: list[_Req] = []
        self.new: list[_Req] = []  # admitted or resumed from the waiting queues
        # (request, tokens computed after the step) of the scheduled requests that may
        # have blocks to buffer (set while scheduling: the others, most of them, are
        # decoding past a prompt already buffered and cost the adapter nothing).
        self.to_buffer: list[tuple[_Req, int]] = []
        self.tokens = 0


@dataclass
class _Counters:
    gpu_hit_tokens: int = 0
    external_hit_tokens: int = 0
    prompt_tokens: int = 0
    preemptions: int = 0
    async_loads: int = 0
    load_wait_steps: int = 0
    idle_steps: int = 0
    requests: int = 0
    peak_held: int = 0


class Simulation:
    """One trace through one connector configuration (see the module docstring)."""

    def __init__(self, settings: EngineSettings, extra_config: dict[str, Any],
                 meter: WorkMeter | None = None) -> None:
        self.settings = settings
        self.extra_config = dict(extra_config)
        self.meter = meter if meter is not None else WorkMeter.unbounded()
        self.meter.charge(settings.num_gpu_blocks, "the GPU block pool")
        capacity = settings.host_blocks * settings.block_bytes
        self.config = ConnectorConfig.from_extra_config(
            {**extra_config, "kvtool.host_capacity_bytes": capacity}
        )
        self.step_index = 0
        self.pool = InMemoryBlockPool(settings.num_gpu_blocks)
        null_block = self.pool.allocate(1)[0]  # vLLM's null block: never handed to a request
        self.store = StoreIndex(capacity, settings.block_bytes, "simulation")
        self.manager = LazyOffloadManager(
            self.config, self.pool, self.store,
            group_tokens_per_block=(settings.block_size,),
            clock=lambda: self.step_index * settings.step_seconds,
            null_block_id=null_block,
        )
        self._block_size = settings.block_size
        self.counters = _Counters()
        self.running: list[_Req] = []
        self.waiting: deque[_Req] = deque()
        self.holding: deque[_Req] = deque()  # async-loaded requests, drained first
        self._load_jobs: list[int] = []
        self._hasher = BlockHasher(settings.block_size)
        self._intake = _Intake(iter(()), settings.block_size, settings.num_gpu_blocks)

    # ------------------------------------------------------------------ blocks

    def _blocks_needed(self, run: _Req, tokens: int) -> int:
        return -(-tokens // self._block_size) - len(run.blocks)

    def _cache_full_blocks(self, run: _Req, upto_tokens: int) -> None:
        """Hash the blocks that ``upto_tokens`` fills (vLLM caches them when scheduled)."""
        full = min(upto_tokens // self._block_size, len(run.blocks), len(run.hashes))
        cached = run.cached
        if full > cached:
            self.pool.set_hashes(run.blocks[cached:full], run.hashes[cached:full])
            run.cached = full

    def _free(self, run: _Req) -> None:
        self.pool.free(run.blocks[::-1])  # last block first: it is evicted first
        run.blocks = []
        run.cached = 0

    # ------------------------------------------------------------------ scheduling

    def _schedule_running(self, step: _Pass) -> int:
        budget = self.settings.max_batched_tokens
        running, pool, size = self.running, self.pool, self._block_size
        scheduled, allocated, preempted, to_buffer = (step.scheduled, step.allocated,
                                                      step.preempted, step.to_buffer)
        store_decode = self.config.store_decode
        index = 0
        # Inlined helpers: this loop visits every running request on every step.
        while index < len(running) and budget > 0:
            run = running[index]
            tokens = run.num_tokens - run.computed
            if tokens > budget:
                tokens = budget
            if tokens <= 0:
                index += 1
                continue
            upto = run.computed + tokens
            need = -(-upto // size) - len(run.blocks)
            if need > 0:
                while need > pool.num_free:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is run:
                        break
                if run.status != _RUNNING:
                    break
                fresh = pool.allocate(need)
                run.blocks += fresh
                allocated += fresh
            if upto // size > run.cached:
                self._cache_full_blocks(run, upto)
            scheduled.append((run, tokens))
            if run.buffered < run.prompt_blocks or store_decode:
                to_buffer.append((run, upto))
            budget -= tokens
            index += 1
        return budget

    def _preempt(self, run: _Req) -> None:
        self._free(run)
        run.computed = 0
        run.status = _PREEMPTED
        run.preempted = True
        self.counters.preemptions += 1
        self.waiting.appendleft(run)

    def _loaded_holding_all(self) -> bool:
        """Nothing runs, every load finished, and the head still cannot be admitted."""
        return bool(self.holding) and all(run.ready_at >= 0 for run in self.holding)

    def _release_newest_load(self, step: _Pass) -> None:
        """Loaded requests hold every block and none fits: free the newest one's blocks
        and recompute it later, as a preemption would (vLLM's reservations for async
        loads are meant to keep this from happening; the model must not stall)."""
        run = self.holding.pop()
        self._free(run)
        run.computed = 0
        run.status = _PREEMPTED
        run.preempted = True
        run.ready_at = -1
        self.counters.preemptions += 1
        self.waiting.appendleft(run)
        step.preempted.append(run)

    def _inflight_reserved(self) -> int:
        """Blocks that in-flight prefills still need for their whole sequence."""
        reserved = 0
        for run in self.holding:
            reserved += max(0, self._blocks_needed(run, run.num_tokens))
        for run in self.running:
            if run.computed < run.prompt_len:
                reserved += max(0, self._blocks_needed(run, run.num_tokens))
        return reserved

    def _schedule_waiting(self, budget: int, step: _Pass) -> int:
        s = self.settings
        size = s.block_size
        pool, manager = self.pool, self.manager
        skipped_holding: list[_Req] = []
        while budget > 0:
            if len(self.running) >= s.max_num_seqs:
                break
            if not self.holding and not self.waiting and not self._pull():
                break
            queue = self.holding or self.waiting
            run = queue[0]
            if run.status == _LOADING:
                if run.ready_at < 0:
                    skipped_holding.append(queue.popleft())
                    continue
                self._cache_full_blocks(run, run.computed)
                if run.computed >= run.num_tokens:
                    run.computed = run.num_tokens - 1
                self.counters.load_wait_steps += self.step_index - run.ready_at
                run.status = _PREEMPTED if run.preempted else _WAITING
            local: list[int] = []  # the prefix-cache hit
            external = 0
            load_async = False
            if run.computed == 0:
                cap = (run.num_tokens - 1) // size
                local = pool.cached_prefix(run.hashes[:cap])
                if len(local) < cap:
                    external = manager.lookup(run.hashes[len(local):cap])
                load_async = self.config.load_async and external > 0
                computed = (len(local) + external) * size
            else:
                computed = run.computed
            tokens = 0 if load_async else min(run.num_tokens - computed, budget)
            evictable = pool.free_among(local) if local else 0
            # The whole sequence must fit (scheduler_reserve_full_isl), then this chunk,
            # leaving an async load the blocks in-flight prefills still need.
            whole = -(-run.num_tokens // size) - len(local) - len(run.blocks) + evictable
            chunk = (-(-(computed + tokens) // size) - len(local) - len(run.blocks)
                     + evictable)
            reserved = self._inflight_reserved() if load_async else 0
            if whole > pool.num_free or chunk > pool.num_free - reserved:
                break
            queue.popleft()
            if local:
                pool.touch(local)
                run.blocks += local
                run.cached = len(local)
            fresh_count = chunk - evictable
            if fresh_count > 0:
                run.blocks += pool.allocate(fresh_count)
            if run.computed == 0:
                self._record_admission(run, len(local) * size, external * size)
                if external:
                    start = len(local)
                    job = manager.plan_load(run.blocks[start:start + external],
                                            run.hashes[start:start + external])
                    self._load_jobs.append(job.job_id)
            run.computed = computed
            if load_async:
                run.status = _LOADING
                self.counters.async_loads += 1
                skipped_holding.append(run)
                continue
            upto = computed + tokens
            self._cache_full_blocks(run, upto)
            run.status = _RUNNING
            self.running.append(run)
            step.new.append(run)
            step.scheduled.append((run, tokens))
            if run.buffered < run.prompt_blocks or self.config.store_decode:
                step.to_buffer.append((run, upto))
            budget -= tokens
        if skipped_holding:
            self.holding.extendleft(reversed(skipped_holding))
        return budget

    def _record_admission(self, run: _Req, local_tokens: int, external_tokens: int) -> None:
        if run.preempted:
            return  # vLLM counts a preempted request's re-admission apart
        c = self.counters
        c.gpu_hit_tokens += local_tokens
        c.external_hit_tokens += external_tokens

    # ------------------------------------------------------------------ adapter

    def _buffer(self, run: _Req, computed_after_step: int) -> None:
        if not self.config.store_decode:
            computed_after_step = min(computed_after_step, run.prompt_len)
            if run.buffered >= run.prompt_blocks:
                return
        full = min(computed_after_step // self._block_size, len(run.blocks))
        if full > run.buffered:
            self.manager.buffer_blocks(run.request.id, run.blocks[run.buffered:full])
            run.buffered = full

    def _connector_step(self, step: _Pass) -> None:
        manager = self.manager
        allocated = step.allocated
        for run in step.preempted:
            manager.on_request_preempted(run.request.id)
            run.buffered = 0
        # As the adapter reports them: a new or resumed request's whole block table.
        for run in step.new:
            allocated += run.blocks
            manager.on_request_arrived(run.request.id)
        for run, computed_after_step in step.to_buffer:
            self._buffer(run, computed_after_step)
        result = manager.step(StepInput(step.tokens, allocated))
        jobs = self._load_jobs
        jobs += [job.job_id for job in result.store_jobs]
        if jobs:
            manager.on_job_reports([JobReport(job_id, True) for job_id in jobs])
            self._load_jobs = []
        for run in self.holding:
            if run.ready_at < 0:
                run.ready_at = self.step_index + 1  # the load finished within this step

    # ------------------------------------------------------------------ the loop

    def run(self, trace: Iterable[Request]) -> SimResult:
        with without_cycle_collection():
            return self._run(trace)

    def _run(self, trace: Iterable[Request]) -> SimResult:
        s = self.settings
        intake = self._intake = _Intake(iter(trace), s.block_size, s.num_gpu_blocks)
        while True:
            busy = self.running or self.waiting or self.holding or self._pull()
            if not busy:
                next_step = intake.next_arrival(self.step_index)
                if self.manager.has_pending_work() and (s.idle_stepping or next_step is None):
                    self._idle_step()
                    continue
                if next_step is None:
                    break
                self.step_index = next_step
                continue
            step = _Pass()
            budget = self._schedule_running(step)
            if not step.preempted:
                budget = self._schedule_waiting(budget, step)
                if not step.scheduled and not self.running and self._loaded_holding_all():
                    self._release_newest_load(step)
            step.tokens = s.max_batched_tokens - budget
            self._connector_step(step)
            scheduled = step.scheduled
            self.meter.charge(1 + len(scheduled), "the scheduler steps")
            held = len(self.running) + len(self.waiting) + len(self.holding)
            if held > self.counters.peak_held:
                self.counters.peak_held = held
            self._update_from_output(scheduled, intake)
            self.step_index += 1
        return self._result()

    def _pull(self) -> bool:
        """Take the next request that is due into the waiting queue; False if none is."""
        request = self._intake.pop_due(self.step_index)
        if request is None:
            return False
        run = _Req(request, self.settings.block_size, self._hasher)
        self.waiting.append(run)
        c = self.counters
        c.requests += 1
        c.prompt_tokens += request.prompt_tokens
        self.meter.charge(len(run.hashes) + REQUEST_WORK, "the requests")
        return True

    def _idle_step(self) -> None:
        self.counters.idle_steps += 1
        self.meter.charge(1, "the idle drain")
        self._connector_step(_Pass())
        self.step_index += 1

    def _update_from_output(self, scheduled: list[tuple[_Req, int]], intake: _Intake) -> None:
        finished = []
        for run, tokens in scheduled:
            run.computed += tokens
            if run.computed >= run.num_tokens:
                run.generated += 1
                run.num_tokens += 1
                if run.generated >= run.output_tokens:
                    finished.append(run)
        if finished:
            done = set(map(id, finished))
            self.running = [run for run in self.running if id(run) not in done]
        for run in finished:
            self.manager.on_request_finished(run.request.id)
            self._free(run)
            intake.finished(run.request, self.step_index)

    def _result(self) -> SimResult:
        stats = self.manager.stats
        c = self.counters
        return SimResult(
            extra_config=self.extra_config,
            steps=self.step_index,
            requests=c.requests,
            prompt_tokens=c.prompt_tokens,
            gpu_hit_tokens=c.gpu_hit_tokens,
            external_hit_tokens=c.external_hit_tokens,
            blocks_buffered=stats.admitted,
            blocks_stored=stats.stored,
            bytes_stored=stats.stored_bytes,
            lost_to_recycling=stats.lost_to_recycling,
            blocks_loaded=stats.loaded,
            preemptions=c.preemptions,
            async_loads=c.async_loads,
            load_wait_steps=c.load_wait_steps,
            idle_steps=c.idle_steps,
            peak_requests_held=c.peak_held,
            stats=stats.as_dict(),
        )


@contextlib.contextmanager
def without_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector for a run: the simulation makes no reference
    cycles per request or step (a test holds it to that), so its garbage is freed by
    reference counting alone, while the collector's passes over the many live buffered
    blocks cost a third of a lazy policy's run at a million requests."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Intake:
    """Requests in reading order, handed out one at a time once due (a follower,
    ``after``: once the request it follows finished, plus its delay).

    Requests due now are not all taken into the waiting queue at once: the engine
    pulls the next one only when the queue's materialised head is used up, so a
    million requests arriving together cost the memory of the few it looks at.
    Holds what was read and not yet handed out (one independent request ahead, and
    followers whose predecessor has not finished) and the finish step of requests
    still awaited.
    """

    def __init__(self, requests: Iterator[Request], block_size: int, gpu_blocks: int) -> None:
        self._requests = requests
        self._block_size = block_size
        self._gpu_blocks = gpu_blocks
        self._next: tuple[int, Request] | None = None  # (reading order, independent request)
        self._exhausted = False
        self._due: list[tuple[int, int, Request]] = []  # followers: (step, order, request)
        self._order = 0
        self._parked: dict[str, list[tuple[int, Request]]] = {}  # awaited id -> followers
        self._done: dict[str, tuple[int, int]] = {}  # awaited id -> (finish step, left)

    def _fill(self) -> None:
        """Read up to the next independent request, parking followers on the way."""
        while self._next is None and not self._exhausted:
            request = next(self._requests, None)
            if request is None:
                self._exhausted = True
                return
            self._check(request)
            order = self._order
            self._order += 1
            if request.after is None:
                self._next = (order, request)
                continue
            done = self._done.get(request.after)
            if done is None:
                self._parked.setdefault(request.after, []).append((order, request))
            else:
                heapq.heappush(self._due, (done[0] + 1 + request.arrival, order, request))
                self._settle(request.after)

    def _settle(self, awaited: str) -> None:
        step, left = self._done[awaited]
        if left <= 1:
            del self._done[awaited]
        else:
            self._done[awaited] = (step, left - 1)

    def _check(self, request: Request) -> None:
        need = math.ceil((request.prompt_tokens + request.output_tokens) / self._block_size)
        if need > self._gpu_blocks:
            raise KvtoolError(
                f"request {request.id} needs {need} blocks; the GPU pool has "
                f"{self._gpu_blocks} (raise --num-gpu-blocks)"
            )

    def pop_due(self, now: int) -> Request | None:
        """The next request due at or before ``now`` (by due step, then reading order)."""
        self._fill()
        follower = self._due[0] if self._due and self._due[0][0] <= now else None
        independent = self._next if self._next and self._next[1].arrival <= now else None
        if independent is not None and (follower is None
                                        or (independent[1].arrival, independent[0])
                                        < (follower[0], follower[1])):
            self._next = None
            return independent[1]
        if follower is not None:
            return heapq.heappop(self._due)[2]
        return None

    def next_arrival(self, now: int) -> int | None:
        """The next step anything arrives after ``now`` (None: the trace is done)."""
        self._fill()
        candidates = [self._due[0][0]] if self._due else []
        if self._next is not None:
            candidates.append(self._next[1].arrival)
        if not candidates:
            if self._parked:  # every awaited request was read earlier, so it finished
                raise RuntimeError("simulate: a request waits for one that never ran")
            return None
        return max(now + 1, min(candidates))

    def finished(self, request: Request, step: int) -> None:
        if not request.dependents:
            return
        followers = self._parked.pop(request.id, [])
        for order, follower in followers:
            heapq.heappush(self._due, (step + 1 + follower.arrival, order, follower))
        left = request.dependents - len(followers)
        if left > 0:
            self._done[request.id] = (step, left)
