"""Prefix-chain hashes of a request's blocks, each shared segment hashed once.

A block's hash stands for every token up to its end, as vLLM's chained block hash
does: the chain of segments (key and length) so far, and the end offset. The
output is one more segment, keyed by ``output_key`` when later prompts continue it,
else private to the request. The chain is a BLAKE2 digest, not Python's ``hash``
of the key (randomised per process), so every run and every ``--jobs`` process
gives the same hashes and the same results.

Traces share prefixes at several levels (a system prompt, a document, a
conversation's earlier turns), so most segments of a request were hashed for an
earlier one: a segment's chain and the hashes of the blocks ending in it depend
only on the chain before it, where it starts, its key and its length, and are
kept for reuse (bounded: :data:`CACHE_UNITS`), which halves what hashing a
million requests costs.
"""

from __future__ import annotations

from collections.abc import Hashable
from hashlib import blake2b

from kvtool.simulate.trace import Request

CACHE_UNITS = 1 << 17
"""The segment cache's bound: a segment costs one unit plus one per block hash it
keeps, so the cache holds at most 128 Ki segments (about 32 MiB, one-block
segments) or 128 Ki block hashes. A full cache is emptied, not pruned entry by
entry: a hot system prompt or document is hashed again once per refill (once in
tens of thousands of requests), and no hit pays for keeping an eviction order."""

_SegmentKey = tuple[int, int, str, int]  # chain before, start offset, key, tokens
_SegmentHashes = tuple[int, tuple[Hashable, ...]]  # chain after, hashes of blocks ending in it
_from_bytes = int.from_bytes


class BlockHasher:
    """Hashes of every full block of a request's prompt plus output (module docstring)."""

    def __init__(self, block_size: int, cache_units: int = CACHE_UNITS) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self._limit = cache_units
        self._held = 0  # units the cache holds
        self._segments: dict[_SegmentKey, _SegmentHashes] = {}

    def hashes(self, request: Request) -> list[Hashable]:
        out: list[Hashable] = []
        chain = start = 0
        cached = self._segments.get
        for key, tokens in request.segments:
            entry = (chain, start, key, tokens)
            found = cached(entry)
            if found is None:
                found = self._segment(chain, start, key, tokens)
                self._keep(entry, found)
            chain, blocks = found
            out += blocks
            start += tokens
        # The output is private to the request unless a later prompt continues it.
        output_key, tokens = request.output_key, request.output_tokens
        if output_key is None:
            out += self._segment(chain, start, f"{request.id}\x00output", tokens)[1]
            return out
        entry = (chain, start, output_key, tokens)
        found = cached(entry)
        if found is None:
            found = self._segment(chain, start, output_key, tokens)
            self._keep(entry, found)
        out += found[1]
        return out

    def _segment(self, chain: int, start: int, key: str, tokens: int) -> _SegmentHashes:
        text = f"{chain}\x00{tokens}\x00{key}".encode()
        chain = _from_bytes(blake2b(text, digest_size=8).digest(), "little")
        size = self.block_size
        ends = range((start // size + 1) * size, start + tokens + 1, size)
        return chain, tuple([hash((chain, end)) for end in ends])

    def _keep(self, entry: _SegmentKey, found: _SegmentHashes) -> None:
        units = len(found[1]) + 1
        if units > self._limit:
            return
        if self._held + units > self._limit:
            self._segments.clear()
            self._held = 0
        self._segments[entry] = found
        self._held += units
