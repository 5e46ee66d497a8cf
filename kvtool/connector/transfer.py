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
outstanding stores, and the compute stream waits for the load. Nothing on
the step path synchronises the host; :meth:`poll` reads events.

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

import weakref
from collections.abc import Hashable, Mapping, Sequence
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


MAX_SLICE_COPIES = 8
"""Up to this many runs a CPU copy is one NumPy slice assignment per run, beyond it
one indexed copy: in the engine, right after a forward pass, a 4-block load of
scattered blocks took 34 us as four slice copies and 52 us as one indexed copy
(the indexing machinery is the colder, longer path); warm, a slice copy costs
about 1 us and an indexed copy about 7."""


def joint_runs(block_ids: Sequence[int], slots: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(first block, first slot, length)`` for each stretch in which block ids and
    slots both count up by one."""
    runs: list[tuple[int, int, int]] = []
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


class TransferResult(NamedTuple):
    job_id: int
    ok: bool
    error: str = ""


@dataclass
class _Pending:
    job_id: int
    event: Any  # torch.cuda.Event on CUDA, None when already complete
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

    def __init__(self, segments: Sequence[torch.Tensor], num_slots: int,
                 arena: torch.Tensor | None = None) -> None:
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
        if self.is_cuda:
            self._store_stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
            self._load_stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    @classmethod
    def from_kv_caches(
        cls, kv_caches: Mapping[str, torch.Tensor], num_slots: int, block_dim: int = 0,
        arena: torch.Tensor | None = None,
    ) -> TransferEngine:
        """Segments of every registered layer tensor, in a stable (sorted-name) order.

        Layers that share one storage (vLLM's CPU backend) are still separate
        segments: each layer's slice of a block is its own run of bytes.
        """
        segments = [
            seg for name in sorted(kv_caches) for seg in block_segments(kv_caches[name], block_dim)
        ]
        return cls(segments, num_slots, arena)

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
            if self.is_cuda:
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

    def submit_load(self, job: TransferJob, *, before_forward: bool = True) -> None:
        """Scatter ``job.slots`` into ``job.block_ids`` after checking every slot's key.

        On CUDA the load is ordered after the work already queued on the current
        stream. With ``before_forward`` the current stream also waits for the
        load before its next kernel, so the forward that reads these blocks sees
        them; without it nothing waits, and the blocks may be read only once
        :meth:`poll` reported the job (an asynchronous load: its request is not
        in the batch until then).
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
            if self.is_cuda:
                record.event = self._load_cuda(joint_runs(job.block_ids, job.slots),
                                               before_forward)
            else:
                self._copy_cpu(job.block_ids, job.slots, load=True)
        except (RuntimeError, ValueError, IndexError) as exc:
            record.ok, record.error = False, f"load job {job.job_id}: {exc}"
        self._pending.append(record)

    def poll(self) -> list[TransferResult]:
        """Jobs finished since the last poll, in submission order of completion checks."""
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
        for record in self._pending:
            if record.event is not None:
                record.event.synchronize()
        return self.poll()

    def has_pending(self) -> bool:
        return bool(self._pending)

    def fence(self) -> None:
        """Make the current (compute) stream wait for every store still copying, so the
        next forward cannot overwrite a block before its store read it. Queues device
        waits only; never blocks the host. A no-op on CPU, where copies are done at submit."""
        if not self.is_cuda or not self._stores_in_flight:
            return
        current = torch.cuda.current_stream(self.device)
        for event in self._stores_in_flight:
            current.wait_event(event)
        self._stores_in_flight = []

    @property
    def staging_bytes(self) -> int:
        """Device memory this engine allocates for transfers: none (see the module docstring)."""
        return 0

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

    def _store_cuda(self, runs: list[tuple[int, int, int]]) -> Any:
        stream = self._store_stream
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for seg, host in zip(self._wide, self._wide_arena, strict=True):
                for block, slot, n in runs:
                    host[slot:slot + n].copy_(seg[block:block + n], non_blocking=True)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(stream)
        return event

    def _load_cuda(self, runs: list[tuple[int, int, int]], before_forward: bool) -> Any:
        stream = self._load_stream
        current = torch.cuda.current_stream(self.device)
        stream.wait_stream(current)
        # A block being loaded into may be one a store of the previous step still reads.
        stream.wait_stream(self._store_stream)
        with torch.cuda.stream(stream):
            for seg, host in zip(self._wide, self._wide_arena, strict=True):
                for block, slot, n in runs:
                    seg[block:block + n].copy_(host[slot:slot + n], non_blocking=True)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(stream)
        if before_forward:
            current.wait_event(event)
        return event

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
