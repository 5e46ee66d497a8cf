"""Worker-side transfer engine: whole KV blocks between the engine's tensors and a host arena.

A block is opaque bytes: for every registered KV tensor, the slice at one block
index, whatever the attention backend packs inside it (on CPU, K and V share
the last dimension). Each tensor is viewed as one or more
*segments*, 2-D ``uint8`` views ``[num_blocks, bytes]``; the host arena holds,
per segment, ``[num_slots, bytes]``, so one slot is one block of every layer.

A block must be one dense run of bytes per layer: vLLM 0.32's layouts
LBHNC, LBNHC, BLHNC and BLNHC are (the order inside a block does not matter,
blocks are opaque); LHBNC and BHLNC split a block into one run per head and
are refused with a clear error.

Copies run over the widest integer view of the rows. On CUDA there is no
device staging and no index tensor: each run of consecutive engine blocks
that maps to consecutive host slots (the store index hands out consecutive
slots) is one non-blocking ``cudaMemcpyAsync`` per segment between the KV
tensor and the host arena, on a side stream. A store's stream waits for
the compute stream (the forward that computed the blocks); the next step's
compute stream waits for the store (:meth:`TransferEngine.fence`), so an
engine block that the scheduler recycles is not overwritten before its
copy read it. A load's stream waits for the compute stream and for
outstanding stores. Nothing on the step path synchronises the host;
:meth:`poll` reads events.

Loads on CUDA are issued layer by layer (:class:`LoadWait` says who waits):

- ``WHOLE``: the compute stream waits for the whole load before its next
  kernel (a forward that calls no per-layer hook, e.g. a full CUDA graph).
- ``PER_LAYER``: the step's synchronous loads are batched
  (:meth:`TransferEngine.flush_loads`): every job's copies of the first layer,
  one event, every job's copies of the next layer, one event, and so on, in
  the order the forward reads the layers (:meth:`TransferEngine.order_layers`;
  until told, the order they were registered in, which for vLLM is model order).
  Nothing waits up front. :meth:`TransferEngine.wait_for_layer`, which vLLM
  reaches from each attention layer right before it reads that layer's KV
  (``wait_for_layer_load``), makes the current stream wait for that layer's
  event only, so layer 0 attends while later layers still copy.
  :meth:`TransferEngine.join_loads` then makes the current stream wait for the
  last event.
- ``NONE``: nothing waits; the blocks are read only once :meth:`poll`
  reported the job (an asynchronous load: vLLM keeps its request out of the
  batch until then).

Why ``PER_LAYER`` never lets a kernel read a block before its copy wrote it:

1. The load stream first waits for everything already queued on the compute
   stream and on the store stream (a freshly allocated block may still be
   read by the previous forward or by a store).
2. In a forward that calls the hook, the only kernel that reads a layer's
   KV is its attention, and the hook runs right before it on the same
   stream, waiting for the event recorded after the last copy into that
   layer's memory. Layers that alias one tensor (vLLM's cross-layer KV
   sharing) share one event; a name the engine does not know waits for
   the whole load. Another request of the batch that hits a loaded block in
   vLLM's prefix cache reads it in the same attention, after the same wait.
   Other kernels of the forward do not touch loaded blocks: the KV-cache
   update, which runs before the hook, writes this step's new tokens, and they
   lie in blocks after the loaded ones (the scheduler never loads the block
   holding a prompt's last token, which vLLM always computes).
3. Layers never asked about (vLLM skips the hook for a layer without
   attention metadata; the adapter accepts one KV cache group only, for which
   vLLM builds metadata for every attention layer of a step or for none, and a
   forward with none is ``WHOLE``, point 4), later forwards (a
   speculative drafter, possibly a full CUDA graph) and the next step are
   covered by the join, which the connector runs at the first hook after the
   forward (``finish_forward``, ``get_finished``, ``wait_for_save``) and
   again in :meth:`fence` before the next one: each queues the wait after
   every kernel of the forward and before anything later. A step's layer
   events stay valid until the join, so a layer asked twice (micro-batches)
   waits both times; after it, the hook has nothing left to wait for.
4. When the connector cannot tell that the hooks will run, it asks for
   ``WHOLE`` instead (:mod:`kvtool.connector.vllm.worker`).

All CUDA work goes through a :class:`DeviceQueue` (:class:`CudaQueue`), so the
tests run this ordering on a stand-in without a GPU
(``tests/connector/lazy_streams.py``).

On CPU every load is synchronous and whole whatever the mode (below), so
per-layer waits cost one attribute check.

The host arena is exactly ``num_slots`` rows, given by the caller (a slice of
the host's shared memfd, :mod:`kvtool.connector.host_arena`) or allocated
here; on CUDA it is page-locked in place with ``cudaHostRegister`` rather
than taken from PyTorch's pinned allocator, which rounds sizes up to a
power of two.

On CPU a job is finished when ``submit_*`` returns, and its copies cover
every segment at once: segments that are equally shaped and evenly spaced
in one storage (vLLM's CPU layers are) are viewed as one
``[segments, blocks, row]`` NumPy array, and so is the arena. A job is one
slice assignment per run of consecutive blocks and slots, or one indexed
copy when it has many runs (:data:`MAX_SLICE_COPIES`). A load runs right
after a forward pass has pushed the copy code out of the CPU caches, where
each torch call costs ~25 µs (a few blocks' bytes cost less); NumPy's
paths are several times shorter, and one call covers every layer.

Loads check every slot's recorded key against the job's key and fail the job
(nothing copied) on any mismatch, so a block is never served to the wrong
hash, model or layout.

torch and NumPy are imported here only (optional dependency ``kvtool[connector]``).
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import torch

from kvtool.connector import host_arena

if TYPE_CHECKING:
    # Only CPU copies need NumPy at run time (through Tensor.numpy()), so the
    # CUDA path imports on an image without it.
    import numpy.typing as npt


class TransferJob(Protocol):
    """Shape of :class:`kvtool.connector.manager.StoreJob` / ``LoadJob``."""

    @property
    def job_id(self) -> int: ...
    @property
    def block_ids(self) -> tuple[int, ...]: ...
    @property
    def slots(self) -> tuple[int, ...]: ...
    @property
    def keys(self) -> tuple[Hashable, ...]: ...


def is_dense(tensor: torch.Tensor) -> bool:
    """True when the elements of ``tensor`` fill one gap-free run of memory, in any
    dimension order (vLLM's per-layer views permute [H, N, C] inside a block)."""
    expected = 1
    for size, stride in sorted(
        ((size, stride) for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
         if size != 1),
        key=lambda pair: pair[1],
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def block_segments(tensor: torch.Tensor, block_dim: int = 0) -> list[torch.Tensor]:
    """2-D ``uint8`` views ``[num_blocks, bytes_per_block]`` covering ``tensor``.

    ``block_dim`` is the dimension indexing blocks: 0 for vLLM 0.32's per-layer
    views ``[B, H, N, C]`` (every layout), 1 for older ``[2, num_blocks, ...]``
    layouts (one segment per leading index). A block must be one dense run of
    bytes (:func:`is_dense`); its internal order is kept as it is in memory.
    """
    if not 0 <= block_dim < tensor.dim():
        raise ValueError(f"block_dim {block_dim} out of range for shape {tuple(tensor.shape)}")
    leading = tensor.shape[:block_dim]
    num_blocks = tensor.shape[block_dim]
    segments = []
    for index in _indices(tuple(leading)):
        part = tensor[index] if index else tensor
        inner = part[0] if num_blocks else part
        if not is_dense(inner):
            raise ValueError(
                f"a KV block of shape {tuple(inner.shape)} with strides {inner.stride()} "
                "is not one dense run of bytes (vLLM layouts LHBNC and BHLNC split it "
                "per head); use a layer- or block-outermost layout such as LBHNC"
            )
        row_bytes = inner.numel() * inner.element_size()
        # as_strided keeps the engine's block stride (blocks may be padded or
        # interleaved with other layers) and never copies.
        flat = part.as_strided((num_blocks, inner.numel()), (part.stride(0), 1),
                               inner.storage_offset())
        segments.append(flat.view(torch.uint8).view(num_blocks, row_bytes))
    return segments


class LayerSegments(NamedTuple):
    """Every registered layer's segments (:func:`layer_segments`)."""

    segments: list[torch.Tensor]
    """In sorted layer-name order: the host arena's layout, stable across runs."""
    layers: dict[str, list[int]]
    """Each layer's segment indices, in the order the layers were given."""

    @property
    def block_bytes(self) -> int:
        """Bytes of one block over every segment: one host arena row."""
        return sum(int(segment.shape[1]) for segment in self.segments)


def layer_segments(kv_caches: Mapping[str, torch.Tensor], block_dim: int = 0) -> LayerSegments:
    """:func:`block_segments` of every layer tensor, and which are whose."""
    segments: list[torch.Tensor] = []
    indices: dict[str, list[int]] = {}
    for name in sorted(kv_caches):
        own = block_segments(kv_caches[name], block_dim)
        indices[name] = list(range(len(segments), len(segments) + len(own)))
        segments += own
    return LayerSegments(segments, {name: indices[name] for name in kv_caches})


def _indices(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for size in shape:
        out = [(*prefix, i) for prefix in out for i in range(size)]
    return out


def stacked_view(views: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One ``[len(views), rows, width]`` view aliasing every 2-D view in ``views``, or
    None unless they are equally shaped, strided and typed and evenly spaced upwards
    in one storage."""
    first = views[0]
    if len(views) == 1:
        return first.unsqueeze(0)
    storage = first.untyped_storage().data_ptr()
    if any(
        v.shape != first.shape or v.stride() != first.stride() or v.dtype != first.dtype
        or v.untyped_storage().data_ptr() != storage
        for v in views
    ):
        return None
    gap, item = views[1].data_ptr() - first.data_ptr(), first.element_size()
    if gap <= 0 or gap % item:
        return None
    try:  # as_strided refuses a view reaching past the storage
        stacked = first.as_strided((len(views), *first.shape), (gap // item, *first.stride()))
    except RuntimeError:
        return None
    if any(stacked[i].data_ptr() != v.data_ptr() for i, v in enumerate(views)):
        return None
    return stacked


def _numpy_pairs(
    engine: Sequence[torch.Tensor], host: Sequence[torch.Tensor]
) -> list[tuple[npt.NDArray[Any], npt.NDArray[Any]]]:
    """NumPy views ``[segments, rows, width]`` of engine segments and arena, paired:
    one pair for all segments when both sides stack, else one pair per segment."""
    stacked_engine, stacked_host = stacked_view(engine), stacked_view(host)
    if stacked_engine is not None and stacked_host is not None:
        return [(stacked_engine.numpy(), stacked_host.numpy())]
    return [(e.unsqueeze(0).numpy(), h.unsqueeze(0).numpy())
            for e, h in zip(engine, host, strict=True)]


Run = tuple[int, int, int]
"""``(first block, first slot, length)``: see :func:`joint_runs`."""


MAX_SLICE_COPIES = 8
"""Up to this many runs a CPU copy is one NumPy slice assignment per run, beyond it
one indexed copy: in the engine, right after a forward pass, a 4-block load of
scattered blocks took 34 us as four slice copies and 52 us as one indexed copy
(the indexing machinery is the colder, longer path); warm, a slice copy costs
about 1 us and an indexed copy about 7."""


def joint_runs(block_ids: Sequence[int], slots: Sequence[int]) -> list[Run]:
    """``(first block, first slot, length)`` for each stretch in which block ids and
    slots both count up by one."""
    runs: list[Run] = []
    block0 = slot0 = length = 0
    for block, slot in zip(block_ids, slots, strict=True):
        if length and block == block0 + length and slot == slot0 + length:
            length += 1
            continue
        if length:
            runs.append((block0, slot0, length))
        block0, slot0, length = block, slot, 1
    if length:
        runs.append((block0, slot0, length))
    return runs


_WIDE_DTYPES = (torch.int64, torch.int32, torch.int16)


def widest_view(segment: torch.Tensor) -> torch.Tensor:
    """The same bytes viewed with the widest integer element that tiles every row.

    torch's CPU ``index_select`` copies element by element; over 8-byte
    elements it runs at memcpy speed, over bytes several times slower.
    """
    for dtype in _WIDE_DTYPES:
        width = torch.empty((), dtype=dtype).element_size()
        aligned = (
            segment.shape[1] % width == 0
            and segment.stride(0) % width == 0
            and segment.storage_offset() % width == 0
        )
        if aligned:
            return segment.view(dtype)
    return segment


class LoadWait(enum.Enum):
    """Who waits for a load's copies on CUDA (see the module docstring)."""

    WHOLE = "whole"
    """The current stream waits for the whole load before its next kernel."""
    PER_LAYER = "per_layer"
    """Batched until :meth:`TransferEngine.flush_loads`; readers of a layer wait
    with :meth:`TransferEngine.wait_for_layer`, everything else after
    :meth:`TransferEngine.join_loads`."""
    NONE = "none"
    """Nothing waits: read the blocks only once :meth:`TransferEngine.poll`
    reported the job."""


class DeviceQueue(Protocol):
    """The streams, events and copies the engine queues work with.

    :class:`CudaQueue` is the real one. Streams have ``wait_stream(stream)`` and
    ``wait_event(event)``; events have ``record(stream)``, ``query()`` and
    ``synchronize()``, as ``torch.cuda.Stream`` and ``torch.cuda.Event``.
    """

    def new_stream(self) -> Any: ...
    def current_stream(self) -> Any: ...
    def on(self, stream: Any) -> AbstractContextManager[Any]:
        """Work queued inside the block goes to ``stream``."""
        ...
    def new_event(self) -> Any: ...
    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Queue ``dst <- src`` on the current stream."""
        ...


class CudaQueue:
    """:class:`DeviceQueue` over CUDA streams and events on one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def new_stream(self) -> Any:
        return torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    def current_stream(self) -> Any:
        return torch.cuda.current_stream(self.device)

    def on(self, stream: Any) -> AbstractContextManager[Any]:
        return torch.cuda.stream(stream)

    def new_event(self) -> Any:
        return torch.cuda.Event()  # type: ignore[no-untyped-call]

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src, non_blocking=True)


class TransferResult(NamedTuple):
    job_id: int
    ok: bool
    error: str = ""


@dataclass
class _Pending:
    job_id: int
    event: Any  # the event after its last copy on CUDA; None when already complete
    ok: bool = True
    error: str = ""


class TransferEngine:
    """Copies whole blocks between KV segments and a host arena of ``num_slots`` slots.

    ``arena``: exactly ``num_slots * block_bytes`` contiguous ``uint8`` CPU bytes
    (:func:`kvtool.connector.host_arena.allocate`); a private one is allocated when omitted.

    Invariants: a slot's recorded key is set when a store into it is submitted,
    and a load reads only slots whose recorded key equals the job's key; every
    submitted job is reported by :meth:`poll` exactly once.
    """

    def __init__(
        self,
        segments: Sequence[torch.Tensor],
        num_slots: int,
        layers: Mapping[str, Sequence[int]] | None = None,
        *,
        arena: torch.Tensor | None = None,
        queue: DeviceQueue | None = None,
    ) -> None:
        """``layers`` maps each layer name to the indices of its segments, in the
        order the forward reads the layers (default: one layer per segment, named
        by its index). ``arena`` is the host memory to use (exactly ``num_slots``
        rows, see :mod:`kvtool.connector.host_arena`); without it the engine
        allocates its own. ``queue`` replaces CUDA's streams and events: the engine
        then queues its copies as on CUDA whatever the device (tests use a stand-in)."""
        if not segments:
            raise ValueError("no KV segments registered")
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        self.device = segments[0].device
        num_blocks = {s.shape[0] for s in segments}
        if len(num_blocks) != 1 or any(s.device != self.device for s in segments):
            raise ValueError("KV segments differ in block count or device")
        for seg in segments:
            if seg.dtype != torch.uint8 or seg.dim() != 2 or seg.stride(1) != 1:
                raise ValueError("segments must be 2-D uint8 views (see block_segments)")
        self.segments = list(segments)
        self.num_slots = num_slots
        self.num_blocks = int(segments[0].shape[0])
        self.is_cuda = self.device.type == "cuda"
        # Exactly the asked bytes (page-locked by registration on CUDA), viewed
        # per segment; equal widths stack like the segments.
        widths = [int(s.shape[1]) for s in self.segments]
        arena_bytes = num_slots * sum(widths)
        if arena is None:  # page-aligned on CUDA, so registration pins exactly these pages
            arena = host_arena.private(arena_bytes, page_aligned=self.is_cuda).tensor
        elif (arena.dtype != torch.uint8 or arena.dim() != 1 or arena.device.type != "cpu"
              or arena.numel() != arena_bytes or not arena.is_contiguous()):
            raise ValueError(
                f"the host arena must be {arena_bytes} contiguous uint8 bytes on the CPU, "
                f"got {arena.dtype} {tuple(arena.shape)} on {arena.device}"
            )
        self._arena_storage = arena
        if self.is_cuda:
            _register_host_memory(self, self._arena_storage)
        if len(set(widths)) == 1:
            whole = self._arena_storage.view(len(widths), num_slots, widths[0])
            self.arena = list(whole.unbind(0))
        else:
            offsets = [0]
            for width in widths:
                offsets.append(offsets[-1] + num_slots * width)
            self.arena = [
                self._arena_storage[start:start + num_slots * width].view(num_slots, width)
                for start, width in zip(offsets, widths, strict=False)
            ]
        # Copies run over wide views of the same memory (see widest_view).
        self._wide = [widest_view(s) for s in self.segments]
        self._wide_arena = [
            host.view(wide.dtype) for host, wide in zip(self.arena, self._wide, strict=True)
        ]
        if not self.is_cuda:
            self._cpu_pairs = _numpy_pairs(self._wide, self._wide_arena)
        self.slot_keys: list[Hashable | None] = [None] * num_slots
        self._pending: list[_Pending] = []
        self._stores_in_flight: list[Any] = []  # events the next forward must wait for
        self._queue: DeviceQueue | None = (
            queue if queue is not None else CudaQueue(self.device) if self.is_cuda else None)
        if self._queue is not None:
            self._store_stream = self._queue.new_stream()
            self._load_stream = self._queue.new_stream()
        self._groups, self._group_of = _layer_groups(self.segments, layers)
        # The step's synchronous loads (LoadWait.PER_LAYER) whose copies flush_loads
        # has not queued yet: (record, runs).
        self._layered: list[tuple[_Pending, list[Run]]] = []
        # Until join_loads: each layer group's event, and the event after the last copy.
        self._layer_events: list[Any] = []
        self._loads_done: Any = None

    @classmethod
    def from_kv_caches(
        cls,
        kv_caches: Mapping[str, torch.Tensor],
        num_slots: int,
        block_dim: int = 0,
        *,
        arena: torch.Tensor | None = None,
        queue: DeviceQueue | None = None,
    ) -> TransferEngine:
        """Segments of every registered layer tensor, in a stable (sorted-name) order.

        Layers that share one storage (vLLM's CPU backend) are still separate
        segments: each layer's slice of a block is its own run of bytes. Loads
        copy the layers in the order of ``kv_caches`` (vLLM registers them in
        model order) until :meth:`order_layers` gives the order the forward reads them.
        """
        split = layer_segments(kv_caches, block_dim)
        return cls(split.segments, num_slots, split.layers, arena=arena, queue=queue)

    @property
    def block_bytes(self) -> int:
        """Bytes of one block across every segment: the host store's unit."""
        return sum(int(s.shape[1]) for s in self.segments)

    def layout(self) -> str:
        """A description of the segment layout, for the store key fingerprint."""
        widths = ",".join(str(int(s.shape[1])) for s in self.segments)
        return f"segments[{widths}]"

    # ------------------------------------------------------------------ jobs

    def submit_store(self, job: TransferJob) -> None:
        """Gather ``job.block_ids`` into ``job.slots``; on CUDA ordered after the
        work already queued on the current stream (the forward that computed them)."""
        record = _Pending(job.job_id, None)
        try:
            self._check_job(job)
            for slot, key in zip(job.slots, job.keys, strict=True):
                self.slot_keys[slot] = key
            if self._queue is not None:
                self._flush_if_batched()
                record.event = self._store_cuda(joint_runs(job.block_ids, job.slots))
                self._stores_in_flight.append(record.event)
            else:
                self._copy_cpu(job.block_ids, job.slots, load=False)
        except (RuntimeError, ValueError, IndexError) as exc:
            for slot in job.slots:
                if 0 <= slot < self.num_slots:
                    self.slot_keys[slot] = None
            record.ok, record.error = False, f"store job {job.job_id}: {exc}"
        self._pending.append(record)

    def submit_load(self, job: TransferJob, *, wait: LoadWait = LoadWait.WHOLE) -> None:
        """Scatter ``job.slots`` into ``job.block_ids`` after checking every slot's key.

        On CUDA the load is ordered after the work already queued on the current
        stream, and ``wait`` says what waits for it (:class:`LoadWait`): with
        ``PER_LAYER`` the copies are queued by the next :meth:`flush_loads`. On CPU
        the copies are done when this returns, whatever ``wait`` says.
        """
        record = _Pending(job.job_id, None)
        try:
            self._check_job(job)
            recorded = tuple(map(self.slot_keys.__getitem__, job.slots))
            if recorded != tuple(job.keys):  # one C-level compare in the usual case
                wrong = [
                    slot for slot, have, want in zip(job.slots, recorded, job.keys, strict=True)
                    if have != want
                ]
                raise ValueError(f"host slots {wrong[:8]} do not hold the requested blocks")
            if self._queue is None:
                self._copy_cpu(job.block_ids, job.slots, load=True)
            elif wait is LoadWait.PER_LAYER:
                self._layered.append((record, joint_runs(job.block_ids, job.slots)))
                return  # flush_loads appends the record once its copies are queued
            else:
                self._flush_if_batched()
                _, record.event = self._load_cuda(joint_runs(job.block_ids, job.slots),
                                                  per_layer=False)
                if wait is LoadWait.WHOLE:
                    self._queue.current_stream().wait_event(record.event)
        except (RuntimeError, ValueError, IndexError) as exc:
            record.ok, record.error = False, f"load job {job.job_id}: {exc}"
        self._pending.append(record)

    def flush_loads(self) -> None:
        """Queue the copies of the ``PER_LAYER`` loads submitted since the last flush:
        every job's blocks of the first layer, an event, the next layer, an event...
        Until :meth:`join_loads`, :meth:`wait_for_layer` waits for these events."""
        if not self._layered or self._queue is None:
            return
        batch, self._layered = self._layered, []
        # One batch of layer events at a time: an earlier one is joined first.
        self.join_loads()
        runs = [run for _, job_runs in batch for run in job_runs]
        try:
            self._layer_events, self._loads_done = self._load_cuda(runs, per_layer=True)
        except (RuntimeError, ValueError, IndexError) as exc:
            # Whatever was queued is waited for as a whole; vLLM recomputes the blocks.
            done = self._queue.new_event()
            done.record(self._load_stream)
            self._layer_events, self._loads_done = [done] * len(self._groups), done
            for record, _ in batch:
                record.ok, record.error = False, f"load job {record.job_id}: {exc}"
        for record, _ in batch:
            record.event = self._loads_done
            self._pending.append(record)

    def wait_for_layer(self, layer_name: str) -> None:
        """Make the current stream wait for the copies into ``layer_name``'s KV (every
        layer sharing its memory included) of the flushed ``PER_LAYER`` loads, not for
        the other layers'. A name the engine does not know waits for the whole load.
        Queues a device wait only; a no-op when no such load awaits its join."""
        if self._loads_done is None:
            if not self._layered:
                return
            self.flush_loads()
        assert self._queue is not None  # only queued loads set _loads_done
        group = self._group_of.get(layer_name)
        event = self._loads_done if group is None else self._layer_events[group]
        self._queue.current_stream().wait_event(event)

    def order_layers(self, names: Sequence[str]) -> None:
        """Copy layer groups in the order of their first name in ``names`` (the order
        the forward asked for them), then the groups no name reaches, as before.

        Per-layer pipelining gains most when the layer read first is copied first;
        registration order is only a guess at the forward's. Only between batches:
        a flushed batch's layer events are indexed by the current order."""
        if self._layered or self._loads_done is not None:
            raise RuntimeError("layers can be reordered only while no per-layer load is queued")
        order: list[int] = []
        for name in names:
            group = self._group_of.get(name)
            if group is not None and group not in order:
                order.append(group)
        order += [g for g in range(len(self._groups)) if g not in order]
        new_index = {old: new for new, old in enumerate(order)}
        self._groups = [self._groups[old] for old in order]
        self._group_of = {name: new_index[g] for name, g in self._group_of.items()}

    def join_loads(self) -> None:
        """Make the current stream wait for the whole of the flushed ``PER_LAYER``
        loads, and forget their layer events (see the module docstring, point 3)."""
        if self._layered:
            self.flush_loads()  # joins the previous batch, then queues this one
        if self._loads_done is None:
            return
        assert self._queue is not None
        self._queue.current_stream().wait_event(self._loads_done)
        self._layer_events, self._loads_done = [], None

    def _flush_if_batched(self) -> None:
        # Work queued after a batch of PER_LAYER loads must come after its copies
        # on the load stream, as it was submitted after them.
        if self._layered:
            self.flush_loads()

    def poll(self) -> list[TransferResult]:
        """Jobs finished since the last poll, in submission order of completion checks."""
        self._flush_if_batched()
        if not self._pending:
            return []
        done, waiting = [], []
        for record in self._pending:
            if record.event is None or record.event.query():
                done.append(TransferResult(record.job_id, record.ok, record.error))
            else:
                waiting.append(record)
        self._pending = waiting
        return done

    def wait_all(self) -> list[TransferResult]:
        """Block until every submitted job is finished, then report them."""
        self._flush_if_batched()
        for record in self._pending:
            if record.event is not None:
                record.event.synchronize()
        return self.poll()

    def has_pending(self) -> bool:
        return bool(self._pending or self._layered)

    def fence(self) -> None:
        """Before a forward: make the current (compute) stream wait for every store
        still copying, so it cannot overwrite a block before its store read it, and
        join any ``PER_LAYER`` load not joined yet. Queues device waits only; never
        blocks the host. A no-op on CPU, where copies are done at submit."""
        if self._queue is None:
            return
        self.join_loads()
        if not self._stores_in_flight:
            return
        current = self._queue.current_stream()
        for event in self._stores_in_flight:
            current.wait_event(event)
        self._stores_in_flight = []

    @property
    def load_stream(self) -> Any:
        """The side stream loads are queued on (None on CPU): benchmarks time it."""
        return self._load_stream if self._queue is not None else None

    # ------------------------------------------------------------------ CPU

    def _copy_cpu(self, block_ids: Sequence[int], slots: Sequence[int], load: bool) -> None:
        """Copy host ``slots[i]`` into engine ``block_ids[i]`` (``load``) or back, now.

        Indices were range-checked by :meth:`_check_job` (NumPy would wrap negative ones).
        """
        if not slots:
            return
        runs = joint_runs(block_ids, slots)
        if len(runs) <= MAX_SLICE_COPIES:
            for engine, host in self._cpu_pairs:
                for block, slot, n in runs:
                    if load:
                        engine[:, block:block + n] = host[:, slot:slot + n]
                    else:
                        host[:, slot:slot + n] = engine[:, block:block + n]
            return
        blocks, rows = list(block_ids), list(slots)
        for engine, host in self._cpu_pairs:
            if load:
                engine[:, blocks] = host[:, rows]
            else:
                host[:, rows] = engine[:, blocks]

    # ------------------------------------------------------------------ CUDA

    def _store_cuda(self, runs: list[Run]) -> Any:
        assert self._queue is not None
        queue, stream = self._queue, self._store_stream
        stream.wait_stream(queue.current_stream())
        with queue.on(stream):
            for seg, host in zip(self._wide, self._wide_arena, strict=True):
                for block, slot, n in runs:
                    queue.copy(host[slot:slot + n], seg[block:block + n])
            event = queue.new_event()
            event.record(stream)
        return event

    def _load_cuda(self, runs: list[Run], per_layer: bool) -> tuple[list[Any], Any]:
        """Queue the copies of ``runs`` layer group by layer group on the load stream:
        (one event per group when ``per_layer``, else none; the event after the last)."""
        assert self._queue is not None
        queue, stream = self._queue, self._load_stream
        stream.wait_stream(queue.current_stream())
        # A block being loaded into may be one a store of the previous step still reads.
        stream.wait_stream(self._store_stream)
        layer_events = []
        with queue.on(stream):
            for group in self._groups:
                for index in group:
                    seg, host = self._wide[index], self._wide_arena[index]
                    for block, slot, n in runs:
                        queue.copy(seg[block:block + n], host[slot:slot + n])
                if per_layer:
                    event = queue.new_event()
                    event.record(stream)
                    layer_events.append(event)
            if not per_layer:
                done = queue.new_event()
                done.record(stream)
                return layer_events, done
        return layer_events, layer_events[-1]

    def _check_job(self, job: TransferJob) -> None:
        if not len(job.block_ids) == len(job.slots) == len(job.keys):
            raise ValueError("block_ids, slots and keys differ in length")
        if not job.slots:
            return
        if min(job.slots) < 0 or max(job.slots) >= self.num_slots:
            bad = [s for s in job.slots if not 0 <= s < self.num_slots]
            raise ValueError(f"slots {bad[:8]} outside the arena of {self.num_slots}")
        if min(job.block_ids) < 0 or max(job.block_ids) >= self.num_blocks:
            bad = [b for b in job.block_ids if not 0 <= b < self.num_blocks]
            raise ValueError(f"block ids {bad[:8]} outside the engine's {self.num_blocks} blocks")


def _layer_groups(
    segments: Sequence[torch.Tensor], layers: Mapping[str, Sequence[int]] | None
) -> tuple[list[tuple[int, ...]], dict[str, int]]:
    """Segment indices per layer group, in ``layers``' order, and each name's group.

    Names whose segments are the same memory (vLLM registers a layer that shares
    another's KV cache under its own name, with the same tensor) form one group:
    every copy into that memory precedes the group's event.
    """
    if layers is None:
        layers = {str(index): (index,) for index in range(len(segments))}
    groups: list[list[int]] = []
    group_of: dict[str, int] = {}
    by_memory: dict[tuple[tuple[int, int, int], ...], int] = {}
    for name, indices in layers.items():
        if not indices or any(not 0 <= i < len(segments) for i in indices):
            raise ValueError(f"layer {name!r}: segment indices {list(indices)} out of range")
        memory = tuple((segments[i].data_ptr(), segments[i].stride(0), int(segments[i].shape[1]))
                       for i in indices)
        group = by_memory.setdefault(memory, len(groups))
        if group == len(groups):
            groups.append([])
        groups[group] += indices
        group_of[name] = group
    covered = sorted(i for group in groups for i in group)
    if covered != list(range(len(segments))):
        raise ValueError("every segment must belong to exactly one layer")
    return [tuple(group) for group in groups], group_of


def _register_host_memory(owner: object, tensor: torch.Tensor) -> None:
    """Page-lock ``tensor``'s memory in place (``cudaHostRegister``) until ``owner`` is
    collected, so non-blocking copies to and from it are true DMA, without the
    pinned allocator's rounding."""
    if tensor.numel() == 0:
        return
    cudart: Any = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    ptr = tensor.data_ptr()
    err = cudart.cudaHostRegister(ptr, tensor.numel() * tensor.element_size(), 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister of the {tensor.numel()} B host arena failed: {err}")
    # Runs before owner's attributes (the tensor) are released.
    weakref.finalize(owner, cudart.cudaHostUnregister, ptr)
