"""The connector's worker pipeline on one device, every byte verified, with its copy speed.

Usage: python scripts/bench/gpu_pipeline.py [--json] [--dry-run] [--steps N]

For each KV cache layout the transfer engine accepts (vLLM 0.32's LBHNC,
LBNHC, BLHNC, BLNHC; per-layer views ``[B, H, N, C]`` over one buffer, as
vLLM's ``allocate_kv_cache`` builds them) it runs engine steps the way a
vLLM worker does: ``fence`` (the connector's ``bind_connector_metadata``),
loads of blocks stored earlier into freshly "allocated" blocks, a
compute-stream "forward" that first checks every loaded block on the device
and then overwrites the blocks stored in the previous step (a missing fence
would let it overwrite them before their copy read them) and writes this
step's new blocks, then stores of those blocks on the side stream, and an
asynchronous load (``kvtool.load_async``: nothing waits for it) of the
previous step's blocks, whose bytes a later forward checks only once ``poll``
reported the job, as the scheduler schedules such a request only then. Every
loaded byte is compared on the device; the mismatch count is read once at
the end. Host synchronisations inside the step loop are counted with
``torch.cuda.set_sync_debug_mode("warn")``.

Then a synchronous load pipelined per layer (``LoadWait.PER_LAYER``, what the
connector does when the forward calls vLLM's ``wait_for_layer_load``): a
compute-stream "forward" calls ``wait_for_layer`` before each layer, then
checks every byte of that layer's loaded blocks and runs a matmul standing in
for the layer's other work; ``join_loads`` follows. The same forward over a
load the compute stream waits for as a whole (``LoadWait.WHOLE``) is the
comparison. CUDA events (timing, relative to one recorded right before the
load) give when the first layer's read started, when the last layer's copy
finished and when the forward finished; ``pipelined`` is whether the first
read started before the last copy finished (required with per-layer waits,
impossible with a whole wait).

Then it times one large store (device -> pinned host) and one large load
(host -> device) of runs of consecutive blocks against a plain pinned copy of
the same bytes in the same run (target ratio >= 0.8).

Per layout, it also times what a typical host hit (1,024 tokens) costs when
loaded synchronously per layer against recomputing those tokens' KV, with a
stand-in forward (:func:`hit_vs_recompute`): the measurement behind
``kvtool.load_async``'s default (false); above 1.0x on a device is a problem.

``--dry-run`` runs the same pipeline on CPU with small tensors (copies are
synchronous there: no timings, no targets). Imports only torch and
``kvtool.connector.transfer``, so it runs on a GPU machine without vLLM or
kvtool's other dependencies (scripts/gpu_check.sh). Exit code 1 when a byte
differs, a host sync happens in the step loop, the per-layer load does not
overlap the forward, or a ratio misses its target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Hashable
from typing import Any, NamedTuple

import torch

from kvtool.connector.transfer import LoadWait, TransferEngine

# Logical [L, B, H, N, C] -> physical order, as vLLM 0.32's KVCacheLayout values.
LAYOUTS: dict[str, tuple[int, ...]] = {
    "LBHNC": (0, 1, 2, 3, 4),
    "LBNHC": (0, 1, 3, 2, 4),
    "BLHNC": (1, 0, 2, 3, 4),
    "BLNHC": (1, 0, 3, 2, 4),
}
RATIO_TARGET = 0.8


class Shape(NamedTuple):
    layers: int
    blocks: int
    heads: int
    tokens: int  # per block
    content: int  # K and V of one head and token
    dtype: torch.dtype


# A Llama-3-8B-like rank (8 KV heads, head size 128, 16-token blocks, fp16):
# 64 KiB per block and layer, 32 layers.
DEVICE_SHAPE = Shape(32, 2048, 8, 16, 256, torch.float16)
DRY_RUN_SHAPE = Shape(3, 64, 2, 4, 8, torch.float16)


class Job(NamedTuple):
    job_id: int
    block_ids: tuple[int, ...]
    slots: tuple[int, ...]
    keys: tuple[Hashable, ...]


def kv_views(shape: Shape, order: tuple[int, ...], device: torch.device) -> dict[str, Any]:
    """Per-layer ``[B, H, N, C]`` views of one buffer laid out in ``order``."""
    logical = (shape.layers, shape.blocks, shape.heads, shape.tokens, shape.content)
    physical = [logical[i] for i in order]
    buffer = torch.zeros(physical, dtype=shape.dtype, device=device)
    inverse = [order.index(i) for i in range(5)]
    whole = buffer.permute(inverse)
    return {f"model.layers.{i}.self_attn.attn": whole[i] for i in range(shape.layers)}


def pattern(step: int, block: int, layer: int) -> float:
    """The value the fake forward writes into a block: exact in fp16 (< 2048)."""
    return float((step * 131 + block * 7 + layer * 3) % 2000 + 1)


def run_pipeline(
    shape: Shape, order: tuple[int, ...], device: torch.device, steps: int, per_step: int
) -> dict[str, Any]:
    kv = kv_views(shape, order, device)
    names = sorted(kv)
    engine = TransferEngine.from_kv_caches(kv, num_slots=per_step * (steps + 1))
    mismatches = torch.zeros((), dtype=torch.int64, device=device)
    job_ids = iter(range(1, 1 << 30))
    stored: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []  # (step, blocks, slots)
    syncs = 0
    half = shape.blocks // 2
    async_base = half + per_step  # where asynchronous loads land (after the sync ones)
    done: set[int] = set()  # job ids poll() reported
    async_load: tuple[int, int, tuple[int, ...]] | None = None  # (job id, source step, blocks)
    async_checked = 0
    failed: list[Any] = []

    def check_async_load() -> None:
        """The forward reads an asynchronous load's blocks: only after poll() reported it."""
        nonlocal async_load, async_checked
        assert async_load is not None
        _, src_step, blocks = async_load
        for layer, name in enumerate(names):
            for b in blocks:
                mismatches.add_((kv[name][async_base + b] != pattern(src_step, b, layer)).sum())
        async_load, async_checked = None, async_checked + 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        for step in range(steps):
            engine.fence()
            # Loads: what the previous step stored, into blocks of the other half.
            loads: list[tuple[int, tuple[int, ...]]] = []
            if stored:
                src_step, blocks, slots = stored[-1]
                targets = tuple(half + b for b in blocks)
                engine.submit_load(
                    Job(next(job_ids), targets, slots, tuple(("k", src_step, b) for b in blocks))
                )
                loads.append((src_step, blocks))
            # The forward on the compute stream: check loaded blocks, then write.
            if async_load is not None and async_load[0] in done:
                check_async_load()
            for src_step, blocks in loads:
                for layer, name in enumerate(names):
                    for b in blocks:
                        want = pattern(src_step, b, layer)
                        mismatches += (kv[name][half + b] != want).sum()
            # The same blocks every step: the forward overwrites what the previous
            # step's store may still be copying, which only the fence orders.
            new_blocks = tuple(range(per_step))
            for layer, name in enumerate(names):
                for b in new_blocks:
                    kv[name][b].fill_(pattern(step, b, layer))
            slots = tuple(range(step * per_step, (step + 1) * per_step))
            engine.submit_store(
                Job(next(job_ids), new_blocks, slots, tuple(("k", step, b) for b in new_blocks))
            )
            stored.append((step, new_blocks, slots))
            # After the forward is launched, as vLLM starts asynchronous loads.
            if async_load is None and len(stored) > 1:
                src_step, blocks, src_slots = stored[-2]
                job_id = next(job_ids)
                engine.submit_load(
                    Job(
                        job_id,
                        tuple(async_base + b for b in blocks),
                        src_slots,
                        tuple(("k", src_step, b) for b in blocks),
                    ),
                    wait=LoadWait.NONE,
                )
                async_load = (job_id, src_step, blocks)
            results = engine.poll()
            done.update(r.job_id for r in results)
            failed += [r for r in results if not r.ok]
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    failed += [r for r in engine.wait_all() if not r.ok]
    if async_load is not None:  # wait_all() waited for its copy
        check_async_load()
    return {
        "steps": steps,
        "blocks_per_step": per_step,
        "mismatched_elements": int(mismatches.item()) if not failed else -1,
        "failed_jobs": [r.error for r in failed],
        "async_loads_checked": async_checked,
        "host_syncs_per_step": syncs / steps,
    }


def layered_load(shape: Shape, device: torch.device, blocks: int, repeats: int) -> dict[str, Any]:
    """A synchronous load read by a per-layer "forward", with per-layer waits and with
    one whole wait: every byte checked, and (on CUDA) when the first read started."""
    kv = kv_views(shape, LAYOUTS["LBHNC"], device)
    names = list(kv)  # model order, as vLLM registers the layers
    engine = TransferEngine.from_kv_caches(kv, num_slots=blocks)
    sources = tuple(range(blocks))
    targets = tuple(range(blocks, 2 * blocks))
    slots = tuple(range(blocks))
    keys = tuple(("layered", b) for b in sources)
    for layer, name in enumerate(names):
        for b in sources:
            kv[name][b].fill_(pattern(0, b, layer))
    engine.submit_store(Job(1, sources, slots, keys))
    store_failed = [r.error for r in engine.wait_all() if not r.ok]
    cuda = device.type == "cuda"
    width = 2048 if cuda else 64
    weight = torch.randn(width, width, dtype=shape.dtype, device=device) / width**0.5
    hidden = torch.randn(width, width, dtype=shape.dtype, device=device)
    expected = [
        torch.tensor(
            [pattern(0, b, layer) for b in sources], dtype=shape.dtype, device=device
        ).view(-1, 1, 1, 1)
        for layer in range(len(names))
    ]
    job_ids = iter(range(2, 1 << 30))
    report: dict[str, Any] = {"bytes": blocks * engine.block_bytes, "layers": len(names)}

    def timing_event() -> Any:
        return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    for mode in (LoadWait.PER_LAYER, LoadWait.WHOLE):
        mismatches = torch.zeros((), dtype=torch.int64, device=device)
        failed = list(store_failed)
        runs: list[dict[str, float]] = []
        syncs = 0
        for _ in range(repeats):
            for name in names:
                kv[name][blocks : 2 * blocks].zero_()
            marks: dict[str, Any] = {}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if cuda:
                    torch.cuda.set_sync_debug_mode("warn")
                    marks = {k: timing_event() for k in ("start", "read0", "copied", "end")}
                    marks["start"].record()
                engine.submit_load(Job(next(job_ids), targets, slots, keys), wait=mode)
                engine.flush_loads()
                if cuda:
                    marks["copied"].record(engine.load_stream)  # after the last copy
                x = hidden
                for layer, name in enumerate(names):
                    engine.wait_for_layer(name)  # what vLLM calls before the attention
                    if cuda and layer == 0:
                        marks["read0"].record()
                    block = kv[name][blocks : 2 * blocks]
                    mismatches += (block != expected[layer]).sum()
                    x = torch.tanh(x @ weight)  # the layer's other work
                engine.join_loads()
                if cuda:
                    marks["end"].record()
                    torch.cuda.set_sync_debug_mode("default")
            syncs += sum("synchroniz" in str(w.message).lower() for w in caught)
            failed += [r.error for r in engine.wait_all() if not r.ok]
            if cuda:
                marks["end"].synchronize()
                start = marks["start"]
                runs.append({k: start.elapsed_time(marks[k]) for k in ("read0", "copied", "end")})
        figures: dict[str, Any] = {
            "mismatched_elements": int(mismatches.item()),
            "failed_jobs": failed,
            "host_syncs": syncs,
        }
        if runs:
            median = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
            figures.update(
                {
                    "first_read_start_ms": round(median["read0"], 3),
                    "last_copy_done_ms": round(median["copied"], 3),
                    "forward_done_ms": round(median["end"], 3),
                    "pipelined": median["read0"] < median["copied"],
                }
            )
        else:  # CPU: copies are done at submit, nothing overlaps
            figures["pipelined"] = None
        report[mode.value] = figures
    return report


def _timed(device: torch.device, action: Any, repeats: int) -> float:
    """Median seconds of ``action`` (device work fully included)."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        action()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def bandwidth(
    shape: Shape, device: torch.device, blocks: int, run: int, repeats: int
) -> dict[str, Any]:
    """Store and load of ``blocks`` blocks in runs of ``run`` consecutive ones, vs a plain
    pinned copy of the same bytes."""
    kv = kv_views(shape, LAYOUTS["LBHNC"], device)
    engine = TransferEngine.from_kv_caches(kv, num_slots=blocks)
    block_ids = tuple(start + i for start in range(0, 2 * blocks, 2 * run) for i in range(run))[
        :blocks
    ]
    slots = tuple(range(blocks))
    keys = tuple(("k", b) for b in block_ids)
    nbytes = blocks * engine.block_bytes
    pin = device.type == "cuda"
    flat_device = torch.empty(nbytes, dtype=torch.uint8, device=device)
    flat_host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)

    def store() -> None:
        engine.submit_store(Job(1, block_ids, slots, keys))
        engine.wait_all()

    def load() -> None:
        engine.submit_load(Job(2, block_ids, slots, keys))
        engine.wait_all()

    store()  # warm up, and give the load something to read
    load()
    d2h = _timed(device, store, repeats)
    h2d = _timed(device, load, repeats)
    plain_d2h = _timed(device, lambda: flat_host.copy_(flat_device, non_blocking=True), repeats)
    plain_h2d = _timed(device, lambda: flat_device.copy_(flat_host, non_blocking=True), repeats)

    def gbps(seconds: float) -> float:
        return round(nbytes / seconds / 1e9, 2)

    return {
        "bytes": nbytes,
        "blocks": blocks,
        "run_length": run,
        "store_d2h_gbps": gbps(d2h),
        "plain_d2h_gbps": gbps(plain_d2h),
        "store_ratio": round(plain_d2h / d2h, 3),
        "load_h2d_gbps": gbps(h2d),
        "plain_h2d_gbps": gbps(plain_h2d),
        "load_ratio": round(plain_h2d / h2d, 3),
    }


class ForwardWeights(NamedTuple):
    """A transformer layer's matmuls, standing in for a layer's forward over some tokens."""

    attention: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


def hit_vs_recompute(shape: Shape, order: tuple[int, ...], device: torch.device,
                     hit_blocks: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    """What a host hit of ``hit_blocks`` blocks costs a request when loaded synchronously,
    per layer (``LoadWait.PER_LAYER``, ``kvtool.load_async=false``), against computing
    those tokens again.

    Three forwards of a stand-in model (per layer: an attention-sized and an MLP-sized
    matmul pair, ``shape.layers`` layers) are timed: over the request's
    ``new_tokens`` alone; the same with the hit loaded into this layout's blocks,
    each layer waiting for its own copy first; and over the hit's tokens plus the
    new ones (recompute). ``sync_load_delay_ms`` is what the load adds to the
    forward, ``recompute_ms`` what recomputing adds; ``hit_vs_recompute`` is the
    hit's forward over the recompute's (below 1: the synchronous load pays).
    """
    kv = kv_views(shape, order, device)
    names = list(kv)
    engine = TransferEngine.from_kv_caches(kv, num_slots=hit_blocks)
    sources = tuple(range(hit_blocks))
    targets = tuple(range(hit_blocks, 2 * hit_blocks))
    slots = tuple(range(hit_blocks))
    keys = tuple(("hit", b) for b in sources)
    engine.submit_store(Job(1, sources, slots, keys))
    failed = [r.error for r in engine.wait_all() if not r.ok]
    cuda = device.type == "cuda"
    # Llama-3-8B's hidden and MLP sizes on a device; small and float32 on CPU.
    width, mlp = (4096, 14336) if cuda else (64, 224)
    dtype = shape.dtype if cuda else torch.float32
    weights = ForwardWeights(*(torch.randn(a, b, dtype=dtype, device=device) / a ** 0.5
                               for a, b in ((width, width), (width, mlp), (mlp, width))))
    hit_tokens = hit_blocks * shape.tokens
    job_ids = iter(range(2, 1 << 30))

    def forward(tokens: int, load: bool) -> None:
        x = torch.ones(tokens, width, dtype=dtype, device=device)
        if load:
            engine.submit_load(Job(next(job_ids), targets, slots, keys), wait=LoadWait.PER_LAYER)
            engine.flush_loads()
        for name in names:
            if load:
                engine.wait_for_layer(name)  # what vLLM calls before the attention
            x = x + x @ weights.attention
            x = x + torch.tanh(x @ weights.up) @ weights.down
        if load:
            engine.join_loads()
            failed.extend(r.error for r in engine.wait_all() if not r.ok)

    forward(new_tokens, True)  # warm-up: kernels and the allocator, for both sizes
    forward(hit_tokens + new_tokens, False)
    alone = _timed(device, lambda: forward(new_tokens, False), repeats)
    hit = _timed(device, lambda: forward(new_tokens, True), repeats)
    recompute = _timed(device, lambda: forward(hit_tokens + new_tokens, False), repeats)
    return {
        "hit_blocks": hit_blocks, "hit_tokens": hit_tokens, "new_tokens": new_tokens,
        "hit_bytes": hit_blocks * engine.block_bytes, "failed_jobs": failed,
        "forward_ms": round(alone * 1e3, 3),
        "sync_load_delay_ms": round((hit - alone) * 1e3, 3),
        "recompute_ms": round((recompute - alone) * 1e3, 3),
        "hit_vs_recompute": round(hit / recompute, 3),
    }


def hit_lines(report: dict[str, Any]) -> list[str]:
    """One line per layout: the synchronous per-layer load of a hit against recompute."""
    return [
        f"hit vs recompute ({name}): {r['hit_blocks']} blocks ({r['hit_tokens']} tokens, "
        f"{r['hit_bytes']} B) + {r['new_tokens']} new tokens: forward {r['forward_ms']} ms, "
        f"synchronous per-layer load adds {r['sync_load_delay_ms']} ms, recompute adds "
        f"{r['recompute_ms']} ms; hit / recompute {r['hit_vs_recompute']}x, "
        f"failed jobs {len(r['failed_jobs'])}"
        for name, r in report.items()
    ]


def layered_lines(r: dict[str, Any]) -> list[str]:
    """The per-layer load's figures, one line per way of waiting."""
    lines = []
    for mode in (LoadWait.PER_LAYER.value, LoadWait.WHOLE.value):
        f = r[mode]
        timing = (
            f"first layer read at {f['first_read_start_ms']} ms, last layer copied at "
            f"{f['last_copy_done_ms']} ms, forward done at {f['forward_done_ms']} ms"
            if "first_read_start_ms" in f
            else "no timings (CPU copies are synchronous)"
        )
        lines.append(
            f"layered load ({mode} wait): {r['layers']} layers, {r['bytes']} B: "
            f"{timing}; pipelined {f['pipelined']}; mismatched elements "
            f"{f['mismatched_elements']}, failed jobs {len(f['failed_jobs'])}, "
            f"host syncs {f['host_syncs']}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--dry-run", action="store_true", help="CPU, small tensors, no targets")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args(argv)
    if args.dry_run:
        device, shape = torch.device("cpu"), DRY_RUN_SHAPE
    elif torch.cuda.is_available():
        device, shape = torch.device("cuda"), DEVICE_SHAPE
    else:
        print(
            "gpu_pipeline: no CUDA device visible to torch (use --dry-run on CPU)", file=sys.stderr
        )
        return 2
    per_step = 4 if args.dry_run else 64
    report: dict[str, Any] = {
        "device": str(device) if args.dry_run else torch.cuda.get_device_name(device),
        "layouts": {},
    }
    for name, order in LAYOUTS.items():
        report["layouts"][name] = run_pipeline(shape, order, device, args.steps, per_step)
    report["layered_load"] = layered_load(shape, device, per_step, repeats=2 if args.dry_run else 5)
    # A typical hit: a 1,024-token shared prefix (64 blocks of 16) before 64 new tokens.
    hit_blocks, new_tokens = (4, 4) if args.dry_run else (64, 64)
    report["hit_vs_recompute"] = {
        name: hit_vs_recompute(shape, order, device, hit_blocks, new_tokens,
                               repeats=2 if args.dry_run else 10)
        for name, order in LAYOUTS.items()
    }
    blocks = 16 if args.dry_run else 256
    report["bandwidth"] = bandwidth(shape, device, blocks, run=8, repeats=3 if args.dry_run else 10)
    problems = [
        f"{name}: {r}"
        for name, r in report["layouts"].items()
        if r["mismatched_elements"] != 0
        or r["failed_jobs"]
        or r["async_loads_checked"] == 0
        or (not args.dry_run and r["host_syncs_per_step"] > 0)
    ]
    for mode, r in report["layered_load"].items():
        if not isinstance(r, dict):
            continue
        if (
            r["mismatched_elements"] != 0
            or r["failed_jobs"]
            or (not args.dry_run and r["host_syncs"] > 0)
        ):
            problems.append(f"layered load ({mode}): {r}")
        if not args.dry_run and r["pipelined"] != (mode == LoadWait.PER_LAYER.value):
            problems.append(f"layered load ({mode}): pipelined is {r['pipelined']}")
    for name, r in report["hit_vs_recompute"].items():
        if r["failed_jobs"]:
            problems.append(f"hit vs recompute ({name}): failed jobs {r['failed_jobs']}")
        if not args.dry_run and r["hit_vs_recompute"] > 1.0:
            problems.append(f"hit vs recompute ({name}): a synchronous load costs "
                            f"{r['hit_vs_recompute']}x recompute (kvtool.load_async=false)")
    if not args.dry_run:
        bw = report["bandwidth"]
        problems += [
            f"{k} {bw[k]} < {RATIO_TARGET}"
            for k in ("store_ratio", "load_ratio")
            if bw[k] < RATIO_TARGET
        ]
    report["problems"] = problems
    if args.json:
        print(json.dumps(report))
    else:
        for name, r in report["layouts"].items():
            print(f"{name}: {r}")
        for line in layered_lines(report["layered_load"]):
            print(line)
        for line in hit_lines(report["hit_vs_recompute"]):
            print(line)
        print(f"bandwidth: {report['bandwidth']}")
        print("problems: " + ("; ".join(problems) or "none"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
