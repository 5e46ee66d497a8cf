"""What the lazy-offload manager needs from the engine's GPU block pool.

:class:`BlockPoolView` is the whole contract: read a block's prefix-cache hash
and walk the free queue from its eviction head. It takes no references: the
manager never holds an engine block (see :mod:`kvtool.connector.manager`).
The vLLM adapter implements it over ``vllm.v1.core.block_pool.BlockPool``;
:class:`InMemoryBlockPool` implements it for tests and benchmarks and
reproduces vLLM's free-queue behaviour (FreeKVCacheBlockQueue, https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/core/kv_cache_utils.py):

- allocation pops blocks from the queue head and clears the hash of a block
  that is handed out again (its old content is being overwritten);
- freeing appends hashed blocks at the tail and puts hash-less blocks at the
  head; vLLM frees a finished request's blocks in reverse order, so its last
  block lands nearest the head;
- touching a block with reference count 0 (a prefix-cache hit) takes it out
  of the queue.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

BlockHash = Hashable
"""A prefix-cache hash (vLLM: 32 bytes plus the KV group id). ``None`` means unhashed."""


@runtime_checkable
class BlockPoolView(Protocol):
    """The engine's block pool as the manager sees it (scheduler process only)."""

    def block_hash(self, block_id: int) -> BlockHash | None:
        """The block's current prefix-cache hash, or None when it carries none.

        A block whose content was recycled reports a different hash or None:
        equality with an earlier snapshot is what proves the KV is unchanged.
        """

    @property
    def num_free(self) -> int:
        """Blocks in the free queue now: a block freed next lands behind them. O(1)."""

    def iter_eviction_order(self) -> Iterator[int]:
        """Free block ids from the eviction head (next victim first) onwards.

        Lazy: callers stop after the few blocks they care about, so the cost is
        proportional to how far they read, never to the queue length.
        """


@dataclass
class _Block:
    ref_cnt: int = 0
    block_hash: BlockHash | None = None


class PoolExhaustedError(RuntimeError):
    """More blocks were requested than the free queue holds."""


class InMemoryBlockPool:
    """A vLLM-like block pool for tests and benchmarks (see the module docstring).

    Invariant: a block is in the free queue exactly when its reference count is
    0, and the queue order is the eviction order.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self._blocks = [_Block() for _ in range(num_blocks)]
        # OrderedDict as an O(1) doubly linked list: first key = eviction head.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._by_hash: dict[BlockHash, int] = {}

    # --- BlockPoolView -------------------------------------------------------

    def block_hash(self, block_id: int) -> BlockHash | None:
        return self._blocks[block_id].block_hash

    def iter_eviction_order(self) -> Iterator[int]:
        return iter(self._free)

    # --- engine-side behaviour -----------------------------------------------

    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def ref_cnt(self, block_id: int) -> int:
        return self._blocks[block_id].ref_cnt

    def allocate(self, n: int) -> list[int]:
        """Hand out ``n`` blocks from the eviction head, clearing recycled hashes."""
        if n > len(self._free):
            raise PoolExhaustedError(f"asked for {n} blocks, {len(self._free)} free")
        out = []
        for _ in range(n):
            block_id, _ = self._free.popitem(last=False)
            block = self._blocks[block_id]
            if block.block_hash is not None:
                self._forget_hash(block_id)
            block.ref_cnt = 1
            out.append(block_id)
        return out

    def set_hash(self, block_id: int, block_hash: BlockHash) -> None:
        """Mark a block full with the given prefix-cache hash (vLLM: at scheduling)."""
        block = self._blocks[block_id]
        if block.block_hash is not None:
            self._forget_hash(block_id)
        block.block_hash = block_hash
        self._by_hash.setdefault(block_hash, block_id)

    def cached_block(self, block_hash: BlockHash) -> int | None:
        """The block holding ``block_hash``, if the prefix cache still has it."""
        return self._by_hash.get(block_hash)

    def touch(self, block_ids: Sequence[int]) -> None:
        """Take a reference; a block at reference count 0 leaves the free queue."""
        for block_id in block_ids:
            block = self._blocks[block_id]
            if block.ref_cnt == 0:
                del self._free[block_id]
            block.ref_cnt += 1

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop a reference; at 0 hashed blocks go to the tail, others to the head.

        Pass a request's blocks in reverse order, as vLLM does at finish.
        """
        for block_id in block_ids:
            block = self._blocks[block_id]
            if block.ref_cnt <= 0:
                raise RuntimeError(f"block {block_id} freed more often than referenced")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._free[block_id] = None
                if block.block_hash is None:
                    self._free.move_to_end(block_id, last=False)

    def reset_prefix_cache(self) -> bool:
        """Clear every hash, as vLLM does; refused (False) while any block is referenced."""
        if any(block.ref_cnt for block in self._blocks):
            return False
        for block in self._blocks:
            block.block_hash = None
        self._by_hash.clear()
        return True

    def _forget_hash(self, block_id: int) -> None:
        block = self._blocks[block_id]
        if self._by_hash.get(block.block_hash) == block_id:
            del self._by_hash[block.block_hash]
        block.block_hash = None
