"""vLLM adapter for kvtool's lazy-offload connector: the only module that imports vLLM.

Load it with::

    --kv-transfer-config '{"kv_connector": "KvtoolConnector",
                           "kv_connector_module_path": "kvtool.connector.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"kvtool.policy": "eviction_aware"}}'

(keys: :mod:`kvtool.connector.config`). Prefix caching must be on: a buffered
block is validated by its prefix-cache hash.

The adapter translates vLLM's ``KVConnectorBase_V1`` hooks into calls on the
engine-agnostic core and back (hook order: vllm/v1/core/sched/scheduler.py and
vllm/v1/worker/kv_connector_model_runner_mixin.py at v0.32.0):

- scheduler (EngineCore process): ``bind_gpu_block_pool`` builds the
  :class:`~kvtool.connector.manager.LazyOffloadManager` over a view of vLLM's
  ``BlockPool``; ``build_connector_meta`` buffers each request's newly full
  prompt blocks, runs one manager step and ships its store jobs plus this
  step's load jobs to the workers; ``update_connector_output`` feeds the
  workers' reports back; ``get_num_new_matched_tokens`` answers from the host
  store index; ``request_finished`` returns False so the blocks go back to
  vLLM's free queue still hashed; ``has_pending_push_work`` keeps the engine
  stepping while blocks are buffered or in flight, so the idle drain runs.
- worker (one per rank): ``register_kv_caches`` builds the
  :class:`~kvtool.connector.transfer.TransferEngine`; ``start_load_kv`` loads
  hits before the forward; ``wait_for_save`` copies released blocks after the
  forward that computed them; ``build_connector_worker_meta`` reports finished
  jobs.

No vLLM block is ever referenced by the connector: a store job is checked
against the block's hash in the step that ships it, and each worker fences
its next forward on the copy (``bind_connector_metadata``), so vLLM's
``reset_prefix_cache``, ``pause_generation(clear_cache=True)``, ``sleep`` and
preemptions always succeed. ``reset_cache`` forgets the host store (a new
epoch in every key) and returns True.

Load failures: a worker whose slot does not hold the requested key (or whose
copy fails) reports the blocks through ``get_block_ids_with_load_errors``; the
manager evicts the host entries that load read (counters ``load_failed``,
``evicted_after_failed_load``), so later requests with that prefix miss
instead of failing again. What happens to the request is vLLM's
``kv_load_failure_policy``: ``fail`` (the default) finishes it with an error,
``recompute`` computes the failed blocks again. Both are exercised by
``tests/connector/scheduler_harness.py``.

Supported releases: vLLM 0.32.x and 0.33.x; importing this module under any
other release raises :class:`UnsupportedVllmError` naming them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import vllm
from packaging.version import InvalidVersion, Version

from kvtool.errors import KvtoolError

# The hook signatures, SchedulerOutput fields and BlockPool internals this
# adapter relies on were read from vLLM 0.32.0 (vllm/v1/core/block_pool.py and kv_cache_utils.py);
# 0.33 keeps them. Other series move or rename them, so refuse early and clearly.
SUPPORTED_SERIES: tuple[tuple[int, int], ...] = ((0, 32), (0, 33))


class UnsupportedVllmError(KvtoolError, ImportError):
    """The installed vLLM is a release this adapter was not written for."""


def check_vllm_version(version: str) -> None:
    """Raise UnsupportedVllmError unless ``version`` is in a supported series."""
    supported = ", ".join(f"{major}.{minor}.x" for major, minor in SUPPORTED_SERIES)
    try:
        release = Version(version).release
    except InvalidVersion:
        release = ()
    if tuple(release[:2]) not in SUPPORTED_SERIES:
        raise UnsupportedVllmError(
            f"kvtool.connector.vllm supports vLLM {supported}; this is vLLM {version}"
        )


check_vllm_version(vllm.__version__)

# Imported only after the version check: other releases lay these modules out differently.
from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: E402
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (  # noqa: E402
    KVConnectorPromMetrics,
    KVConnectorStats,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource  # noqa: E402

from kvtool.connector.blockpool import BlockHash  # noqa: E402
from kvtool.connector.config import ConnectorConfig, ShutdownMode  # noqa: E402
from kvtool.connector.manager import (  # noqa: E402
    JobReport,
    LazyOffloadManager,
    LoadJob,
    StepInput,
    StoreJob,
    max_blocks_per_pass,
)
from kvtool.connector.policies import ReleaseReason  # noqa: E402
from kvtool.connector.stats import ChangeReader, ConnectorStats  # noqa: E402
from kvtool.connector.store import StoreIndex, fingerprint  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch

    from kvtool.connector.transfer import TransferEngine

logger = logging.getLogger("kvtool.connector")


def _log_through_vllm() -> None:
    """Send kvtool's log records to vLLM's handlers, so they appear in the engine log.

    vLLM configures only its own ``vllm`` logger; without this the start-up line
    and the core's warnings would reach no handler.
    """
    ours, theirs = logging.getLogger("kvtool"), logging.getLogger("vllm")
    if ours.handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
    ours.propagate = False


_log_through_vllm()

# vLLM appends the KV cache group id to a block's prefix-cache hash as 4 bytes
# (kv_cache_utils.make_block_hash_with_group_id); requests carry hashes without it.
_GROUP_ID_BYTES = 4


# --------------------------------------------------------------------------- messages


@dataclass
class KvtoolConnectorMetadata(KVConnectorMetadata):  # type: ignore[misc]
    """Scheduler -> workers for one step: blocks to load before the forward, to store after."""

    load_jobs: list[LoadJob] = field(default_factory=list)
    store_jobs: list[StoreJob] = field(default_factory=list)


@dataclass
class KvtoolWorkerMetadata(KVConnectorWorkerMetadata):  # type: ignore[misc]
    """Workers -> scheduler: finished jobs, one entry per (worker, job)."""

    reports: list[JobReport] = field(default_factory=list)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KvtoolWorkerMetadata:
        theirs = other.reports if isinstance(other, KvtoolWorkerMetadata) else []
        return KvtoolWorkerMetadata([*self.reports, *theirs])


# --------------------------------------------------------------------------- metrics

# Counters of ConnectorStats that are levels, not running totals.
_GAUGES = ("pending", "in_flight")


def _counter_names() -> list[str]:
    names = [k for k in ConnectorStats().as_dict() if k not in _GAUGES]
    names += [f"released_by_{reason.value}" for reason in ReleaseReason]
    return sorted(set(names))


@dataclass
class KvtoolConnectorStats(KVConnectorStats):  # type: ignore[misc]
    """The manager's counters since the last report: ``{"counters": {name: increment},
    "gauges": {name: level}}``. Only the scheduler reports them (workers decide nothing)."""

    def reset(self) -> None:
        self.data: dict[str, Any] = {"counters": {}, "gauges": {}}

    def aggregate(self, other: KVConnectorStats) -> KvtoolConnectorStats:
        counters = dict(self.data.get("counters", {}))
        for name, increment in other.data.get("counters", {}).items():
            counters[name] = counters.get(name, 0) + increment
        gauges = {**self.data.get("gauges", {}), **other.data.get("gauges", {})}
        return KvtoolConnectorStats({"counters": counters, "gauges": gauges})

    def reduce(self) -> dict[str, int | float]:
        return {**self.data.get("counters", {}), **self.data.get("gauges", {})}

    def is_empty(self) -> bool:
        return not self.data.get("counters") and not self.data.get("gauges")


def _unregister_kvtool_metrics() -> None:
    """Forget kvtool metrics of an earlier engine in this process (as vLLM does for its
    own), so a second engine can register them again."""
    import prometheus_client

    registry = prometheus_client.REGISTRY
    for collector, names in list(registry._collector_to_names.items()):
        if any(name.startswith("kvtool:") for name in names):
            registry.unregister(collector)


class KvtoolPromMetrics(KVConnectorPromMetrics):  # type: ignore[misc]
    """``kvtool:<counter>_total`` and the ``kvtool:pending`` / ``kvtool:in_flight`` gauges
    (unit: KV blocks, or bytes for ``*_bytes``) on vLLM's /metrics."""

    def __init__(
        self,
        vllm_config: Any,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        _unregister_kvtool_metrics()
        self._counters = {
            name: self._per_engine(self._counter_cls(
                name=f"kvtool:{name}",
                documentation=f"kvtool lazy-offload connector: {name.replace('_', ' ')}",
                labelnames=labelnames,
            ))
            for name in _counter_names()
        }
        self._gauges = {
            name: self._per_engine(self._gauge_cls(
                name=f"kvtool:{name}",
                documentation=f"kvtool lazy-offload connector: blocks {name.replace('_', ' ')}",
                labelnames=labelnames,
                multiprocess_mode="mostrecent",
            ))
            for name in _GAUGES
        }

    def _per_engine(self, metric: Any) -> dict[int, Any]:
        return {idx: metric.labels(*values) for idx, values in self.per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for name, increment in transfer_stats_data.get("counters", {}).items():
            if name in self._counters and increment > 0:
                self._counters[name][engine_idx].inc(increment)
        for name, level in transfer_stats_data.get("gauges", {}).items():
            if name in self._gauges:
                self._gauges[name][engine_idx].set(level)


# --------------------------------------------------------------------------- block pool


class VllmBlockPoolView:
    """:class:`~kvtool.connector.blockpool.BlockPoolView` over vLLM's ``BlockPool``.

    Hashes are returned without vLLM's group-id suffix so they compare equal to
    a request's ``block_hashes`` (the host store is keyed and looked up by them).
    """

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def block_hash(self, block_id: int) -> BlockHash | None:
        with_group: bytes | None = self._pool.blocks[block_id].block_hash
        return None if with_group is None else with_group[:-_GROUP_ID_BYTES]

    @property
    def num_free(self) -> int:
        return int(self._pool.get_num_free_blocks())

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


# --------------------------------------------------------------------------- connector


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


@dataclass(frozen=True)
class KvLayout:
    """What a process derives from its own ``KVCacheConfig`` (under pipeline
    parallelism each stage's lists only its own layers)."""

    block_size: int
    block_bytes: int
    """Bytes of one block summed over this process's layers: one arena row."""
    page_bytes: int
    """Bytes of one block of one layer on one rank."""
    num_blocks: int

    @classmethod
    def from_kv_cache_config(cls, kv_cache_config: Any) -> KvLayout:
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1:
            raise ValueError(
                f"kvtool's connector handles models with one KV cache group; this one has "
                f"{len(groups)} (hybrid attention is not supported)"
            )
        spec = groups[0].kv_cache_spec
        return cls(
            block_size=int(spec.block_size),
            block_bytes=int(spec.page_size_bytes) * len(groups[0].layer_names),
            page_bytes=int(spec.page_size_bytes),
            num_blocks=int(kv_cache_config.num_blocks),
        )


def host_block_bytes(vllm_config: Any, layout: KvLayout, layers_here: int) -> int:
    """Bytes one block takes on the host over every rank: every layer of the model
    (all pipeline stages, at least the ones this process sees) on every
    tensor-parallel rank. ``kvtool.host_capacity_bytes`` is divided by this, so
    all ranks of the host together pin no more than asked, and every rank,
    whichever stage it runs, has the same slot count (the scheduler's)."""
    model_layers = int(vllm_config.model_config.get_total_num_hidden_layers())
    tp = int(vllm_config.parallel_config.tensor_parallel_size)
    return layout.page_bytes * max(model_layers, layers_here) * tp


class KvtoolConnector(KVConnectorBase_V1):  # type: ignore[misc]
    """kvtool's reference lazy-offload connector (see the module docstring)."""

    # Hits come from host memory; vLLM reports external hits by tier.
    _cache_hit_source = CacheHitSource.HOST

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        if not vllm_config.cache_config.enable_prefix_caching:
            raise ValueError(
                "kvtool's connector needs prefix caching (--enable-prefix-caching): "
                "buffered blocks are validated by their prefix-cache hashes"
            )
        extra = self._kv_transfer_config.kv_connector_extra_config
        self.config = ConnectorConfig.from_extra_config(extra)
        self.layout = KvLayout.from_kv_cache_config(kv_cache_config)
        layers_here = len(kv_cache_config.kv_cache_groups[0].layer_names)
        self.host_block_bytes = host_block_bytes(vllm_config, self.layout, layers_here)
        self.num_slots = self.config.host_capacity_bytes // self.host_block_bytes
        if self.num_slots < 1:
            raise ValueError(
                f"kvtool.host_capacity_bytes={self.config.host_capacity_bytes} holds no KV "
                f"block of {self.host_block_bytes} bytes (all layers, all ranks)"
            )
        self.world_size = int(vllm_config.parallel_config.world_size)
        model_config = vllm_config.model_config
        self.fingerprint = fingerprint(
            str(model_config.model),
            f"kv_bytes_per_block={self.host_block_bytes}",
            str(vllm_config.cache_config.cache_dtype),
            self.layout.block_size,
            str(model_config.dtype),
            f"world_size={self.world_size}",
        )
        # Scheduler role.
        self.manager: LazyOffloadManager | None = None
        self._hash_ratio = 1
        self._tracked: dict[str, _Tracked] = {}
        self._buffering: set[str] = set()  # tracked ids whose prompt is not all buffered
        self._lookups: dict[str, _Lookup] = {}
        self._load_jobs: list[LoadJob] = []
        self._stats_reader: ChangeReader | None = None
        # Worker role.
        self.engine: TransferEngine | None = None
        self._finished_reports: list[JobReport] = []
        self._load_blocks: dict[int, tuple[int, ...]] = {}
        self._load_errors: set[int] = set()
        if role == KVConnectorRole.SCHEDULER:
            self.config.log_startup(logger)

    # ------------------------------------------------------------------ properties

    @property
    def requires_kv_delivery(self) -> bool:
        # A best-effort cache: a store lost to preemption is only a future miss.
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> str | None:
        # Layer-outermost with [H, N, C] dense per block: a run of consecutive blocks
        # is one run of bytes per layer, one DMA copy each (kvtool.connector.transfer).
        # Without a preference vLLM 0.32 picks LBNHC on FLASH_ATTN, which the transfer
        # engine also accepts; CPU_ATTN supports only LBHNC.
        return "LBHNC"

    # ================================================================== scheduler

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        if self.manager is not None:
            return
        self._hash_ratio = max(1, self.layout.block_size // int(gpu_block_pool.hash_block_size))
        store = StoreIndex(self.config.host_capacity_bytes, self.host_block_bytes,
                           self.fingerprint)
        self.manager = LazyOffloadManager(
            self.config,
            VllmBlockPoolView(gpu_block_pool),
            store,
            world_size=self.world_size,
            group_tokens_per_block=[self.layout.block_size],
            max_step_blocks=self._max_step_blocks(),
        )
        self._stats_reader = ChangeReader(self.manager.stats, _GAUGES)

    def _max_step_blocks(self) -> int:
        sched = self._vllm_config.scheduler_config
        return max_blocks_per_pass(
            int(sched.max_num_batched_tokens), self.layout.block_size, int(sched.max_num_seqs)
        )

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

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        bs = self.layout.block_size
        local_blocks = num_computed_tokens // bs
        # At least one token must be computed to sample from, so never claim all of them.
        cap = (int(request.num_tokens) - 1) // bs
        # A block hash chains every token before it, so the host only needs the
        # blocks after the engine's own hit, not the ones the engine already has.
        beyond = self._block_hashes(request, local_blocks, cap)
        hit_blocks = self._manager().lookup(beyond) if beyond else 0
        self._lookups[request.request_id] = _Lookup(local_blocks, hit_blocks)
        return hit_blocks * bs, False

    def update_state_after_alloc(
        self, request: Any, blocks: Any, num_external_tokens: int
    ) -> None:
        lookup = self._lookups.pop(request.request_id, None)
        if num_external_tokens <= 0 or lookup is None:
            return
        n = num_external_tokens // self.layout.block_size
        start = lookup.local_blocks
        block_ids = blocks.get_block_ids()[0][start:start + n]
        hashes = self._block_hashes(request, start, start + n)
        self._load_jobs.append(self._manager().plan_load(block_ids, hashes))

    def build_connector_meta(self, scheduler_output: Any) -> KvtoolConnectorMetadata:
        manager = self._manager()
        for request_id in scheduler_output.preempted_req_ids or ():
            manager.on_request_preempted(request_id)
            tracked = self._tracked.get(request_id)
            if tracked is not None:
                tracked.buffered_blocks = 0
                if tracked.prompt_blocks:
                    self._buffering.add(request_id)
        num_scheduled: dict[str, int] = scheduler_output.num_scheduled_tokens
        allocated: list[int] = []

        for new in scheduler_output.scheduled_new_reqs:
            group0 = list(new.block_ids[0]) if new.block_ids else []
            allocated += group0
            if new.prompt_token_ids is None:
                continue  # prompt embeddings: no token hashes to key blocks by
            prompt_len = len(new.prompt_token_ids)
            tracked = _Tracked(group0, prompt_len, prompt_len // self.layout.block_size)
            self._tracked[new.req_id] = tracked
            manager.on_request_arrived(new.req_id)
            self._buffer_full(new.req_id, tracked,
                              new.num_computed_tokens + num_scheduled.get(new.req_id, 0))

        cached = scheduler_output.scheduled_cached_reqs
        resumed = cached.resumed_req_ids
        if not self._buffering and not resumed:
            # The usual decode step: every running prompt is buffered, so only the
            # allocations matter (this runs for every running request every step).
            for new_ids in cached.new_block_ids:
                if new_ids:
                    allocated += new_ids[0]
        else:
            self._buffer_running(cached, num_scheduled, allocated)

        result = manager.step(
            StepInput(int(scheduler_output.total_num_scheduled_tokens), allocated))
        meta = KvtoolConnectorMetadata(load_jobs=self._load_jobs,
                                       store_jobs=list(result.store_jobs))
        self._load_jobs = []
        return meta

    def _buffer_running(
        self, cached: Any, num_scheduled: dict[str, int], allocated: list[int]
    ) -> None:
        """Running requests: note their new blocks in ``allocated``, restart resumed
        ones, and buffer the prompt blocks that became full."""
        manager = self._manager()
        tracked_by_id, resumed = self._tracked, cached.resumed_req_ids
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
        full = min(computed_after_step // self.layout.block_size, len(tracked.block_ids))
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

    def request_finished(
        self, request: Any, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        self._tracked.pop(request.request_id, None)
        self._buffering.discard(request.request_id)
        self._lookups.pop(request.request_id, None)
        if self.manager is not None:
            self.manager.on_request_finished(request.request_id)
        # Lazy offload: the blocks return to vLLM's free queue, still hashed, at once.
        return False, None

    def reset_cache(self) -> bool:
        """vLLM's ``reset_prefix_cache(reset_connector=True)``, also run by
        ``pause_generation(clear_cache=True)`` and ``sleep(level>=1)``: forget the
        host store (see :meth:`LazyOffloadManager.reset`). True: it always succeeds."""
        if self.manager is None:
            return True
        return self.manager.reset()

    def has_pending_push_work(self) -> bool:
        return self.manager is not None and self.manager.has_pending_work()

    def get_kv_connector_stats(self) -> KvtoolConnectorStats | None:
        """Scheduler: what the manager counted since the last call (None if nothing)."""
        # Called every step: cheap when nothing moved (most steps). Workers have no reader.
        moved = self._stats_reader.read() if self._stats_reader is not None else None
        if moved is None:
            return None
        counters, gauges = moved
        return KvtoolConnectorStats({"counters": counters, "gauges": gauges})

    @classmethod
    def build_kv_connector_stats(
        cls, data: dict[str, Any] | None = None
    ) -> KvtoolConnectorStats | None:
        return KvtoolConnectorStats(data) if data is not None else KvtoolConnectorStats()

    @classmethod
    def build_prom_metrics(
        cls,
        vllm_config: Any,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> KvtoolPromMetrics:
        return KvtoolPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ================================================================== worker

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        from kvtool.connector.transfer import TransferEngine

        first = next(iter(kv_caches.values()))
        # The dimension that counts blocks: 0 on CPU ([blocks, heads, bs, 2*hs]),
        # 1 for layouts with K and V split up front ([2, blocks, ...]).
        block_dim = next(
            (d for d, size in enumerate(first.shape) if size == self.layout.num_blocks), None
        )
        if block_dim is None:
            raise ValueError(
                f"no dimension of the KV tensor {tuple(first.shape)} counts the "
                f"{self.layout.num_blocks} blocks vLLM allocated"
            )
        engine = TransferEngine.from_kv_caches(kv_caches, self.num_slots, block_dim=block_dim)
        if engine.block_bytes != self.layout.block_bytes:
            raise ValueError(
                f"KV tensors hold {engine.block_bytes} bytes per block, the KV cache "
                f"config says {self.layout.block_bytes}: unsupported layout"
            )
        self.engine = engine

    def _engine(self) -> TransferEngine:
        if self.engine is None:
            raise RuntimeError("vLLM did not register its KV caches with the connector")
        return self.engine

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        # Called before this step's forward: it must not overwrite a block that a
        # store of the previous step is still copying (the scheduler holds no blocks).
        if self.engine is not None:
            self.engine.fence()

    def _bound_metadata(self) -> KvtoolConnectorMetadata | None:
        # The base class's own slot, read directly: this runs twice per step, and
        # has_connector_metadata() plus _get_connector_metadata() read the same.
        meta = self._connector_metadata
        return meta if isinstance(meta, KvtoolConnectorMetadata) else None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._bound_metadata()
        if meta is None or not meta.load_jobs:
            return
        engine = self._engine()
        for job in meta.load_jobs:
            self._load_blocks[job.job_id] = job.block_ids
            engine.submit_load(job)
        # A load's key check happens at submit, so failures are known now and
        # vLLM can recompute those blocks in this very step.
        self._collect(engine)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads complete (or are ordered on the device) in start_load_kv

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        return  # whole blocks are copied after the forward, in wait_for_save

    def wait_for_save(self) -> None:
        meta = self._bound_metadata()
        if meta is None or not meta.store_jobs:
            return
        engine = self._engine()
        for job in meta.store_jobs:
            engine.submit_store(job)

    def _collect(self, engine: TransferEngine) -> None:
        for result in engine.poll():
            if not result.ok:
                logger.warning("kvtool connector: %s", result.error)
            blocks = self._load_blocks.pop(result.job_id, None)
            if blocks is not None and not result.ok:
                self._load_errors.update(blocks)
            self._finished_reports.append(JobReport(result.job_id, result.ok))

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def build_connector_worker_meta(self) -> KvtoolWorkerMetadata | None:
        if self.engine is not None and self.engine.has_pending():
            self._collect(self.engine)
        if not self._finished_reports:
            return None
        reports, self._finished_reports = self._finished_reports, []
        return KvtoolWorkerMetadata(reports)

    # ================================================================== both

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.wait_all()
        if self.manager is not None:
            # The engine no longer steps, so nothing released now could reach a
            # worker: whatever is still buffered is dropped, and counted.
            self.manager.shutdown(ShutdownMode.DROP)
            logger.info("kvtool lazy offload at shutdown: %s", self.manager.stats.summary())
