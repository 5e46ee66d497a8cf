"""``KvtoolConnector``, the class vLLM loads: it routes each hook to its role's side.

The scheduler role gets a :class:`~kvtool.connector.vllm.scheduler.KvtoolConnectorScheduler`,
the worker role a :class:`~kvtool.connector.vllm.worker.KvtoolConnectorWorker`;
both start from the same :class:`~kvtool.connector.vllm.common.ConnectorSetup`.
A hook called on the wrong role raises, naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from kvtool.connector.vllm.common import (
    ConnectorSetup,
    KvtoolConnectorMetadata,
    KvtoolWorkerMetadata,
)
from kvtool.connector.vllm.metrics import KvtoolConnectorStats, KvtoolPromMetrics
from kvtool.connector.vllm.scheduler import KvtoolConnectorScheduler
from kvtool.connector.vllm.worker import KvtoolConnectorWorker, forward_calls_layer_hooks

if TYPE_CHECKING:
    import torch
    from vllm.distributed.kv_events import KVCacheEvent

    from kvtool.connector.manager import LazyOffloadManager
    from kvtool.connector.transfer import TransferEngine


class KvtoolConnector(KVConnectorBase_V1):  # type: ignore[misc]
    """kvtool's reference lazy-offload connector (see :mod:`kvtool.connector.vllm`)."""

    # Hits come from host memory; vLLM reports external hits by tier.
    _cache_hit_source = CacheHitSource.HOST

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        setup = ConnectorSetup.from_vllm(
            vllm_config, self._kv_transfer_config.kv_connector_extra_config, kv_cache_config)
        self.setup = setup
        self.connector_scheduler: KvtoolConnectorScheduler | None = None
        self.connector_worker: KvtoolConnectorWorker | None = None
        if role == KVConnectorRole.SCHEDULER:
            self.connector_scheduler = KvtoolConnectorScheduler(setup, vllm_config)
        elif role == KVConnectorRole.WORKER:
            self.connector_worker = KvtoolConnectorWorker(setup)

    # ------------------------------------------------------------------ roles

    def _scheduler(self) -> KvtoolConnectorScheduler:
        if self.connector_scheduler is None:
            raise RuntimeError("a scheduler hook was called on a worker-role KvtoolConnector")
        return self.connector_scheduler

    def _worker(self) -> KvtoolConnectorWorker:
        if self.connector_worker is None:
            raise RuntimeError("a worker hook was called on a scheduler-role KvtoolConnector")
        return self.connector_worker

    @property
    def manager(self) -> LazyOffloadManager | None:
        """The scheduler side's manager, once the block pool is bound (tests and benchmarks
        read its counters)."""
        side = self.connector_scheduler
        return side.manager if side is not None else None

    @property
    def engine(self) -> TransferEngine | None:
        """The worker side's transfer engine, once vLLM registered its KV caches."""
        side = self.connector_worker
        return side.engine if side is not None else None

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

    # Hooks later releases added that stay at vLLM's defaults, each right for this
    # connector (base.py at https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/
    # distributed/kv_transfer/kv_connector/v1/base.py):
    # - supports_sleep_mode (0.33, True) and unregister_kv_caches / restore_kv_caches
    #   (0.33, no-ops): the workers copy through vLLM's own KV views, which keep their
    #   addresses across sleep and the extensible KV cache's release; vLLM
    #   synchronizes the device before it unmaps the memory, so no copy is in flight
    #   then (vllm/v1/worker/gpu_worker.py, vllm/utils/extensible_tensor.py).
    # - kv_cache_access (0.34, IN_PROCESS): torch copies in this process; nothing is
    #   registered with an RDMA engine or exported to another process.
    # - supports_lookahead_block_hashes (0.34, False): host entries are keyed by the
    #   plain prefix-cache hashes of full blocks, so vLLM keeps those.

    # ================================================================== scheduler

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        self._scheduler().bind_gpu_block_pool(gpu_block_pool)

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        return self._scheduler().get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(
        self, request: Any, blocks: Any, num_external_tokens: int
    ) -> None:
        self._scheduler().update_state_after_alloc(request, blocks, num_external_tokens)

    def may_load_async(self, request: Any) -> bool:
        """vLLM 0.34+ (``--max-num-inflight-kv-loads``): whether a host hit may load
        while the running batch is full (see ``KvtoolConnectorScheduler.may_load_async``).
        Older releases never call it."""
        return self._scheduler().may_load_async(request)

    def build_connector_meta(self, scheduler_output: Any) -> KvtoolConnectorMetadata:
        return self._scheduler().build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: Any) -> None:
        self._scheduler().update_connector_output(connector_output)

    def request_finished(
        self, request: Any, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self._scheduler().request_finished(request)

    def reset_cache(self) -> bool:
        """vLLM's ``reset_prefix_cache(reset_connector=True)``, also run by
        ``pause_generation(clear_cache=True)`` and ``sleep(level>=1)``: forget the
        host store (see :meth:`LazyOffloadManager.reset`). True: it always succeeds."""
        return self._scheduler().reset_cache()

    def has_pending_push_work(self) -> bool:
        return self._scheduler().has_pending_push_work()

    def take_events(self) -> Iterable[KVCacheEvent]:
        return self._scheduler().take_events()

    def get_kv_connector_stats(self) -> KvtoolConnectorStats | None:
        """Scheduler: what the manager counted since the last call (None if nothing).
        Workers report nothing: they decide nothing."""
        side = self.connector_scheduler
        return side.get_stats() if side is not None else None

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
        self._worker().register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        # Called before this step's forward, which must wait for the last step's copies,
        # and before its loads: rescued blocks are copied before either writes them.
        worker = self._worker()
        worker.fence()
        if isinstance(connector_metadata, KvtoolConnectorMetadata):
            worker.start_rescues(connector_metadata)

    def _bound_metadata(self) -> KvtoolConnectorMetadata | None:
        # The base class's own slot, read directly: this runs twice per step, and
        # has_connector_metadata() plus _get_connector_metadata() read the same.
        meta = self._connector_metadata
        return meta if isinstance(meta, KvtoolConnectorMetadata) else None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._bound_metadata()
        if meta is not None:
            # Pipelined per layer only when the forward will ask for each layer.
            self._worker().start_load(meta, per_layer=forward_calls_layer_hooks(forward_context))

    def wait_for_layer_load(self, layer_name: str) -> None:
        # vLLM calls it before the layer's attention reads its KV; it queues a device
        # wait for that layer's copies only (kvtool.connector.transfer).
        self._worker().wait_for_layer_load(layer_name)

    def finish_forward(self) -> None:
        # Model runner v2, right after the forward: the rest of this step's loads.
        self._worker().finish_forward()

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        return  # whole blocks are copied after the forward, in wait_for_save

    def wait_for_save(self) -> None:
        meta = self._bound_metadata()
        if meta is not None:
            self._worker().start_store(meta)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        # Nothing is ever sent on a request's behalf: blocks are never held for a store.
        return None, self._worker().get_finished()

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker().get_block_ids_with_load_errors()

    def build_connector_worker_meta(self) -> KvtoolWorkerMetadata | None:
        return self._worker().build_connector_worker_meta()

    # ================================================================== both

    def shutdown(self) -> None:
        if self.connector_worker is not None:
            self.connector_worker.shutdown()
        if self.connector_scheduler is not None:
            self.connector_scheduler.shutdown()
