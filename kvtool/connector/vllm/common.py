"""What both roles share: the messages between them and what each process derives
from vLLM's configs (settings, KV layout, host slot count, key fingerprint)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)

from kvtool.connector.config import ConnectorConfig
from kvtool.connector.manager import JobReport, LoadJob, StoreJob
from kvtool.connector.store import fingerprint

# --------------------------------------------------------------------------- messages


@dataclass
class KvtoolConnectorMetadata(KVConnectorMetadata):  # type: ignore[misc]
    """Scheduler -> workers for one step: blocks to store before the loads (rescues),
    to load before the forward, to store after it."""

    load_jobs: list[LoadJob] = field(default_factory=list)
    store_jobs: list[StoreJob] = field(default_factory=list)
    load_requests: dict[int, str] = field(default_factory=dict)
    """Load job id -> the request waiting for it (``kvtool.load_async``): workers
    report the request through ``get_finished`` once the job is done."""


@dataclass
class KvtoolWorkerMetadata(KVConnectorWorkerMetadata):  # type: ignore[misc]
    """Workers -> scheduler: finished jobs, one entry per (worker, job)."""

    reports: list[JobReport] = field(default_factory=list)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KvtoolWorkerMetadata:
        theirs = other.reports if isinstance(other, KvtoolWorkerMetadata) else []
        return KvtoolWorkerMetadata([*self.reports, *theirs])


# --------------------------------------------------------------------------- layout


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


@dataclass(frozen=True)
class ConnectorSetup:
    """Settings every process of one engine derives alike from vLLM's configs."""

    config: ConnectorConfig
    layout: KvLayout
    host_block_bytes: int
    num_slots: int
    """Host store slots: the same on every rank, and in the scheduler's index."""
    world_size: int
    fingerprint: str
    """Part of every host key: stored bytes are reused only by the same model and layout."""

    @classmethod
    def from_vllm(cls, vllm_config: Any, extra_config: Any, kv_cache_config: Any) -> ConnectorSetup:
        if not vllm_config.cache_config.enable_prefix_caching:
            raise ValueError(
                "kvtool's connector needs prefix caching (--enable-prefix-caching): "
                "buffered blocks are validated by their prefix-cache hashes"
            )
        config = ConnectorConfig.from_extra_config(extra_config)
        layout = KvLayout.from_kv_cache_config(kv_cache_config)
        layers_here = len(kv_cache_config.kv_cache_groups[0].layer_names)
        block_bytes = host_block_bytes(vllm_config, layout, layers_here)
        num_slots = config.host_capacity_bytes // block_bytes
        if num_slots < 1:
            raise ValueError(
                f"kvtool.host_capacity_bytes={config.host_capacity_bytes} holds no KV "
                f"block of {block_bytes} bytes (all layers, all ranks)"
            )
        world_size = int(vllm_config.parallel_config.world_size)
        model_config = vllm_config.model_config
        return cls(
            config=config,
            layout=layout,
            host_block_bytes=block_bytes,
            num_slots=num_slots,
            world_size=world_size,
            fingerprint=fingerprint(
                str(model_config.model),
                f"kv_bytes_per_block={block_bytes}",
                str(vllm_config.cache_config.cache_dtype),
                layout.block_size,
                str(model_config.dtype),
                f"world_size={world_size}",
            ),
        )
