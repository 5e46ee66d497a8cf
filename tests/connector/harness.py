"""A tiny scheduler simulation around the manager: InMemoryBlockPool + StoreIndex + fake clock."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvtool.connector.blockpool import InMemoryBlockPool
from kvtool.connector.config import ConnectorConfig
from kvtool.connector.manager import JobReport, LazyOffloadManager, StepInput, StoreJob
from kvtool.connector.store import StoreIndex

BLOCK_BYTES = 1024


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    """Drives the manager the way the vLLM adapter does, over an in-memory pool."""

    config: ConnectorConfig
    num_blocks: int = 64
    capacity_blocks: int = 1000
    world_size: int = 1
    tokens_per_block: Sequence[int] = (16,)
    null_block_id: int | None = None
    clock: FakeClock = field(default_factory=FakeClock)
    pool_class: type[InMemoryBlockPool] = InMemoryBlockPool

    def __post_init__(self) -> None:
        self.pool = self.pool_class(self.num_blocks)
        self.store = StoreIndex(self.capacity_blocks * BLOCK_BYTES, BLOCK_BYTES, "fp")
        self.manager = LazyOffloadManager(
            self.config, self.pool, self.store, world_size=self.world_size,
            group_tokens_per_block=self.tokens_per_block, clock=self.clock,
            null_block_id=self.null_block_id,
        )
        self.held: dict[str, list[int]] = {}
        self.chains: dict[str, list[Any]] = {}
        self.allocated: list[int] = []

    @classmethod
    def with_config(cls, extra: dict[str, Any] | None = None, **kwargs: Any) -> Rig:
        return cls(ConnectorConfig.from_extra_config(extra or {}), **kwargs)

    def compute(self, rid: str, contents: Iterable[Any]) -> list[int]:
        """Schedule full blocks for ``rid`` with the given contents; returns their ids.

        A content already in the prefix cache (same chain so far) is a hit: the
        cached block is touched instead of allocating a new one, as vLLM does.
        """
        chain = self.chains.setdefault(rid, [])
        out = []
        for content in contents:
            block_hash = (tuple(chain), content)
            chain.append(content)
            cached = self.pool.cached_block(block_hash)
            if cached is not None:
                self.pool.touch([cached])
                block_id = cached
            else:
                (block_id,) = self.pool.allocate(1)
                self.pool.set_hash(block_id, block_hash)
            self.allocated.append(block_id)
            self.held.setdefault(rid, []).append(block_id)
            out.append(block_id)
        self.manager.buffer_blocks(rid, out)
        return out

    def finish(self, rid: str) -> None:
        self.manager.on_request_finished(rid)
        self.pool.free(list(reversed(self.held.pop(rid, []))))
        self.chains.pop(rid, None)

    def preempt(self, rid: str) -> None:
        self.manager.on_request_preempted(rid)
        self.pool.free(list(reversed(self.held.pop(rid, []))))
        self.chains.pop(rid, None)

    def step(self, tokens: int = 16) -> list[StoreJob]:
        allocated, self.allocated = self.allocated, []
        step = StepInput(tokens, allocated)
        return list(self.manager.step(step).store_jobs)

    def complete(self, jobs: Iterable[StoreJob], ok: bool = True) -> None:
        reports = [JobReport(job.job_id, ok) for job in jobs]
        for _ in range(self.world_size):
            self.manager.on_job_reports(reports)


def released_blocks(jobs: Iterable[StoreJob]) -> list[int]:
    return [block for job in jobs for block in job.block_ids]
