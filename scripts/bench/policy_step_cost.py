"""Per-step cost and blocks stored: kvtool's EVICTION_AWARE vs LMCache 0.5.6's, one run.

Usage: python scripts/bench/policy_step_cost.py [--quick] [--json] [--cache DIR]

LMCache's policy modules come from the lmcache 0.5.6 wheel, fetched with
``pip download --no-deps`` into a cache directory outside git (default
~/.cache/kvtool/bench) and imported with two stand-ins, as
shared/reference/lazy-offload.md §9 describes: the ``lmcache`` package is
registered without running its ``__init__`` (which needs torch and the native
extension), and ``lmcache.utils`` provides ``init_logger``. No LMCache code is
copied into this repository.

Both systems run against the same vLLM-like block pool (a linked free queue
with a fake head and tail, hashed blocks freed to the tail, touch removes) and
the same scripted workload:

1. Step cost: N pending store operations of 2 blocks each, all held by running
   requests (none near the eviction head), decode steps allocating 4 blocks.
   LMCache's figure is ``policy.drain`` alone; kvtool's is the whole
   ``LazyOffloadManager.step`` (allocation check, policy, releases).
2. Blocks stored before eviction: a churn trace on a 1,024-block pool
   (requests with hot shared prefixes arrive, decode and finish; their freed
   blocks age towards the eviction head). Both policies are driven through a
   minimal manager stand-in for LMCache (touch, re-check hashes, unpin on
   the next step's receipt) and kvtool's own manager; counted are distinct
   block hashes stored (each validated against recycling before its copy) and
   block writes (duplicates of shared prefixes included), during the trace
   only (kvtool's idle tail drain is not exercised).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import statistics
import subprocess
import sys
import time
import types
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from kvtool.connector.blockpool import BlockHash
from kvtool.connector.config import ConnectorConfig
from kvtool.connector.manager import JobReport, LazyOffloadManager, StepInput
from kvtool.connector.store import StoreIndex

LMCACHE_VERSION = "0.5.6"
TOKENS_PER_BLOCK = 16
DECODE_BLOCKS_PER_STEP = 4  # 64 running requests at 16 tokens per block: one block each 4 steps
console = Console(stderr=True, highlight=False)


# --------------------------------------------------------------------------- pool


class Block:
    __slots__ = ("block_hash", "block_id", "next_free_block", "prev_free_block", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.block_hash: BlockHash | None = None
        self.ref_cnt = 0
        self.prev_free_block: Block | None = None
        self.next_free_block: Block | None = None


class FreeQueue:
    """vLLM's doubly linked free queue: fake head and tail, head = next victim."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.fake_free_list_head = Block(-1)
        self.fake_free_list_tail = Block(-2)
        self.fake_free_list_head.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = self.fake_free_list_head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def append(self, block: Block) -> None:
        last = self.fake_free_list_tail.prev_free_block
        assert last is not None
        self._link(last, block, self.fake_free_list_tail)

    def appendleft(self, block: Block) -> None:
        first = self.fake_free_list_head.next_free_block
        assert first is not None
        self._link(self.fake_free_list_head, block, first)

    def _link(self, before: Block, block: Block, after: Block) -> None:
        before.next_free_block = block
        block.prev_free_block = before
        block.next_free_block = after
        after.prev_free_block = block
        self.num_free_blocks += 1

    def remove(self, block: Block) -> None:
        prev, nxt = block.prev_free_block, block.next_free_block
        assert prev is not None and nxt is not None
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def popleft(self) -> Block:
        block = self.fake_free_list_head.next_free_block
        assert block is not None and block is not self.fake_free_list_tail
        self.remove(block)
        return block


class LinkedPool:
    """vLLM-like block pool with both LMCache's view (``blocks``, ``free_block_queue``)
    and kvtool's :class:`~kvtool.connector.blockpool.BlockPoolView`."""

    def __init__(self, num_blocks: int) -> None:
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_queue = FreeQueue(self.blocks)
        self.cached: dict[BlockHash, int] = {}

    def allocate(self, n: int) -> list[int] | None:
        if n > self.free_block_queue.num_free_blocks:
            return None
        out = []
        for _ in range(n):
            block = self.free_block_queue.popleft()
            if block.block_hash is not None:
                if self.cached.get(block.block_hash) == block.block_id:
                    del self.cached[block.block_hash]
                block.block_hash = None
            block.ref_cnt = 1
            out.append(block.block_id)
        return out

    def set_hash(self, block_id: int, block_hash: BlockHash) -> None:
        self.blocks[block_id].block_hash = block_hash
        self.cached.setdefault(block_hash, block_id)

    def touch(self, blocks: Sequence[Block]) -> None:
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, blocks: Sequence[Block]) -> None:
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None:
                    self.free_block_queue.appendleft(block)
                else:
                    self.free_block_queue.append(block)

    # kvtool's view
    def block_hash(self, block_id: int) -> BlockHash | None:
        return self.blocks[block_id].block_hash

    def protect(self, block_ids: Sequence[int]) -> None:
        self.touch([self.blocks[i] for i in block_ids])

    def unprotect(self, block_ids: Sequence[int]) -> None:
        self.free_blocks([self.blocks[i] for i in block_ids])

    @property
    def num_free(self) -> int:
        return self.free_block_queue.num_free_blocks

    def iter_eviction_order(self) -> Iterator[int]:
        block = self.fake_head_next()
        tail = self.free_block_queue.fake_free_list_tail
        while block is not None and block is not tail:
            yield block.block_id
            block = block.next_free_block

    def fake_head_next(self) -> Block | None:
        return self.free_block_queue.fake_free_list_head.next_free_block


# --------------------------------------------------------------------------- LMCache import


def load_lmcache(cache: Path) -> types.SimpleNamespace:
    """Import LMCache 0.5.6's policy modules from its wheel (see module docstring)."""
    root = cache / f"lmcache-{LMCACHE_VERSION}"
    marker = root / "lmcache" / "integration" / "vllm" / "lazy_offload_policy" / "base.py"
    if not marker.exists():
        cache.mkdir(parents=True, exist_ok=True)
        wheels = sorted(cache.glob(f"lmcache-{LMCACHE_VERSION}-*.whl"))
        if not wheels:
            console.print(f"downloading lmcache {LMCACHE_VERSION} (pip download --no-deps)")
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    f"lmcache=={LMCACHE_VERSION}",
                    "-d",
                    str(cache),
                ],
                check=True,
            )
            wheels = sorted(cache.glob(f"lmcache-{LMCACHE_VERSION}-*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [
                n
                for n in wheel.namelist()
                if n.startswith("lmcache/integration/") and n.endswith(".py")
            ]
            wheel.extractall(root, members)
    package = types.ModuleType("lmcache")
    package.__path__ = [str(root / "lmcache")]
    utils = types.ModuleType("lmcache.utils")
    setattr(utils, "init_logger", logging.getLogger)  # noqa: B010 - a stand-in module
    sys.modules.setdefault("lmcache", package)
    sys.modules.setdefault("lmcache.utils", utils)
    sys.dont_write_bytecode = True
    from lmcache.integration.vllm.lazy_offload_policy import (
        base,
        eviction_aware,
    )

    return types.SimpleNamespace(base=base, ea=eviction_aware)


@dataclass
class _Op:
    start: int
    end: int


@dataclass
class _Meta:
    """Stand-in for LMCacheMPRequestMetadata: the fields the policies read."""

    request_id: str
    op: _Op


# --------------------------------------------------------------------------- drivers


class Driver:
    """What the simulated engine calls; one implementation per system."""

    stored_hashes: set[BlockHash]
    stored_writes: int

    def computed(self, rid: str, block_ids: list[int]) -> None: ...
    def finished(self, rid: str) -> None: ...
    def step(self, tokens: int, allocated: list[int]) -> None: ...
    def flush(self) -> None:
        """Deliver the receipts of the last step's stores (end of the trace)."""


class KvtoolDriver(Driver):
    def __init__(self, pool: LinkedPool, extra: dict[str, Any] | None = None) -> None:
        config = ConnectorConfig.from_extra_config(extra or {})
        store = StoreIndex(1 << 40, 1, "bench")
        self.manager = LazyOffloadManager(
            config, pool, store, group_tokens_per_block=[TOKENS_PER_BLOCK]
        )
        self.pool = pool
        self.stored_hashes = set()
        self.stored_writes = 0
        self._receipts: list[JobReport] = []
        self._inflight: dict[int, tuple[BlockHash, ...]] = {}

    def computed(self, rid: str, block_ids: list[int]) -> None:
        self.manager.buffer_blocks(rid, block_ids)

    def finished(self, rid: str) -> None:
        self.manager.on_request_finished(rid)

    def flush(self) -> None:
        self.manager.on_job_reports(self._receipts)
        for report in self._receipts:
            self.stored_hashes.update(self._inflight.pop(report.job_id))
        self._receipts = []

    def step(self, tokens: int, allocated: list[int]) -> None:
        self.flush()
        result = self.manager.step(StepInput(tokens, allocated))
        self._receipts = [JobReport(job.job_id, True) for job in result.store_jobs]
        for job in result.store_jobs:
            self._inflight[job.job_id] = tuple(k.block_hash for k in job.keys)
            self.stored_writes += len(job.block_ids)


class LMCacheDriver(Driver):
    """LMCache's EVICTION_AWARE policy behind a minimal manager stand-in
    (lazy-offload.md §1.4 step 8: touch, re-check, coalesce, unpin on receipt)."""

    def __init__(self, pool: LinkedPool, lm: types.SimpleNamespace) -> None:
        config = lm.ea.EvictionAwarePolicyConfig.from_configs({})
        self.policy = lm.ea.EvictionAwareStoreQueue(config, pool)
        self.lm = lm
        self.pool = pool
        self.stored_hashes = set()
        self.stored_writes = 0
        self._tokens: dict[str, int] = {}
        self._finished: set[str] = set()
        self._pinned: dict[str, list[Block]] = {}
        self._receipts: list[str] = []

    def computed(self, rid: str, block_ids: list[int]) -> None:
        start = self._tokens.get(rid, 0)
        end = start + TOKENS_PER_BLOCK * len(block_ids)
        self._tokens[rid] = end
        hashes = {b: self.pool.blocks[b].block_hash for b in block_ids}
        self.policy.add(_Meta(rid, _Op(start, end)), hashes)

    def finished(self, rid: str) -> None:
        self._finished.add(rid)

    def flush(self) -> None:
        for rid in self._receipts:
            self.pool.free_blocks(self._pinned.pop(rid))
        self._receipts = []

    def step(self, tokens: int, allocated: list[int]) -> None:
        self.flush()
        signals = self.lm.base.DrainSignals(
            new_blocks_allocated=len(allocated),
            est_next_step_blocks=math.ceil(tokens / TOKENS_PER_BLOCK),
            finished_request_ids=self._finished,
            blocked_request_ids=set(self._pinned),
        )
        drain = self.policy.drain(signals)
        for item in drain.items:
            pinned: list[Block] = []
            for _meta, snapshot in item.metadatas:
                blocks = [self.pool.blocks[b] for b in snapshot]
                self.pool.touch(blocks)
                if any(
                    self.pool.blocks[b].block_hash != h or h is None for b, h in snapshot.items()
                ):
                    self.pool.free_blocks(blocks)
                    break
                pinned.extend(blocks)
                self.stored_hashes.update(snapshot.values())  # stored once the receipt arrives
                self.stored_writes += len(blocks)
            if pinned:
                self._pinned[item.request_id] = pinned
                self._receipts.append(item.request_id)


# --------------------------------------------------------------------------- scenarios


def step_cost(
    driver_factory: Callable[[LinkedPool], Driver], pending_ops: int, steps: int
) -> float:
    """Mean ms per step with ``pending_ops`` 2-block ops buffered by running requests."""
    ops_per_request = 10
    pool = LinkedPool(2 * pending_ops + DECODE_BLOCKS_PER_STEP * (steps + 10) + 16)
    driver = driver_factory(pool)
    for r in range(pending_ops // ops_per_request):
        rid = f"held{r}"
        for op in range(ops_per_request):
            ids = pool.allocate(2)
            assert ids is not None
            for i, block in enumerate(ids):
                pool.set_hash(block, (rid, op, i))
            driver.computed(rid, ids)
    timings = []
    tokens = DECODE_BLOCKS_PER_STEP * TOKENS_PER_BLOCK
    for n in range(steps + 3):
        allocated = pool.allocate(DECODE_BLOCKS_PER_STEP)
        assert allocated is not None
        start = time.perf_counter()
        driver.step(tokens, allocated)
        if n >= 3:  # warm-up: EWMA seeding, first-touch allocations
            timings.append(time.perf_counter() - start)
    return statistics.mean(timings) * 1e3


@dataclass
class _Live:
    rid: str
    blocks: list[int] = field(default_factory=list)
    chain: list[Any] = field(default_factory=list)
    steps_left: int = 0


def _grow(
    driver: Driver, pool: LinkedPool, req: _Live, contents: list[Any], allocated: list[int]
) -> bool:
    """Compute full blocks for ``req`` (prefix-cache hits touch the cached block)."""
    new_ids = []
    for content in contents:
        block_hash = (tuple(req.chain), content)
        cached = pool.cached.get(block_hash)
        if cached is not None and pool.blocks[cached].block_hash == block_hash:
            pool.touch([pool.blocks[cached]])
            block_id = cached
        else:
            got = pool.allocate(1)
            if got is None:
                return False
            block_id = got[0]
            pool.set_hash(block_id, block_hash)
        allocated.append(block_id)
        req.chain.append(content)
        req.blocks.append(block_id)
        new_ids.append(block_id)
    driver.computed(req.rid, new_ids)
    return True


def churn(driver: Driver, pool: LinkedPool, steps: int, seed: int) -> None:
    """Requests with hot shared prefixes arrive, decode one block per step and finish."""
    rng = random.Random(seed)
    hot_docs = [[f"doc{d}-{i}" for i in range(8)] for d in range(3)]
    live: list[_Live] = []
    serial = 0

    def retire(req: _Live) -> None:
        driver.finished(req.rid)
        pool.free_blocks([pool.blocks[b] for b in reversed(req.blocks)])

    for _ in range(steps):
        allocated: list[int] = []
        if len(live) < 16 and rng.random() < 0.5:
            serial += 1
            req = _Live(f"req{serial}", steps_left=rng.randint(5, 30))
            prompt: list[Any] = list(rng.choice(hot_docs)) if rng.random() < 0.5 else []
            prompt += [f"u{serial}-{i}" for i in range(rng.randint(4, 24))]
            if _grow(driver, pool, req, prompt, allocated):
                live.append(req)
            else:
                retire(req)
        for req in list(live):
            req.steps_left -= 1
            decode = [f"{req.rid}-d{len(req.chain)}"]
            if req.steps_left <= 0 or not _grow(driver, pool, req, decode, allocated):
                live.remove(req)
                retire(req)
        driver.step(TOKENS_PER_BLOCK * len(allocated), allocated)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer steps (under a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kvtool" / "bench")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)

    lm = load_lmcache(args.cache)
    steps = 10 if args.quick else 30
    out: dict[str, float | int] = {}
    for label, n in (("10k", 10_000), ("50k", 50_000)):
        console.print(f"step cost with {n} pending ops ...")
        kv = step_cost(lambda pool: KvtoolDriver(pool), n, steps)
        lc = step_cost(lambda pool: LMCacheDriver(pool, lm), n, steps)
        out[f"kvtool_step_ms_{label}"] = round(kv, 4)
        out[f"lmcache_step_ms_{label}"] = round(lc, 4)
        out[f"step_ratio_{label}"] = round(kv / lc, 5)

    trace_steps = 800 if args.quick else 3000
    console.print(f"churn trace, {trace_steps} steps ...")
    for name, make in (
        ("kvtool", lambda p: KvtoolDriver(p)),
        ("lmcache", lambda p: LMCacheDriver(p, lm)),
    ):
        pool = LinkedPool(1024)
        driver = make(pool)
        churn(driver, pool, trace_steps, seed=7)
        driver.flush()
        out[f"{name}_blocks_stored"] = len(driver.stored_hashes)
        out[f"{name}_block_writes"] = driver.stored_writes
    out["blocks_stored_ratio"] = round(
        out["kvtool_blocks_stored"] / max(1, out["lmcache_blocks_stored"]), 4
    )

    if args.json:
        print(json.dumps(out))
    else:
        for label in ("10k", "50k"):
            console.print(
                f"{label} pending ops: kvtool {out[f'kvtool_step_ms_{label}']:.3f} ms/step, "
                f"LMCache {LMCACHE_VERSION} {out[f'lmcache_step_ms_{label}']:.3f} ms/step, "
                f"ratio {out[f'step_ratio_{label}']:.4f} (target <= 0.1)"
            )
        console.print(
            f"churn: distinct blocks stored kvtool {out['kvtool_blocks_stored']} vs LMCache "
            f"{out['lmcache_blocks_stored']} (ratio {out['blocks_stored_ratio']}, target >= 1); "
            f"block writes {out['kvtool_block_writes']} vs {out['lmcache_block_writes']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
