"""The connector's scheduler side (EngineCore process): the core over vLLM's block pool.

``bind_gpu_block_pool`` builds the :class:`~kvtool.connector.manager.LazyOffloadManager`
over a view of vLLM's ``BlockPool``; ``build_connector_meta`` buffers each
request's newly full prompt blocks, runs one manager step and ships its store
jobs plus this step's load jobs to the workers; ``update_connector_output``
feeds the workers' reports back; ``get_num_new_matched_tokens`` answers from
the host store index (with ``kvtool.load_async`` the request then waits in
``WAITING_FOR_REMOTE_KVS`` until every worker reported its load through
``get_finished``, so the batch never waits for the copy); ``request_finished``
returns False so the blocks go back to vLLM's free queue still hashed;
``has_pending_push_work`` keeps the engine stepping while blocks are buffered
or in flight, so the idle drain runs; ``may_load_async`` (vLLM 0.34, under
``--max-num-inflight-kv-loads``) lets a host hit start loading while the
running batch is full.

KV events: when vLLM publishes them (``--kv-events-config`` with
``enable_kv_cache_events``), ``take_events`` reports the host tier as medium
``CPU``: a ``BlockStored`` when a store becomes servable, a ``BlockRemoved``
when an entry leaves the host store (LRU eviction, a failed load, a reset).

No vLLM block is ever referenced: a store job is checked against the block's
hash in the step that ships it, and each worker fences its next forward on
the copy, so vLLM's ``reset_prefix_cache``, ``pause_generation(clear_cache=True)``,
``sleep`` and preemptions always succeed. ``reset_cache`` forgets the host
store (a new epoch in every key) and returns True.

Load failures: a worker whose slot does not hold the requested key (or whose
copy fails) reports the blocks through ``get_block_ids_with_load_errors``; the
manager evicts the host entries that load read (counters ``load_failed``,
``evicted_after_failed_load``), so later requests with that prefix miss
instead of failing again. What happens to the request is vLLM's
``kv_load_failure_policy``: ``fail`` (the default) finishes it with an error,
``recompute`` computes the failed blocks again. Both are exercised by
``tests/connector/scheduler_harness.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from vllm.distributed.kv_events import MEDIUM_CPU, BlockRemoved, BlockStored, KVCacheEvent
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

from kvtool.connector.blockpool import BlockHash
from kvtool.connector.config import ShutdownMode
from kvtool.connector.manager import LazyOffloadManager, LoadJob, StepInput
from kvtool.connector.stats import ChangeReader
from kvtool.connector.store import StoreIndex
from kvtool.connector.vllm.common import (
    ConnectorSetup,
    KvtoolConnectorMetadata,
    KvtoolWorkerMetadata,
)
from kvtool.connector.vllm.metrics import GAUGES, KvtoolConnectorStats

logger = logging.getLogger("kvtool.connector")

# vLLM appends the KV cache group id to a block's prefix-cache hash as 4 bytes
# (kv_cache_utils.make_block_hash_with_group_id); requests carry hashes without it.
_GROUP_ID_BYTES = 4

_NO_REQUESTS: frozenset[str] = frozenset()


def resumed_req_ids(cached: Any) -> Collection[str]:
    """Requests among ``scheduled_cached_reqs`` that resume after a preemption.

    Up to vLLM 0.33 a resumed request comes back among the cached ones, named in
    ``CachedRequestData.resumed_req_ids``, its whole block table in ``new_block_ids``
    (https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/core/sched/output.py).
    vLLM 0.34 removed the field: it re-sends a resumed request in full among
    ``scheduled_new_reqs``, like a new one ("A resumed request is re-sent in full",
    https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/v1/core/sched/scheduler.py),
    where ``build_connector_meta`` starts it over as it starts any new request.
    Told apart by the field, not by the release.
    """
    resumed: Collection[str] | None = getattr(cached, "resumed_req_ids", None)
    return _NO_REQUESTS if resumed is None else resumed


class VllmBlockPoolView:
    """:class:`~kvtool.connector.blockpool.BlockPoolView` over vLLM's ``BlockPool``.

    Hashes are returned without vLLM's group-id suffix so they compare equal to
    a request's ``block_hashes`` (the host store is keyed and looked up by them).
    """

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._hash_map = pool.cached_block_hash_to_block

    def prefix_cache_was_reset(self) -> bool:
        """Whether vLLM cleared every hash since the last call: its
        ``BlockPool.reset_prefix_cache`` replaces the hash-to-block map, which
        nothing else does (vllm/v1/core/block_pool.py at v0.32.0). O(1)."""
        current = self._pool.cached_block_hash_to_block
        if current is self._hash_map:
            return False
        self._hash_map = current
        return True

    def block_hash(self, block_id: int) -> BlockHash | None:
        with_group: bytes | None = self._pool.blocks[block_id].block_hash
        return None if with_group is None else with_group[:-_GROUP_ID_BYTES]

    @property
    def num_free(self) -> int:
        return int(self._pool.get_num_free_blocks())

    def cached_prefix_blocks(self, block_hashes: Sequence[BlockHash]) -> int:
        """Leading blocks of the chain vLLM's prefix cache holds (KV cache group 0):
        the local hit vLLM will find, as of now. No side effects."""
        get_cached_block = self._pool.get_cached_block
        count = 0
        for block_hash in block_hashes:
            if get_cached_block(block_hash, [0]) is None:
                break
            count += 1
        return count

    def iter_eviction_order(self) -> Iterator[int]:
        # Walks FreeKVCacheBlockQueue's linked list itself (fake head and tail
        # nodes of FreeKVCacheBlockQueue) rather than through iter_blocks_after: one
        # generator layer instead of two, on EVICTION_AWARE's per-step path.
        queue = self._pool.free_block_queue
        tail = queue.fake_free_list_tail
        block = queue.fake_free_list_head.next_free_block
        while block is not None and block is not tail:
            yield block.block_id
            block = block.next_free_block


@dataclass
class _Tracked:
    """Scheduler-side view of one running request (KV cache group 0)."""

    block_ids: list[int]
    """Its block ids in order, kept up to date while its prompt is being buffered
    (after that only a resume after preemption reads them again, and resets them)."""
    prompt_len: int
    prompt_blocks: int
    """Full blocks the prompt fills: once that many are buffered, decode steps skip it."""
    buffered_blocks: int = 0
    """Leading blocks already handed to the manager."""


class _Lookup(NamedTuple):
    local_blocks: int
    """Blocks the engine's own prefix cache covers (the host hit starts after them)."""
    hit_blocks: int
    """Blocks after those that the host store holds."""


class KvtoolConnectorScheduler:
    """Scheduler-side state of :class:`~kvtool.connector.vllm.KvtoolConnector`."""

    def __init__(self, setup: ConnectorSetup, vllm_config: Any) -> None:
        self.setup = setup
        self.config = setup.config
        self._block_size = setup.layout.block_size
        self.manager: LazyOffloadManager | None = None
        self._pool_view: VllmBlockPoolView | None = None
        self._hash_ratio = 1
        self._tracked: dict[str, _Tracked] = {}
        self._buffering: set[str] = set()  # tracked ids whose prompt is not all buffered
        self._lookups: dict[str, _Lookup] = {}
        self._load_jobs: list[LoadJob] = []
        self._load_requests: dict[int, str] = {}
        self._stats_reader: ChangeReader | None = None
        events_config = vllm_config.kv_events_config
        self._kv_events = events_config is not None and bool(events_config.enable_kv_cache_events)
        self.config.log_startup(logger)

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        if self.manager is not None:
            return
        self._hash_ratio = max(1, self._block_size // int(gpu_block_pool.hash_block_size))
        setup = self.setup
        self._pool_view = VllmBlockPoolView(gpu_block_pool)
        store = StoreIndex(self.config.host_capacity_bytes, setup.host_block_bytes,
                           setup.fingerprint, record_events=self._kv_events)
        self.manager = LazyOffloadManager(
            self.config,
            self._pool_view,
            store,
            world_size=setup.world_size,
            group_tokens_per_block=[self._block_size],
            null_block_id=int(gpu_block_pool.null_block.block_id),
        )
        self._stats_reader = ChangeReader(self.manager.stats, GAUGES)

    def _manager(self) -> LazyOffloadManager:
        if self.manager is None:
            raise RuntimeError("the scheduler did not bind its block pool to the connector")
        return self.manager

    def _block_hashes(self, request: Any, start: int, stop: int) -> list[BlockHash]:
        """The request's hash per engine block (the last hash-block hash inside it),
        for engine blocks ``start`` to ``stop`` (exclusive, clipped like a slice)."""
        hashes: list[BlockHash] = request.block_hashes
        ratio = self._hash_ratio
        if ratio == 1:
            return hashes[start:stop]
        blocks = range(len(hashes) // ratio)[start:stop]
        return [hashes[(i + 1) * ratio - 1] for i in blocks]

    # ------------------------------------------------------------------ host hits

    def _claimable_blocks(self, request: Any) -> int:
        """Full blocks a hit may cover: at least one token must be computed to sample
        from, so never all of the request's tokens."""
        return (int(request.num_tokens) - 1) // self._block_size

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        bs = self._block_size
        local_blocks = num_computed_tokens // bs
        cap = self._claimable_blocks(request)
        # A block hash chains every token before it, so the host only needs the
        # blocks after the engine's own hit, not the ones the engine already has.
        beyond = self._block_hashes(request, local_blocks, cap)
        hit_blocks = self._manager().lookup(beyond) if beyond else 0
        self._lookups[request.request_id] = _Lookup(local_blocks, hit_blocks)
        # Asynchronous: the request waits in WAITING_FOR_REMOTE_KVS until every
        # worker reported its load (get_finished), instead of joining this batch.
        return hit_blocks * bs, self.config.load_async and hit_blocks > 0

    def may_load_async(self, request: Any) -> bool:
        """Whether :meth:`get_num_new_matched_tokens` would answer asynchronously for
        ``request`` now: ``kvtool.load_async`` is on and the host holds the block
        after the engine's own prefix-cache hit.

        vLLM 0.34 asks this when a request enters the waiting queues, and only
        under ``--max-num-inflight-kv-loads``: a request it answers True for goes
        to a queue whose loads start while the running batch is full, so the KV
        is there when a slot frees. vLLM's default says True only for P/D
        ``do_remote_prefill`` requests, which would leave every host hit waiting
        for a running slot before its load even starts. A wrong True (the entry
        was evicted, or the engine cached the block meanwhile) only holds other
        such loads back until a slot is free, so the check is the one
        ``get_num_new_matched_tokens`` makes, on the first block past the local
        hit: a dictionary lookup per locally cached block, plus one
        (https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/distributed/kv_transfer/kv_connector/v1/base.py,
        ``may_load_async``; vllm/v1/core/sched/scheduler.py, ``_enqueue_waiting_request``).
        """
        manager, pool = self.manager, self._pool_view
        if not self.config.load_async or manager is None or pool is None:
            return False
        hashes = self._block_hashes(request, 0, self._claimable_blocks(request))
        local = pool.cached_prefix_blocks(hashes)
        return manager.lookup(hashes[local:local + 1]) > 0

    def _notice_prefix_cache_reset(self) -> None:
        """Before anything this pass allocated is checked: buffered blocks whose hash a
        reset cleared are dropped, never taken for recycled ones (and rescued)."""
        if self._pool_view is not None and self._pool_view.prefix_cache_was_reset():
            self._manager().on_prefix_cache_reset()

    def update_state_after_alloc(
        self, request: Any, blocks: Any, num_external_tokens: int
    ) -> None:
        self._notice_prefix_cache_reset()
        lookup = self._lookups.pop(request.request_id, None)
        if num_external_tokens <= 0 or lookup is None:
            return
        n = num_external_tokens // self._block_size
        start = lookup.local_blocks
        block_ids = blocks.get_block_ids()[0][start:start + n]
        hashes = self._block_hashes(request, start, start + n)
        job = self._manager().plan_load(block_ids, hashes)
        self._load_jobs.append(job)
        if self.config.load_async:
            self._load_requests[job.job_id] = request.request_id

    # ------------------------------------------------------------------ steps

    def build_connector_meta(self, scheduler_output: Any) -> KvtoolConnectorMetadata:
        manager = self._manager()
        self._notice_prefix_cache_reset()
        for request_id in scheduler_output.preempted_req_ids or ():
            manager.on_request_preempted(request_id)
            tracked = self._tracked.get(request_id)
            if tracked is not None:
                tracked.buffered_blocks = 0
                if tracked.prompt_blocks:
                    self._buffering.add(request_id)
        num_scheduled: dict[str, int] = scheduler_output.num_scheduled_tokens
        allocated: list[int] = []

        # New requests, and on vLLM 0.34 resumed ones too (see resumed_req_ids):
        # either way the request starts over from the blocks listed here.
        for new in scheduler_output.scheduled_new_reqs:
            group0 = list(new.block_ids[0]) if new.block_ids else []
            allocated += group0
            if new.prompt_token_ids is None:
                continue  # prompt embeddings: no token hashes to key blocks by
            prompt_len = len(new.prompt_token_ids)
            tracked = _Tracked(group0, prompt_len, prompt_len // self._block_size)
            self._tracked[new.req_id] = tracked
            manager.on_request_arrived(new.req_id)
            self._buffer_full(new.req_id, tracked,
                              new.num_computed_tokens + num_scheduled.get(new.req_id, 0))

        cached = scheduler_output.scheduled_cached_reqs
        resumed = resumed_req_ids(cached)
        if not self._buffering and not resumed:
            # The usual decode step: every running prompt is buffered, so only the
            # allocations matter (this runs for every running request every step).
            for new_ids in cached.new_block_ids:
                if new_ids:
                    allocated += new_ids[0]
        else:
            self._buffer_running(cached, num_scheduled, allocated)

        result = manager.step(StepInput(int(scheduler_output.total_num_scheduled_tokens),
                                        allocated))
        meta = KvtoolConnectorMetadata(load_jobs=self._load_jobs,
                                       store_jobs=list(result.store_jobs),
                                       load_requests=self._load_requests)
        # New containers every step: the shipped ones may still be read by a worker
        # (in-process executors share the object) while the next step plans loads.
        self._load_jobs, self._load_requests = [], {}
        return meta

    def _buffer_running(
        self, cached: Any, num_scheduled: dict[str, int], allocated: list[int]
    ) -> None:
        """Running requests: note their new blocks in ``allocated``, restart resumed
        ones, and buffer the prompt blocks that became full."""
        manager = self._manager()
        tracked_by_id, resumed = self._tracked, resumed_req_ids(cached)
        new_block_ids, num_computed = cached.new_block_ids, cached.num_computed_tokens
        for i, request_id in enumerate(cached.req_ids):
            new_ids = new_block_ids[i]
            added: Sequence[int] = new_ids[0] if new_ids else ()
            if added:
                allocated += added
            tracked = tracked_by_id.get(request_id)
            if tracked is None:
                continue
            if request_id in resumed:
                tracked.block_ids = list(added)
                tracked.buffered_blocks = 0
                manager.on_request_arrived(request_id)
            elif (tracked.buffered_blocks >= tracked.prompt_blocks
                  and not self.config.store_decode):
                continue  # its prompt is all buffered
            elif added:
                tracked.block_ids += added
            self._buffer_full(request_id, tracked,
                              num_computed[i] + num_scheduled.get(request_id, 0))

    def _buffer_full(self, request_id: str, tracked: _Tracked, computed_after_step: int) -> None:
        """Hand the prompt blocks that are full once this step's forward ran to the manager."""
        if not self.config.store_decode:
            computed_after_step = min(computed_after_step, tracked.prompt_len)
        full = min(computed_after_step // self._block_size, len(tracked.block_ids))
        if full > tracked.buffered_blocks:
            self._manager().buffer_blocks(request_id,
                                          tracked.block_ids[tracked.buffered_blocks:full])
            tracked.buffered_blocks = full
        # With kvtool.store_decode every running request keeps buffering (a decode
        # block is hashed once its last token is known: under async scheduling
        # that is a step late, so such a block is refused as unhashed, counted).
        if self.config.store_decode or tracked.buffered_blocks < tracked.prompt_blocks:
            self._buffering.add(request_id)
        else:
            self._buffering.discard(request_id)

    def update_connector_output(self, connector_output: Any) -> None:
        meta = connector_output.kv_connector_worker_meta
        if isinstance(meta, KvtoolWorkerMetadata) and meta.reports:
            self._manager().on_job_reports(meta.reports)

    # ------------------------------------------------------------------ requests

    def request_finished(self, request: Any) -> tuple[bool, dict[str, Any] | None]:
        self._tracked.pop(request.request_id, None)
        self._buffering.discard(request.request_id)
        self._lookups.pop(request.request_id, None)
        if self.manager is not None:
            self.manager.on_request_finished(request.request_id)
        # Lazy offload: the blocks return to vLLM's free queue, still hashed, at once.
        return False, None

    def reset_cache(self) -> bool:
        if self.manager is None:
            return True
        return self.manager.reset()

    def has_pending_push_work(self) -> bool:
        return self.manager is not None and self.manager.has_pending_work()

    def take_events(self) -> list[KVCacheEvent]:
        """The host tier's KV events since the last call (vLLM asks every step)."""
        if not self._kv_events or self.manager is None:
            return []
        events: list[KVCacheEvent] = []
        for event in self.manager.store.take_events():
            hashes = [maybe_convert_block_hash(h) for h in event.block_hashes]
            if not event.stored:
                events.append(BlockRemoved(block_hashes=hashes, medium=MEDIUM_CPU, group_idx=0))
                continue
            # The host tier knows a block by its hash alone, so the payload is the
            # one vLLM's OffloadingConnector sends without self-describing events
            # (offloading/events.py at v0.32.0): no tokens, no parent, one block
            # per event (several hashes in one event would claim a chain).
            events += [
                BlockStored(block_hashes=[h], parent_block_hash=None, token_ids=[],
                            block_size=0, lora_id=None, medium=MEDIUM_CPU, lora_name=None,
                            group_idx=0)
                for h in hashes
            ]
        return events

    def get_stats(self) -> KvtoolConnectorStats | None:
        """What the manager counted since the last call (None if nothing)."""
        # Called every step: cheap when nothing moved (most steps).
        moved = self._stats_reader.read() if self._stats_reader is not None else None
        if moved is None:
            return None
        counters, gauges = moved
        return KvtoolConnectorStats({"counters": counters, "gauges": gauges})

    def shutdown(self) -> None:
        manager = self.manager
        if manager is None:
            return
        # vLLM shuts the workers down first, so nothing released now could reach
        # one: whatever is still buffered is dropped, and counted. Under
        # shutdown=drain that is only what the engine did not step long enough
        # to store (an in-process shutdown does not step, or shutdown_drain_seconds ran out).
        left = manager.stats.pending
        if left and self.config.shutdown is ShutdownMode.DRAIN:
            logger.warning("kvtool lazy offload: %d buffered block(s) dropped at shutdown: "
                           "the engine stopped stepping before they were stored", left)
        manager.shutdown(ShutdownMode.DROP)
        logger.info("kvtool lazy offload at shutdown: %s", manager.stats.summary())
