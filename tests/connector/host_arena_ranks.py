"""One rank of a host-arena test (tests/connector/test_host_arena.py starts several).

Each rank joins a gloo world on 127.0.0.1, groups it as vLLM does (rank =
stage * tp + tensor rank; tensor-parallel groups, then pipeline-parallel ones),
builds its host arena through the real rendezvous with a byte count of its own
(its stage's layers), runs a transfer engine over it, and prints one JSON object
with what it saw. Rank 0 also maps the whole memfd and reads every peer's slice.

``--deny-proc``: the creator (rank 0) makes itself non-dumpable and the others
give up ``CAP_SYS_PTRACE`` (which root has outside a container), so the kernel
refuses to let them open the creator's ``/proc/<pid>/fd`` entry, as a hardened
host would.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import logging
import mmap
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from kvtool.connector import host_arena
from kvtool.connector.transfer import TransferEngine, layer_segments

NUM_SLOTS = 3
NUM_BLOCKS = 6
PR_SET_DUMPABLE = 4
CAP_SYS_PTRACE = 19
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


@dataclass(frozen=True)
class Job:
    job_id: int
    block_ids: tuple[int, ...]
    slots: tuple[int, ...]
    keys: tuple[Any, ...]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelname, record.getMessage()))


def kv_for(rank: int) -> dict[str, torch.Tensor]:
    """Uneven stages: rank 1 holds one small layer whose arena is no page multiple;
    the others 4096 B per block and layer (2 and 3 layers)."""
    gen = torch.Generator().manual_seed(rank)
    if rank == 1:
        shapes = [(NUM_BLOCKS, 1, 3, 40)]
    else:
        shapes = [(NUM_BLOCKS, 2, 16, 64)] * (2 if rank == 0 else 3)
    return {f"layer{i}": torch.randn(*shape, generator=gen).to(torch.float16)
            for i, shape in enumerate(shapes)}


def memfds_open() -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{host_arena.MEMFD_NAME}")
               for fd in os.listdir("/proc/self/fd") if _is_link(fd))


def _is_link(fd: str) -> bool:
    try:
        os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return True


def deny_proc(rank: int) -> str:
    """Make opening the creator's descriptors through /proc fail for the peers."""
    libc = ctypes.CDLL(None, use_errno=True)
    if rank == 0:
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
        return "non-dumpable creator"
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    if not data[0].effective & (1 << CAP_SYS_PTRACE):
        return "peer without CAP_SYS_PTRACE"
    data[0].effective &= ~(1 << CAP_SYS_PTRACE)
    data[0].permitted &= ~(1 << CAP_SYS_PTRACE)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    return "peer gave up CAP_SYS_PTRACE"


def round_trip(engine: TransferEngine, kv: dict[str, torch.Tensor]) -> bool:
    original = {name: t.clone() for name, t in kv.items()}
    sources, targets = (1, 4, 2), (0, 3, 5)
    keys = tuple(("h", b) for b in sources)
    engine.submit_store(Job(1, sources, (0, 1, 2), keys))
    stored = engine.wait_all()
    for tensor in kv.values():
        tensor.zero_()
    engine.submit_load(Job(2, targets, (0, 1, 2), keys))
    loaded = engine.wait_all()
    return all(r.ok for r in stored + loaded) and all(
        torch.equal(kv[name][dst], original[name][src])
        for name in kv for src, dst in zip(sources, targets, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--deny-proc", action="store_true")
    args = parser.parse_args()
    records = Records()
    logging.getLogger("kvtool.connector").addHandler(records)
    logging.getLogger("kvtool.connector").setLevel(logging.INFO)

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=timedelta(seconds=30))
    tp, stages = args.tp, args.world // args.tp
    # Every rank creates every group, in one order, as torch.distributed requires.
    tp_groups = [dist.new_group([s * tp + t for t in range(tp)]) for s in range(stages)]
    pp_groups = [dist.new_group([s * tp + t for s in range(stages)]) for t in range(tp)]
    stage, tensor_rank = divmod(args.rank, tp)
    rendezvous = host_arena.ProcessGroupRendezvous(
        [tp_groups[stage], pp_groups[tensor_rank]], args.rank)

    denied_by = deny_proc(args.rank) if args.deny_proc else ""

    kv = kv_for(args.rank)
    split = layer_segments(kv)
    arena = host_arena.allocate(NUM_SLOTS * split.block_bytes, rendezvous, page_aligned=False)
    engine = TransferEngine(split.segments, NUM_SLOTS, split.layers, arena=arena.tensor)
    ok = round_trip(engine, kv)
    arena.tensor[-1] = 0xA0 + args.rank  # a byte of this rank's, for rank 0 to read
    stat = os.fstat(arena.fd) if arena.fd is not None else None
    mine = {
        "rank": args.rank, "shared": arena.shared, "offset": arena.offset,
        "nbytes": arena.nbytes, "asked": NUM_SLOTS * split.block_bytes,
        "fallback": arena.fallback, "denied_by": denied_by,
        "fd_stat": [stat.st_dev, stat.st_ino, stat.st_size] if stat else None,
        "address_in_page": arena.tensor.data_ptr() % host_arena.PAGE,
        "round_trip_ok": ok,
        "slice_sha256": hashlib.sha256(arena.tensor.numpy().tobytes()).hexdigest(),
        "memfds_open": memfds_open(),
    }
    private = host_arena.allocate(4096, None, page_aligned=True)  # kvtool.host_arena=rank
    mine["private"] = {"shared": private.shared, "fd": private.fd,
                       "memfds_open": memfds_open(),
                       "address_in_page": private.tensor.data_ptr() % host_arena.PAGE}
    everyone: list[Any] = [None] * args.world
    dist.all_gather_object(everyone, mine)
    if args.rank == 0 and arena.fd is not None:
        # The whole object, as any holder of the descriptor sees it.
        whole = mmap.mmap(arena.fd, os.fstat(arena.fd).st_size, flags=mmap.MAP_SHARED,
                          prot=mmap.PROT_READ)
        mine["peer_reads"] = {
            str(peer["rank"]): {
                "last_byte": whole[peer["offset"] + peer["nbytes"] - 1],
                "sha256": hashlib.sha256(
                    whole[peer["offset"]:peer["offset"] + peer["nbytes"]]).hexdigest(),
            }
            for peer in everyone if peer["shared"]
        }
        whole.close()
        mine["dev_shm_kvtool"] = sorted(p.name for p in Path("/dev/shm").glob("*kvtool*"))
    dist.barrier()  # peers keep their slices until rank 0 has read them
    mine["logs"] = records.lines
    print(json.dumps(mine), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
