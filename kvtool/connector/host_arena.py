"""Where a rank's host arena lives: a slice of one memory object per host, or its own.

The transfer engine copies blocks into a host arena of exactly ``num_slots`` rows
(:mod:`kvtool.connector.transfer`). With :func:`allocate` and a
:class:`Rendezvous` among an engine's ranks, the ranks of one host keep their arenas
in one shared memory object:

- **One memfd per host per engine** (``memfd_create``): anonymous memory with no
  name in any file system. A ``/dev/shm`` file, as vLLM's own CPU offloading uses
  (``SharedOffloadRegion``, https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/kv_offload/cpu/shared_offload_region.py),
  is bounded by that mount's size (64 MiB in a default Docker container) and is
  left behind, holding its memory, when a process dies before unlinking it. A
  memfd's pages are freed when its last descriptor and mapping go, however the
  processes end. Its size is sealed (``F_SEAL_SHRINK | F_SEAL_GROW``), so no
  rank can truncate it under the others' mappings (which would be ``SIGBUS``).
- **Exact bytes.** The lowest rank of the host creates it, sized to the sum of
  the local ranks' arenas; each rank's slice starts on a page boundary, so the
  object is that sum plus under a page of padding per rank, and padding is never
  touched, so it takes no memory (shmem pages exist once written). Ranks ask for
  different sizes when pipeline stages hold different numbers of layers: every
  rank's byte count is exchanged.
- **Each rank maps only its own slice** (``mmap`` ``MAP_SHARED`` at its offset),
  viewed as a ``uint8`` tensor: a bad index cannot reach a peer's blocks, and on
  CUDA each rank page-locks exactly its own pages (``cudaHostRegister`` in
  :mod:`kvtool.connector.transfer`), so a host pins the bytes asked for, not a
  power of two per rank as PyTorch's pinned allocator would.
- **Peers open the creator's descriptor through** ``/proc/<pid>/fd/<fd>``: the
  collective carries two integers and no socket path or namespace has to be
  agreed on. The kernel allows it only where the peer may inspect the creator
  (same user and a dumpable process, or ``CAP_SYS_PTRACE``); where it refuses,
  the peer logs one warning and falls back to a private arena. A peer checks
  that what it opened is the creator's object (device, inode and size), so a
  reused pid cannot hand it another file.

The rendezvous runs three ``all_gather`` rounds, and every rank joins every round,
whatever happened to it before, so no rank waits on a collective another skipped:
(1) host identity, rank and byte count: every rank computes the same layout;
(2) the creator's pid, descriptor and inode, or why it could not create the object;
(3) each rank's outcome, so the creator logs one line per host (total bytes,
ranks, fallbacks). A rank's host identity is its host name, the kernel's boot id
(host names repeat across machines and containers; a boot id is random per boot)
and its pid namespace (ranks that cannot see each other's ``/proc`` entries must
not be grouped together).

Without a rendezvous (``kvtool.host_arena=rank``, or ranks that share one process
without ``torch.distributed``, as tests drive them) each rank allocates its own
arena as before. In-process sharing is not attempted: such ranks register one
after another, so none knows the others' sizes when it must allocate, and one
process gains nothing from sharing with itself.

Imports torch and the standard library only, like the transfer engine.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import socket
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import torch

logger = logging.getLogger("kvtool.connector")

PAGE = mmap.ALLOCATIONGRANULARITY
"""Slice alignment: ``mmap`` offsets must be multiples of it (the page size on Linux)."""

MEMFD_NAME = "kvtool-host-arena"
"""The memfd's name, shown only in ``/proc/<pid>/fd`` and ``/proc/<pid>/maps``."""


class Rendezvous(Protocol):
    """The ranks of one engine, engine-agnostic: each rank calls :meth:`all_gather`
    the same number of times, in the same order."""

    @property
    def rank(self) -> int:
        """This rank's id, unique among the participants."""
        ...

    def all_gather(self, obj: Any) -> list[Any]:
        """Every participant's ``obj`` (picklable), in the same order on every rank."""
        ...


class ProcessGroupRendezvous:
    """:class:`Rendezvous` over ``torch.distributed`` CPU (gloo) process groups.

    With several groups the gather runs over each in turn and flattens, so the
    groups' product is the participants: over an engine's tensor-, context- and
    pipeline-parallel groups that is exactly the engine's ranks (data-parallel
    replicas share a ``torch.distributed`` world but never these groups).
    ``None`` is the default group.
    """

    def __init__(self, groups: Sequence[Any], rank: int) -> None:
        if not groups:
            raise ValueError("a rendezvous needs at least one process group")
        self.groups = list(groups)
        self._rank = rank

    @property
    def rank(self) -> int:
        return self._rank

    def all_gather(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        gathered: list[Any] = [obj]
        for group in self.groups:
            parts: list[Any] = [None] * dist.get_world_size(group)
            dist.all_gather_object(parts, gathered, group=group)
            gathered = [item for part in parts for item in part]
        return gathered


class HostArena:
    """One rank's host arena: ``tensor`` (``uint8``, exactly the bytes asked for) and
    where it lives. ``shared``: a slice at ``offset`` of the host's memfd, whose
    descriptor in this process is ``fd`` (closed when this object is collected;
    the mapping keeps the memory until the tensor and its views are gone).
    ``fallback``: why a shared arena was asked for and this one is private."""

    def __init__(self, tensor: torch.Tensor, *, shared: bool = False, offset: int = 0,
                 fd: int | None = None, fallback: str = "") -> None:
        self.tensor = tensor
        self.shared = shared
        self.offset = offset
        self.fd = fd
        self.fallback = fallback
        if fd is not None:
            weakref.finalize(self, os.close, fd)

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel())


def allocate(nbytes: int, share_with: Rendezvous | None, *, page_aligned: bool) -> HostArena:
    """This rank's arena of ``nbytes``: a slice of the host's memfd shared with the
    ranks of ``share_with`` on this host (a collective: every rank of the rendezvous
    must call it), or, with ``share_with=None``, a private one (:func:`private`).
    A failed rendezvous logs one warning and returns a private arena."""
    if nbytes < 1:
        raise ValueError(f"a host arena needs at least one byte, got {nbytes}")
    if share_with is None:
        return private(nbytes, page_aligned=page_aligned)
    return _SharedArenaBuilder(nbytes, share_with, page_aligned).build()


def private(nbytes: int, *, page_aligned: bool) -> HostArena:
    """One allocation of exactly ``nbytes`` for this rank alone; ``page_aligned`` for
    arenas that will be page-locked in place, so registration covers exactly them."""
    if not page_aligned:
        return HostArena(torch.empty(nbytes, dtype=torch.uint8))
    raw = torch.empty(nbytes + PAGE, dtype=torch.uint8)
    start = -raw.data_ptr() % PAGE
    return HostArena(raw[start:start + nbytes])


def host_identity() -> str:
    """What ranks on one host, in one pid namespace, have in common (module docstring)."""
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as boot:
            parts.append(boot.read().decode().strip())
    except OSError:
        parts.append("no-boot-id")
    try:
        parts.append(os.readlink("/proc/self/ns/pid"))
    except OSError:
        parts.append("no-pid-ns")
    return "/".join(parts)


def slice_offsets(sizes: Sequence[int]) -> list[int]:
    """Page-aligned start of each slice, in order; the object ends at the last
    start plus the last size."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end += -(-size // PAGE) * PAGE
    return offsets


class _Member(NamedTuple):
    host: str
    rank: int
    nbytes: int


class _Published(NamedTuple):
    """Round 2: the creator's object (``error`` empty) or why there is none."""

    rank: int
    pid: int = 0
    fd: int = -1
    device: int = 0
    inode: int = 0
    size: int = 0
    error: str = ""


class _Outcome(NamedTuple):
    host: str
    rank: int
    shared: bool
    reason: str


class _SharedArenaBuilder:
    """The three rounds of :func:`allocate` for one rank (module docstring)."""

    def __init__(self, nbytes: int, rendezvous: Rendezvous, page_aligned: bool) -> None:
        self.nbytes = nbytes
        self.rendezvous = rendezvous
        self.page_aligned = page_aligned
        self.host = host_identity()
        self.rank = rendezvous.rank

    def build(self) -> HostArena:
        try:
            members = self._members()
        except Exception as exc:  # a broken collective: nothing shared, nothing to join
            return self._fall_back(f"the rendezvous failed: {exc}", warn=True)
        here = sorted((m for m in members if m.host == self.host), key=lambda m: m.rank)
        offsets = slice_offsets([m.nbytes for m in here])
        index = next(i for i, m in enumerate(here) if m.rank == self.rank)
        total = offsets[-1] + here[-1].nbytes
        creator = here[0].rank
        fd, published = -1, _Published(self.rank)
        try:
            if self.rank == creator:
                fd, published = _create(total, self.rank)
            published_all = self.rendezvous.all_gather(published)
        except Exception as exc:
            _close(fd)
            return self._fall_back(f"the rendezvous failed: {exc}", warn=True)
        theirs = next(p for p in published_all if p.rank == creator)
        arena, reason, warn = self._map(theirs, fd, offsets[index])
        if arena is None:
            arena = self._fall_back(reason, warn=warn)
        try:
            outcomes = self.rendezvous.all_gather(
                _Outcome(self.host, self.rank, arena.shared, arena.fallback))
        except Exception as exc:  # the arena is built; only the host's log line is lost
            logger.warning("kvtool host arena: no startup summary (rendezvous failed: %s)", exc)
            return arena
        if self.rank == creator:
            _log_host_line(here, theirs, total,
                           [o for o in outcomes if o.host == self.host and not o.shared])
        return arena

    def _members(self) -> list[_Member]:
        members = self.rendezvous.all_gather(_Member(self.host, self.rank, self.nbytes))
        ranks = [m.rank for m in members]
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"ranks are not unique: {sorted(ranks)}")
        return members

    def _map(self, theirs: _Published, own_fd: int,
             offset: int) -> tuple[HostArena | None, str, bool]:
        """This rank's slice of the creator's object, or None, why, and whether this
        rank is the one to warn (a creator's failure is warned by the creator)."""
        if theirs.error:
            return None, theirs.error, self.rank == theirs.rank
        fd = own_fd
        try:
            if fd < 0:
                fd = os.open(f"/proc/{theirs.pid}/fd/{theirs.fd}", os.O_RDWR | os.O_CLOEXEC)
                stat = os.fstat(fd)
                if (stat.st_dev, stat.st_ino, stat.st_size) != (
                        theirs.device, theirs.inode, theirs.size):
                    raise OSError(f"/proc/{theirs.pid}/fd/{theirs.fd} is not rank "
                                  f"{theirs.rank}'s host arena")
            mapping = mmap.mmap(fd, self.nbytes, flags=mmap.MAP_SHARED,
                                prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
            # frombuffer holds the mapping until the tensor and its views are gone.
            tensor = torch.frombuffer(mapping, dtype=torch.uint8)
        except Exception as exc:  # whatever failed, this rank falls back and joins round 3
            _close(fd)
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return None, (f"could not map rank {theirs.rank}'s host arena "
                          f"(/proc/{theirs.pid}/fd/{theirs.fd}): {detail}"), True
        return HostArena(tensor, shared=True, offset=offset, fd=fd), "", False

    def _fall_back(self, reason: str, *, warn: bool) -> HostArena:
        if warn:
            logger.warning("kvtool host arena: rank %d uses a private arena of %d B: %s",
                           self.rank, self.nbytes, reason)
        arena = private(self.nbytes, page_aligned=self.page_aligned)
        arena.fallback = reason
        return arena


def _create(total: int, rank: int) -> tuple[int, _Published]:
    """The host's memfd of ``total`` bytes, size sealed; or -1 and the reason."""
    fd = -1
    try:
        fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, total)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        stat = os.fstat(fd)
    except (OSError, AttributeError) as exc:  # AttributeError: no memfd on this platform
        _close(fd)
        return -1, _Published(rank, error=f"rank {rank} could not create a memfd of "
                                          f"{total} B: {exc}")
    return fd, _Published(rank, os.getpid(), fd, stat.st_dev, stat.st_ino, stat.st_size)


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _log_host_line(here: Sequence[_Member], published: _Published, total: int,
                   private_ranks: Sequence[_Outcome]) -> None:
    ranks = ", ".join(str(m.rank) for m in here)
    asked = sum(m.nbytes for m in here)
    host = here[0].host.split("/", 1)[0]
    if published.error:
        logger.warning("kvtool host arena on %s: no shared memfd (%s); ranks %s use private "
                       "arenas (%d B in all)", host, published.error, ranks, asked)
        return
    line = (f"kvtool host arena on {host}: one memfd of {total} B ({total / (1 << 30):.2f} "
            f"GiB) for ranks {ranks}, slices of "
            + " + ".join(f"{m.nbytes}" for m in here) + f" B = {asked} B asked")
    if private_ranks:
        line += (f"; {len(private_ranks)} of {len(here)} ranks fell back to private arenas "
                 f"(ranks {', '.join(str(o.rank) for o in private_ranks)}: "
                 f"{private_ranks[0].reason})")
    logger.info("%s", line)
