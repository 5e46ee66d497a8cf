"""KV cache groups for block-outermost packing of mixed page sizes, as vLLM 0.32 builds them.

Follows ``_get_packed_kv_cache_groups`` in ``v1/core/kv_cache_utils.py`` (vLLM v0.32.0),
which ``get_kv_cache_groups`` takes when the KV cache layout is block-outermost (BLHNC,
the layout DeepSeek-V4's backends declare) and the layers' pages differ in size:

1. Layers are bucketed greedily, in registration order, into uniform-type buckets
   (``UniformTypeKVCacheSpecs.is_uniform_type``: same block size, same spec type; sliding
   windows must match).
2. A bucket is *balanced* when each of its page sizes has the same number of layers (a
   repeating 1:1 pattern). The balanced buckets with more than one page size set a floor on
   the pattern repeats per group; ``_approximate_gcd`` of the balanced buckets' repeat
   counts (least total padding, ties to the larger) above that floor is the repeats per
   group, and each balanced bucket splits into ``ceil(repeats / that)`` groups. Unbalanced
   buckets stay whole.
3. State buckets (recurrent or circular-buffer state, or sliding-window buckets when no
   balanced bucket mixes page sizes) are split so that a group fits the block the other
   buckets already need.

One pool block holds the pages of the widest group, rounded up to the least common
multiple of the layers' page alignments (``get_kv_cache_config_from_groups``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kvtool.sizing.kv_groups import KvGroup, KvPool
from kvtool.sizing.layer_pages import PageKind


@dataclass(frozen=True)
class LayerCache:
    """One cache layer as vLLM registers it: its spec type, block and padded page."""

    kind: PageKind
    spec_type: str  # vLLM's KVCacheSpec type the registry groups by ("mla", "sliding", "state")
    block_size: int
    page_bytes: int  # padded to ``alignment`` as vLLM pads it
    alignment: int
    window: int | None = None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """The chunk in [lower_bound, max(values)] that pads ``values`` least (ties: larger)."""
    best, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def _uniform(a: LayerCache, b: LayerCache) -> bool:
    return (a.spec_type, a.block_size, a.window) == (b.spec_type, b.block_size, b.window)


@dataclass(frozen=True)
class _Bucket:
    layers: tuple[LayerCache, ...]

    @property
    def by_page(self) -> dict[int, int]:
        return dict(Counter(layer.page_bytes for layer in self.layers))

    @property
    def balanced(self) -> bool:
        return len(set(self.by_page.values())) == 1

    @property
    def repeats(self) -> int:
        """``get_max_layers_per_page_size``: the most layers sharing one page size."""
        return max(self.by_page.values())

    def widest_group_bytes(self, groups: int) -> int:
        return sum(_cdiv(n, groups) * page for page, n in self.by_page.items())


def _buckets(layers: Sequence[LayerCache]) -> list[_Bucket]:
    members: list[list[LayerCache]] = []
    for layer in layers:
        for bucket in members:
            if _uniform(bucket[0], layer):
                bucket.append(layer)
                break
        else:
            members.append([layer])
    return [_Bucket(tuple(m)) for m in members]


def _split(bucket: _Bucket, groups: int) -> list[KvGroup]:
    """The bucket's layers in ``groups`` groups: pattern repeats dealt round-robin."""
    first = bucket.layers[0]
    per_page = list(bucket.by_page.items())
    out: list[KvGroup] = []
    for i in range(groups):
        pages = tuple((page, len(range(i, count, groups))) for page, count in per_page)
        pages = tuple((page, n) for page, n in pages if n)
        layers = sum(n for _, n in pages)
        out.append(
            KvGroup(
                first.kind,
                layers,
                layers,
                first.block_size,
                max(page for page, _ in pages),
                first.window,
                layer_pages=tuple(sorted(pages, reverse=True)) if len(pages) > 1 else (),
            )
        )
    return out


def packed_pool(layers: Sequence[LayerCache]) -> KvPool:
    """vLLM's packed KV cache groups for ``layers`` and the bytes of one pool block."""
    buckets = _buckets(layers)
    floor = max((b.repeats for b in buckets if b.balanced and len(b.by_page) > 1), default=0)
    repeats = approximate_gcd([b.repeats for b in buckets if b.balanced], floor) if floor else None

    def num_groups(bucket: _Bucket) -> int:
        return _cdiv(bucket.repeats, repeats) if bucket.balanced and repeats else 1

    def is_state(bucket: _Bucket) -> bool:
        kind = bucket.layers[0].spec_type
        return kind == "state" or (repeats is None and kind == "sliding")

    anchor = max(
        b.widest_group_bytes(len(b.layers) if is_state(b) else num_groups(b)) for b in buckets
    )
    groups: list[KvGroup] = []
    for bucket in buckets:
        n = num_groups(bucket)
        if is_state(bucket):
            # A state group is capped at the states a block already fits.
            fits = max(anchor // bucket.layers[0].page_bytes, 1)
            n = max(n, _cdiv(len(bucket.layers), fits))
        groups.extend(_split(bucket, n))
    alignment = math.lcm(*(layer.alignment for layer in layers))
    widest = max(g.group_bytes for g in groups)
    return KvPool(tuple(groups), _cdiv(widest, alignment) * alignment)
