"""The connector's worker side (one per rank): the transfer engine over vLLM's KV tensors.

``register_kv_caches`` builds the :class:`~kvtool.connector.transfer.TransferEngine`
over this rank's host arena (one memfd per host, :mod:`kvtool.connector.host_arena`);
``fence`` (at ``bind_connector_metadata``) orders the next forward after the
previous step's copies; ``start_load`` loads hits before the forward;
``wait_for_save`` copies released blocks after the forward that computed them;
``build_connector_worker_meta`` reports finished jobs, and ``get_finished``
the requests whose asynchronous load (``kvtool.load_async``) is done.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kvtool.connector.config import HostArenaMode
from kvtool.connector.manager import JobReport
from kvtool.connector.vllm.common import (
    ConnectorSetup,
    KvtoolConnectorMetadata,
    KvtoolWorkerMetadata,
)

if TYPE_CHECKING:
    import torch

    from kvtool.connector.host_arena import HostArena
    from kvtool.connector.transfer import TransferEngine

logger = logging.getLogger("kvtool.connector")


class KvtoolConnectorWorker:
    """Worker-side state of :class:`~kvtool.connector.vllm.KvtoolConnector`."""

    def __init__(self, setup: ConnectorSetup) -> None:
        self.setup = setup
        self.engine: TransferEngine | None = None
        self.arena: HostArena | None = None
        self._finished_reports: list[JobReport] = []
        self._load_blocks: dict[int, tuple[int, ...]] = {}
        self._load_errors: set[int] = set()
        self._load_requests: dict[int, str] = {}  # async load job id -> its request
        self._finished_recving: set[str] = set()

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        from kvtool.connector.transfer import TransferEngine, block_segments

        layout = self.setup.layout
        first = next(iter(kv_caches.values()))
        # The dimension that counts blocks: 0 on CPU ([blocks, heads, bs, 2*hs]),
        # 1 for layouts with K and V split up front ([2, blocks, ...]).
        block_dim = next(
            (d for d, size in enumerate(first.shape) if size == layout.num_blocks), None
        )
        if block_dim is None:
            raise ValueError(
                f"no dimension of the KV tensor {tuple(first.shape)} counts the "
                f"{layout.num_blocks} blocks vLLM allocated"
            )
        block_bytes = sum(int(segment.shape[1]) for kv in kv_caches.values()
                          for segment in block_segments(kv, block_dim))
        if block_bytes != layout.block_bytes:
            raise ValueError(
                f"KV tensors hold {block_bytes} bytes per block, the KV cache "
                f"config says {layout.block_bytes}: unsupported layout"
            )
        self.arena = self._allocate_arena(self.setup.num_slots * block_bytes, first.is_cuda)
        self.engine = TransferEngine.from_kv_caches(
            kv_caches, self.setup.num_slots, block_dim=block_dim, arena=self.arena.tensor)

    def _allocate_arena(self, nbytes: int, pinned: bool) -> HostArena:
        """This rank's host arena; with ``kvtool.host_arena=host`` a collective over the
        engine's ranks (every worker registers its KV caches once, at start-up)."""
        from kvtool.connector import host_arena
        from kvtool.connector.vllm.rendezvous import engine_rendezvous

        share_with = None
        if self.setup.config.host_arena is HostArenaMode.HOST:
            share_with, why_not = engine_rendezvous()
            if share_with is None:
                logger.info("kvtool host arena: a private arena of %d B per rank: %s",
                            nbytes, why_not)
        return host_arena.allocate(nbytes, share_with, page_aligned=pinned)

    def _engine(self) -> TransferEngine:
        if self.engine is None:
            raise RuntimeError("vLLM did not register its KV caches with the connector")
        return self.engine

    def fence(self) -> None:
        """Before this step's forward: it must not overwrite a block that a store of
        the previous step is still copying (the scheduler holds no blocks)."""
        if self.engine is not None:
            self.engine.fence()

    def start_load(self, meta: KvtoolConnectorMetadata) -> None:
        if not meta.load_jobs:
            return
        engine = self._engine()
        for job in meta.load_jobs:
            self._load_blocks[job.job_id] = job.block_ids
            request = meta.load_requests.get(job.job_id)
            if request is not None:
                self._load_requests[job.job_id] = request
            # A synchronous load feeds this step's forward, which must wait for it;
            # an asynchronous one's request waits in the scheduler instead.
            engine.submit_load(job, before_forward=request is None)
        # A load's key check happens at submit, so failures are known now and
        # vLLM can recompute those blocks in this very step (or, for an
        # asynchronous load, learns of them with the request's get_finished).
        self._collect(engine)

    def start_store(self, meta: KvtoolConnectorMetadata) -> None:
        if not meta.store_jobs:
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
            request = self._load_requests.pop(result.job_id, None)
            if request is not None:
                self._finished_recving.add(request)
            self._finished_reports.append(JobReport(result.job_id, result.ok))

    def get_finished(self) -> set[str] | None:
        """Requests whose asynchronous load finished (failed blocks are reported by
        :meth:`get_block_ids_with_load_errors` in the same pass, as vLLM requires)."""
        if self.engine is not None and self._load_requests and self.engine.has_pending():
            self._collect(self.engine)
        if not self._finished_recving:
            return None
        finished, self._finished_recving = self._finished_recving, set()
        return finished

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

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.wait_all()
