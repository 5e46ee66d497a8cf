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
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Protocol, cast, runtime_checkable

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


class PoolExhaustedError(RuntimeError):
    """More blocks were requested than the free queue holds."""


class InMemoryBlockPool:
    """A vLLM-like block pool for tests and benchmarks (see the module docstring).

    Invariant: a block is in the free queue exactly when its reference count is
    0, and the queue order is the eviction order. Per-block state is kept in two
    lists indexed by block id rather than an object per block: a simulation of a
    million requests makes tens of millions of these reads and writes.
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self._ref_cnt = [0] * num_blocks
        self._hash: list[BlockHash | None] = [None] * num_blocks
        # OrderedDict as an O(1) doubly linked list: first key = eviction head.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._by_hash: dict[BlockHash, int] = {}
        # BlockPoolView.block_hash is the list's own item lookup, a call into C: the
        # manager reads a hash for every block it buffers, checks and stores.
        self.block_hash: Callable[[int], BlockHash | None] = self._hash.__getitem__

    # --- BlockPoolView -------------------------------------------------------

    def iter_eviction_order(self) -> Iterator[int]:
        return iter(self._free)

    # --- engine-side behaviour -----------------------------------------------

    @property
    def num_blocks(self) -> int:
        return len(self._hash)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def ref_cnt(self, block_id: int) -> int:
        return self._ref_cnt[block_id]

    def free_among(self, block_ids: Iterable[int]) -> int:
        """How many of these blocks sit in the free queue (reference count 0)."""
        return sum(map(self._free.__contains__, block_ids))

    def allocate(self, n: int) -> list[int]:
        """Hand out ``n`` blocks from the eviction head, clearing recycled hashes."""
        free = self._free
        if n > len(free):
            raise PoolExhaustedError(f"asked for {n} blocks, {len(free)} free")
        hashes, ref_cnt, by_hash, pop = self._hash, self._ref_cnt, self._by_hash, free.popitem
        out = []
        for _ in range(n):
            block_id = pop(last=False)[0]
            block_hash = hashes[block_id]
            if block_hash is not None:  # recycled: its old content is being overwritten
                if by_hash.get(block_hash) == block_id:
                    del by_hash[block_hash]
                hashes[block_id] = None
            ref_cnt[block_id] = 1
            out.append(block_id)
        return out

    def set_hash(self, block_id: int, block_hash: BlockHash) -> None:
        """Mark a block full with the given prefix-cache hash (vLLM: at scheduling)."""
        self.set_hashes((block_id,), (block_hash,))

    def set_hashes(self, block_ids: Iterable[int], block_hashes: Iterable[BlockHash]) -> None:
        """:meth:`set_hash` for each pair, in order."""
        hashes, by_hash = self._hash, self._by_hash
        for block_id, block_hash in zip(block_ids, block_hashes, strict=True):
            old = hashes[block_id]
            if old is not None and by_hash.get(old) == block_id:
                del by_hash[old]
            hashes[block_id] = block_hash
            if block_hash not in by_hash:
                by_hash[block_hash] = block_id

    def cached_block(self, block_hash: BlockHash) -> int | None:
        """The block holding ``block_hash``, if the prefix cache still has it."""
        return self._by_hash.get(block_hash)

    def cached_prefix(self, block_hashes: Sequence[BlockHash]) -> list[int]:
        """The blocks holding the longest leading run of ``block_hashes`` the prefix
        cache still has (vLLM's prefix-cache hit), in order."""
        found = list(map(self._by_hash.get, block_hashes))  # in C: no Python call per block
        if None in found:
            del found[found.index(None):]
        return cast(list[int], found)

    def touch(self, block_ids: Sequence[int]) -> None:
        """Take a reference; a block at reference count 0 leaves the free queue."""
        ref_cnt, free = self._ref_cnt, self._free
        for block_id in block_ids:
            if ref_cnt[block_id] == 0:
                del free[block_id]
            ref_cnt[block_id] += 1

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop a reference; at 0 hashed blocks go to the tail, others to the head.

        Pass a request's blocks in reverse order, as vLLM does at finish.
        """
        ref_cnt, hashes, free = self._ref_cnt, self._hash, self._free
        for block_id in block_ids:
            count = ref_cnt[block_id]
            if count <= 0:
                raise RuntimeError(f"block {block_id} freed more often than referenced")
            ref_cnt[block_id] = count - 1
            if count == 1:
                free[block_id] = None
                if hashes[block_id] is None:
                    free.move_to_end(block_id, last=False)

    def reset_prefix_cache(self) -> bool:
        """Clear every hash, as vLLM does; refused (False) while any block is referenced."""
        if any(self._ref_cnt):
            return False
        self._hash[:] = [None] * len(self._hash)  # in place: block_hash reads this list
        self._by_hash.clear()
        return True
