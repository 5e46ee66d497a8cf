"""Gathering N scattered KV blocks into host memory vs one contiguous copy of the same bytes.

Usage: python scripts/bench/gather.py [--quick] [--json] [--device cpu|cuda]

The gather is kvtool's transfer engine storing N randomly chosen blocks (every
segment of each) into consecutive host slots, exactly as a store job does:
on CPU batched ``index_select`` into the arena, on CUDA a device-side gather
then non-blocking copies into pinned host memory on a dedicated stream. The
baseline, measured in the same run, is one contiguous copy of the same number
of bytes into host memory (pinned on CUDA): the copy-engine peak the gather is
held against. Target: ratio >= 0.8.

Imports only torch, rich and kvtool.connector.transfer, so it runs on a GPU
machine that lacks kvtool's other dependencies (scripts/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from rich.console import Console

from kvtool.connector.transfer import TransferEngine

console = Console(stderr=True, highlight=False)


@dataclass(frozen=True)
class _Job:
    job_id: int
    block_ids: tuple[int, ...]
    slots: tuple[int, ...]
    keys: tuple[Hashable, ...]


def _timed_pair(a: Callable[[], None], b: Callable[[], None], reps: int) -> tuple[float, float]:
    """Median seconds of ``a`` and of ``b``, alternating them so that load from
    other processes falls on both alike."""
    a()  # warm-up: first-touch page faults, allocator, CUDA context
    b()
    times_a: list[float] = []
    times_b: list[float] = []
    for _ in range(reps):
        for fn, times in ((a, times_a), (b, times_b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times_a), statistics.median(times_b)


def run(device: str, quick: bool) -> dict[str, float | int | str]:
    # One segment per layer, 64 KiB per block per layer: a Llama-3-8B-like block
    # (16 tokens x 8 KV heads x 128 x K,V x 2 bytes) for 4 (quick) or 8 layers.
    layers = 4 if quick else 8
    num_blocks = 2048 if quick else 4096
    gathered = 512 if quick else 1024
    row = 64 * 1024
    reps = 5 if quick else 9
    dev = torch.device(device)
    # Every page written (fill_), so no copy reads the kernel's shared zero page;
    # each block starts with its own id so the check below can tell blocks apart.
    kv = {}
    for i in range(layers):
        kv[f"layer{i}"] = torch.empty((num_blocks, row), dtype=torch.uint8, device=dev).fill_(i)
        kv[f"layer{i}"].view(torch.int64)[:, 0] = torch.arange(num_blocks, device=dev)
    engine = TransferEngine.from_kv_caches(kv, num_slots=gathered)
    gen = torch.Generator().manual_seed(0)
    blocks = tuple(int(b) for b in torch.randperm(num_blocks, generator=gen)[:gathered])
    job = _Job(1, blocks, tuple(range(gathered)), tuple(range(gathered)))
    nbytes = gathered * engine.block_bytes

    source = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(7)
    target = torch.empty(nbytes, dtype=torch.uint8, pin_memory=dev.type == "cuda")

    def contiguous() -> None:
        target.copy_(source, non_blocking=True)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def gather() -> None:
        engine.submit_store(job)
        (result,) = engine.wait_all()
        assert result.ok, result.error

    console.print(f"{device}: {gathered} of {num_blocks} blocks x {layers} layers "
                  f"({nbytes / 2**20:.0f} MiB per copy), {reps} reps each")
    contiguous_s, gather_s = _timed_pair(contiguous, gather, reps)
    # The gathered bytes must be the blocks asked for, in slot order.
    landed = engine.arena[0].view(torch.int64)[:, 0].tolist()
    assert landed == list(blocks), "gathered blocks are not the ones asked for"
    return {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "bytes_per_copy": nbytes,
        "blocks_gathered": gathered,
        "block_bytes": engine.block_bytes,
        "contiguous_gbps": round(nbytes / contiguous_s / 1e9, 3),
        "gather_gbps": round(nbytes / gather_s / 1e9, 3),
        "gather_vs_contiguous_ratio": round(contiguous_s / gather_s, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller copies (under a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    out = run(args.device, args.quick)
    if args.json:
        print(json.dumps(out))
    else:
        console.print(
            f"{out['device']}: gather {out['gather_gbps']} GB/s, one contiguous copy "
            f"{out['contiguous_gbps']} GB/s, ratio {out['gather_vs_contiguous_ratio']} "
            "(target >= 0.8)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
