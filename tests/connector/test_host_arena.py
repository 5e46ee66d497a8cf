"""The per-host arena across real processes: a gloo world on 127.0.0.1 whose ranks build
their arenas through the real rendezvous (tests/connector/host_arena_ranks.py), with
byte counts that differ per pipeline stage."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kvtool.connector import host_arena  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RANK_SCRIPT = Path(__file__).with_name("host_arena_ranks.py")
PAGE = host_arena.PAGE


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_world(world: int, tp: int = 1, *extra: str) -> list[dict[str, Any]]:
    """Start ``world`` rank processes, wait for all (killing them by pid on timeout),
    and return each one's JSON report, by rank."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANK_SCRIPT), "--rank", str(rank), "--world", str(world),
             "--tp", str(tp), "--port", str(port), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for rank in range(world)
    ]
    done: list[tuple[int, str, str]] = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            done.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    failed = [f"rank {rank} exited {code}:\n{err[-2000:]}"
              for rank, (code, _, err) in enumerate(done) if code != 0]
    assert not failed, "\n".join(failed)
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in done]


def _kvtool_in_dev_shm() -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").glob("*kvtool*"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_ranks_of_a_host_share_one_memfd_in_exact_disjoint_slices() -> None:
    before = _kvtool_in_dev_shm()
    # Three pipeline stages of 2, 1 (a small one) and 3 layers: three byte counts.
    ranks = _run_world(3)
    assert len({r["asked"] for r in ranks}) == 3
    assert all(r["shared"] and not r["fallback"] for r in ranks)
    # One object: the same inode on the same device in every process.
    assert len({tuple(r["fd_stat"][:2]) for r in ranks}) == 1
    # Exact sizes, page-aligned starts, in rank order, disjoint.
    for r in ranks:
        assert r["nbytes"] == r["asked"]
        assert r["offset"] % PAGE == 0 and r["address_in_page"] == 0
    for a, b in itertools.pairwise(ranks):
        assert a["offset"] + a["nbytes"] <= b["offset"] < a["offset"] + a["nbytes"] + PAGE
    # The object is the slices end to end, each padded to a page only before the next.
    size = ranks[0]["fd_stat"][2]
    padded = sum(-(-r["nbytes"] // PAGE) * PAGE for r in ranks[:-1])
    assert size == padded + ranks[-1]["nbytes"] == ranks[-1]["offset"] + ranks[-1]["nbytes"]
    assert size - sum(r["asked"] for r in ranks) < PAGE * (len(ranks) - 1)
    # Each rank's transfer engine stored and loaded through its slice ...
    assert all(r["round_trip_ok"] for r in ranks)
    # ... and rank 0 reads what every rank wrote at that rank's offset.
    reads = ranks[0]["peer_reads"]
    for r in ranks:
        assert reads[str(r["rank"])] == {"last_byte": 0xA0 + r["rank"],
                                         "sha256": r["slice_sha256"]}
    # One startup line per host, from the creator, naming the total and the ranks.
    infos = [(r["rank"], msg) for r in ranks for level, msg in r["logs"] if level == "INFO"]
    assert len(infos) == 1 and infos[0][0] == 0
    assert f"one memfd of {size} B" in infos[0][1] and "ranks 0, 1, 2" in infos[0][1]
    assert not [msg for r in ranks for level, msg in r["logs"] if level == "WARNING"]
    # Nothing in /dev/shm, while the ranks held the object or after.
    assert ranks[0]["dev_shm_kvtool"] == [] and _kvtool_in_dev_shm() == before
    # Without a rendezvous (kvtool.host_arena=rank) an arena is private: no memfd.
    for r in ranks:
        assert r["memfds_open"] >= 1
        assert r["private"] == {"shared": False, "fd": None, "memfds_open": r["memfds_open"],
                                "address_in_page": 0}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_a_rank_the_kernel_keeps_out_falls_back_with_one_warning() -> None:
    # Two tensor-parallel ranks; the creator is non-dumpable and the peer has no
    # CAP_SYS_PTRACE, so the kernel refuses it /proc/<creator>/fd/<fd>.
    creator, peer = _run_world(2, 2, "--deny-proc")
    if peer["shared"]:
        pytest.skip(f"this kernel let the peer in despite a {creator['denied_by']!r}")
    assert creator["shared"] and creator["round_trip_ok"] and peer["round_trip_ok"]
    assert peer["fd_stat"] is None and peer["memfds_open"] == 0
    assert peer["nbytes"] == peer["asked"]
    warnings = [msg for level, msg in peer["logs"] if level == "WARNING"]
    assert len(warnings) == 1 and "/proc/" in warnings[0] and "private arena" in warnings[0]
    assert not [msg for level, msg in creator["logs"] if level == "WARNING"]
    (line,) = [msg for level, msg in creator["logs"] if level == "INFO"]
    assert "1 of 2 ranks fell back to private arenas (ranks 1:" in line


def test_a_collective_that_fails_leaves_a_private_arena_and_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No process group in this process: the first all_gather raises, as a broken one would.
    if torch.distributed.is_initialized():
        pytest.skip("this process already has a default process group")
    broken = host_arena.ProcessGroupRendezvous([None], rank=0)
    with caplog.at_level("INFO", logger="kvtool.connector"):
        arena = host_arena.allocate(5000, broken, page_aligned=True)
    assert not arena.shared and arena.fd is None and arena.nbytes == 5000
    assert arena.tensor.data_ptr() % PAGE == 0
    assert "the rendezvous failed" in arena.fallback
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "private arena of 5000 B" in record.getMessage()
