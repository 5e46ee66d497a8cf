"""Replay a trace through the reference connector's manager over an in-memory block pool.

A deliberately small model of vLLM's scheduler, enough to exercise drain policies
the way a real engine does: requests are admitted while their blocks are
guaranteed (no preemption), prompts are prefilled in chunks of at most
``max_batched_tokens`` per step and then decoded one token per step, full blocks
are hashed by prefix chain (a shared prefix gives the same hashes), prefix-cache
hits touch cached blocks, host-store hits are loaded into new blocks, and finished
requests free their blocks in reverse, hashed, to the free queue's tail. The
manager sees exactly the calls the vLLM adapter makes, and every job it emits is
reported complete by the (single) worker in the same step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field

from kvtool import limits
from kvtool.connector.blockpool import InMemoryBlockPool
from kvtool.connector.config import ConnectorConfig
from kvtool.connector.manager import (
    JobReport,
    LazyOffloadManager,
    StepInput,
    max_blocks_per_pass,
)
from kvtool.connector.store import StoreIndex
from kvtool.errors import KvtoolError
from kvtool.simulate.workload import TraceRequest

MAX_STEPS = 10_000_000  # a guard against a model bug, far beyond any real trace
MAX_IDLE_STEPS = 100_000  # after the trace: steps allowed for the idle drain to finish


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    num_gpu_blocks: int = Field(ge=1)
    block_size: int = Field(default=16, ge=1)
    max_num_seqs: int = Field(default=8, ge=1)
    max_batched_tokens: int = Field(default=2048, ge=1)
    host_blocks: int = Field(ge=1)
    block_bytes: int = Field(ge=1)
    step_seconds: float = Field(default=0.05, gt=0)


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
    blocks_lost_to_eviction: int
    blocks_loaded: int
    stats: dict[str, int]

    @computed_field  # type: ignore[prop-decorator]  # in model_dump and the JSON schema
    @property
    def external_hit_rate(self) -> float:
        return self.external_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class _Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class _Running:
    request: TraceRequest
    total_blocks: int
    blocks: list[int] = field(default_factory=list)
    computed: int = 0  # tokens whose KV exists
    hashed: int = 0  # leading blocks already full and hashed

    @property
    def total_tokens(self) -> int:
        return self.request.prompt_tokens + self.request.output_tokens


def block_hash(request: TraceRequest, index: int, block_size: int) -> Hashable:
    """Prefix-chain hash of block ``index``: shared while the block lies inside the prefix."""
    if (index + 1) * block_size <= request.prefix_tokens:
        return ("prefix", request.prefix, index)
    return ("request", request.id, index)


class Simulation:
    """One trace through one connector configuration (see module docstring)."""

    def __init__(self, settings: EngineSettings, extra_config: dict[str, Any]) -> None:
        limits.SIMULATE_WORK.check(  # the pools are allocated up front
            settings.num_gpu_blocks + settings.host_blocks, "simulate: --gpu-blocks + --host-blocks"
        )
        self.settings = settings
        self.extra_config = dict(extra_config)
        capacity = settings.host_blocks * settings.block_bytes
        config = ConnectorConfig.from_extra_config(
            {**extra_config, "kvtool.host_capacity_bytes": capacity}
        )
        self.clock = _Clock()
        self.pool = InMemoryBlockPool(settings.num_gpu_blocks)
        self.store = StoreIndex(capacity, settings.block_bytes, "simulation")
        self.manager = LazyOffloadManager(
            config,
            self.pool,
            self.store,
            group_tokens_per_block=(settings.block_size,),
            clock=self.clock,
            # The same bound the vLLM adapter passes, so a finished request's blocks are
            # released before the next pass can recycle them (see EvictionAwarePolicy).
            max_step_blocks=max_blocks_per_pass(
                settings.max_batched_tokens, settings.block_size, settings.max_num_seqs
            ),
        )
        self.gpu_hit_tokens = 0
        self.external_hit_tokens = 0

    def _reserved(self, running: Sequence[_Running]) -> int:
        return sum(run.total_blocks - len(run.blocks) for run in running)

    def _admit(self, request: TraceRequest, allocated: list[int], jobs: list[int]) -> _Running:
        size = self.settings.block_size
        # vLLM always computes at least the last prompt token, so at most
        # (prompt - 1) // block_size leading blocks can be hits.
        hashes = [block_hash(request, i, size) for i in range((request.prompt_tokens - 1) // size)]
        run = _Running(request, math.ceil((request.prompt_tokens + request.output_tokens) / size))
        for h in hashes:
            cached = self.pool.cached_block(h)
            if cached is None:
                break
            self.pool.touch([cached])
            run.blocks.append(cached)
        gpu = len(run.blocks)
        self.manager.on_request_arrived(request.id)
        host = self.manager.lookup(hashes[gpu:])
        if host:
            loaded = self.pool.allocate(host)
            for block_id, h in zip(loaded, hashes[gpu:gpu + host], strict=True):
                self.pool.set_hash(block_id, h)
            allocated.extend(loaded)
            run.blocks.extend(loaded)
            jobs.append(self.manager.plan_load(loaded, hashes[gpu:gpu + host]).job_id)
        run.hashed = gpu + host
        run.computed = run.hashed * size
        self.gpu_hit_tokens += gpu * size
        self.external_hit_tokens += host * size
        return run

    def _advance(self, run: _Running, tokens: int, allocated: list[int]) -> None:
        size = self.settings.block_size
        run.computed += tokens
        grow = math.ceil(run.computed / size) - len(run.blocks)
        if grow > 0:
            fresh = self.pool.allocate(grow)
            allocated.extend(fresh)
            run.blocks.extend(fresh)
        full = min(run.computed // size, len(run.blocks))
        newly = []
        for index in range(run.hashed, full):
            self.pool.set_hash(run.blocks[index], block_hash(run.request, index, size))
            newly.append(run.blocks[index])
        run.hashed = full
        if newly:
            self.manager.buffer_blocks(run.request.id, newly)

    def _connector_step(self, scheduled: int, allocated: list[int], jobs: list[int]) -> None:
        result = self.manager.step(StepInput(scheduled, allocated))
        jobs.extend(job.job_id for job in result.store_jobs)
        self.manager.on_job_reports([JobReport(job_id, True) for job_id in jobs])

    def run(self, trace: Sequence[TraceRequest]) -> SimResult:
        s = self.settings
        check_work(trace)
        for request in trace:
            need = math.ceil((request.prompt_tokens + request.output_tokens) / s.block_size)
            if need > s.num_gpu_blocks:
                raise KvtoolError(
                    f"request {request.id} needs {need} blocks; the GPU pool has "
                    f"{s.num_gpu_blocks} (raise --gpu-blocks)"
                )
        waiting = deque(sorted(trace, key=lambda r: r.arrival))
        running: list[_Running] = []
        step = 0
        while waiting or running:
            if step >= MAX_STEPS:
                raise RuntimeError("simulation did not finish")  # a model bug, not bad input
            self.clock.now = step * s.step_seconds
            allocated: list[int] = []
            jobs: list[int] = []
            while (waiting and waiting[0].arrival <= step and len(running) < s.max_num_seqs):
                head = waiting[0]
                need = math.ceil((head.prompt_tokens + head.output_tokens) / s.block_size)
                if self.pool.num_free - self._reserved(running) < need:
                    break  # admitted requests never wait for blocks: no preemption
                running.append(self._admit(waiting.popleft(), allocated, jobs))
            budget, scheduled = s.max_batched_tokens, 0
            for run in running:
                prompt = run.request.prompt_tokens
                tokens = min(prompt - run.computed, budget) if run.computed < prompt else 1
                if tokens <= 0 or budget <= 0:
                    continue
                self._advance(run, tokens, allocated)
                budget -= tokens
                scheduled += tokens
            self._connector_step(scheduled, allocated, jobs)
            for run in [r for r in running if r.computed >= r.total_tokens]:
                running.remove(run)
                self.manager.on_request_finished(run.request.id)
                self.pool.free(list(reversed(run.blocks)))
            step += 1
        idle = 0
        while self.manager.has_pending_work() and idle < MAX_IDLE_STEPS:
            self.clock.now += s.step_seconds
            self._connector_step(0, [], [])
            idle += 1
        return self._result(trace, step)

    def _result(self, trace: Sequence[TraceRequest], steps: int) -> SimResult:
        stats = self.manager.stats
        return SimResult(
            extra_config=self.extra_config,
            steps=steps,
            requests=len(trace),
            prompt_tokens=sum(r.prompt_tokens for r in trace),
            gpu_hit_tokens=self.gpu_hit_tokens,
            external_hit_tokens=self.external_hit_tokens,
            blocks_buffered=stats.admitted,
            blocks_stored=stats.stored,
            bytes_stored=stats.stored_bytes,
            blocks_lost_to_eviction=stats.dropped.get("evicted", 0)
            + stats.dropped.get("hash_changed_at_release", 0),
            blocks_loaded=stats.loaded,
            stats=stats.as_dict(),
        )


def check_work(trace: Sequence[TraceRequest]) -> None:
    """Refuse, before it starts, a run whose step count is out of bounds (``simulate_work``).

    Every step schedules at least one token of a running request or waits for the next
    arrival, so the latest arrival plus all tokens bounds the step count.
    """
    if trace:
        latest = max(request.arrival for request in trace)
        tokens = sum(request.prompt_tokens + request.output_tokens for request in trace)
        limits.SIMULATE_WORK.check(latest + tokens, "simulate: the trace (last arrival + tokens)")
