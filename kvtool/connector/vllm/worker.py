"""The connector's worker side (one per rank): the transfer engine over vLLM's KV tensors.

``register_kv_caches`` builds the :class:`~kvtool.connector.transfer.TransferEngine`
over this rank's host arena (one memfd per host, :mod:`kvtool.connector.host_arena`);
``fence`` (at ``bind_connector_metadata``) orders the next forward after the
previous step's copies; ``start_rescues`` (there too) copies the blocks this
step's scheduling pass recycled before the policy released them, ahead of the
loads and the forward that will overwrite them; ``start_load`` loads hits
before the forward; ``wait_for_save`` copies released blocks after the forward
that computed them;
``build_connector_worker_meta`` reports finished jobs, and ``get_finished``
the requests whose asynchronous load (``kvtool.load_async``) is done.

Synchronous loads (``kvtool.load_async=false``) feed this step's forward. On
CUDA they are pipelined per layer when the forward will call
``wait_for_layer_load`` before each attention layer reads its KV: vLLM 0.32
calls it from the ``maybe_transfer_kv_layer`` decorator of
``unified_attention_with_output`` and ``unified_mla_attention_with_output``
(every attention backend, MLA included, and layers that share another's KV
cache, under their own name), only when that layer has attention metadata
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/model_executor/layers/attention/kv_transfer_utils.py).
A full CUDA graph replays the forward without running Python, so the hook is
not called; vLLM says so in ``requires_piecewise_for_cudagraph``
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/kv_transfer/kv_connector/v1/base.py),
and piecewise graphs run attention eagerly between the pieces. Hence
:func:`forward_calls_layer_hooks`: per-layer waits only when the forward
context that ``start_load_kv`` receives has attention metadata and is not a
``FULL`` graph (model runner v2 starts a full graph's loads outside the
forward, with an empty context, which reads as "no hooks"), and only once
every registered layer has called the hook in some forward: a layer whose
KV is read by an op without the decorator (vLLM's Mamba and linear-attention
ops have none) never does, so its model is never pipelined. Otherwise the
forward waits for the whole load up front, as before. The order in which the
layers first asked is the order later loads copy them in, so the layer a
forward reads first is copied first whatever order vLLM registered them in.
The first hook after the forward joins the whole load (``finish_forward`` on model runner v2,
``wait_for_save`` or ``get_finished`` on v1, whichever comes first), before a
speculative drafter or the next step; see :mod:`kvtool.connector.transfer` for
the ordering argument.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from vllm.config import CUDAGraphMode

from kvtool.connector.config import HostArenaMode
from kvtool.connector.manager import JobReport
from kvtool.connector.transfer import LoadWait, TransferEngine, layer_segments
from kvtool.connector.vllm.common import (
    ConnectorSetup,
    KvtoolConnectorMetadata,
    KvtoolWorkerMetadata,
)

if TYPE_CHECKING:
    import torch

    from kvtool.connector.host_arena import HostArena

logger = logging.getLogger("kvtool.connector")


def forward_calls_layer_hooks(forward_context: Any) -> bool:
    """Whether the forward that ``start_load_kv`` precedes will call ``wait_for_layer_load``
    before each attention layer that reads KV (see the module docstring)."""
    if forward_context is None or forward_context.attn_metadata is None:
        return False
    return bool(forward_context.cudagraph_runtime_mode != CUDAGraphMode.FULL)


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
        # Registered layers that have not yet called wait_for_layer_load: per-layer
        # waits would leave their reads unordered, so loads stay whole until it is empty.
        self._layers_never_asked: set[str] = set()
        self._first_asked: list[str] = []  # registered layers in the order they first asked

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
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
        # Checked before the arena's collective, so a bad layout fails on its own rank.
        split = layer_segments(kv_caches, block_dim)
        if split.block_bytes != layout.block_bytes:
            raise ValueError(
                f"KV tensors hold {split.block_bytes} bytes per block, the KV cache "
                f"config says {layout.block_bytes}: unsupported layout"
            )
        self.arena = self._allocate_arena(self.setup.num_slots * split.block_bytes,
                                          first.is_cuda)
        self.engine = TransferEngine(split.segments, self.setup.num_slots, split.layers,
                                     arena=self.arena.tensor)
        self._layers_never_asked = set(kv_caches)

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

    def start_rescues(self, meta: KvtoolConnectorMetadata) -> None:
        """Before this step's loads and forward: copy the rescued blocks
        (``StoreJob.before_forward``), which this step's pass handed to other
        requests, while they still hold the KV the manager buffered. The loads
        wait for them (a load's stream waits for the store stream) and so does
        the forward (a second fence)."""
        rescues = [job for job in meta.store_jobs if job.before_forward]
        if not rescues:
            return
        engine = self._engine()
        for job in rescues:
            engine.submit_store(job)
        engine.fence()

    def start_load(self, meta: KvtoolConnectorMetadata, *, per_layer: bool = False) -> None:
        """Submit the step's loads. Synchronous ones feed this step's forward: with
        ``per_layer`` (the forward calls the hooks), once every layer has asked for
        itself, each layer's readers wait for that layer (``wait_for_layer_load``);
        else the forward waits for all of them up front. An asynchronous one's
        request waits in the scheduler instead, so nothing waits for it."""
        if not meta.load_jobs:
            return
        engine = self._engine()
        per_layer = per_layer and not self._layers_never_asked
        sync_wait = LoadWait.PER_LAYER if per_layer else LoadWait.WHOLE
        jobs = meta.load_jobs
        if meta.load_requests:  # synchronous loads first: the forward waits for them only
            jobs = sorted(jobs, key=lambda job: job.job_id in meta.load_requests)
        for job in jobs:
            self._load_blocks[job.job_id] = job.block_ids
            request = meta.load_requests.get(job.job_id)
            if request is None:
                engine.submit_load(job, wait=sync_wait)
                continue
            self._load_requests[job.job_id] = request
            engine.submit_load(job, wait=LoadWait.NONE)  # after the flushed sync loads
        engine.flush_loads()
        # A load's key check happens at submit, so failures are known now and
        # vLLM can recompute those blocks in this very step (or, for an
        # asynchronous load, learns of them with the request's get_finished).
        self._collect(engine)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Before ``layer_name``'s attention reads its KV: the current stream waits for
        that layer's part of this step's per-layer loads (nothing to do otherwise)."""
        if self._layers_never_asked and layer_name in self._layers_never_asked:
            self._layers_never_asked.discard(layer_name)
            self._first_asked.append(layer_name)
            if not self._layers_never_asked and self.engine is not None:
                # Every layer asked once, so loads go per layer from the next step
                # on: copy them in the order this forward read them.
                self.engine.order_layers(self._first_asked)
        if self.engine is not None:
            self.engine.wait_for_layer(layer_name)

    def finish_forward(self) -> None:
        """The forward is queued: everything after it waits for the whole of this
        step's per-layer loads (layers never asked about, a drafter, the next step)."""
        if self.engine is not None:
            self.engine.join_loads()

    def start_store(self, meta: KvtoolConnectorMetadata) -> None:
        self.finish_forward()  # wait_for_save is model runner v1's first hook after the forward
        if not meta.store_jobs:
            return
        engine = self._engine()
        for job in meta.store_jobs:
            if not job.before_forward:  # rescues were copied before the forward
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
        self.finish_forward()  # model runner v1 calls it right after the forward
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
