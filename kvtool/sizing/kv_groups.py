"""KV cache groups and the shared block pool, as vLLM 0.32's hybrid KV cache manager builds them.

Mirrors ``v1/core/kv_cache_utils.py`` ``get_kv_cache_groups`` (vLLM v0.32.0):

- every layer alike, or all layers of one type (``UniformTypeKVCacheSpecs``): one group
  holding every layer; a pool block is one block of every layer;
- otherwise (sliding + full, attention + state, chunked-local + full) page sizes are
  unified first (``unify_kv_cache_spec_page_size``: a smaller attention page whose size
  divides the largest gets a proportionally larger block; state pages and other pages are
  padded), then layers of each kind are split into groups of ``group_size`` layers, where
  ``group_size`` is the smallest kind's layer count (the largest when that is under 1.5x
  the smallest). One pool block is one group's pages: ``group_size`` pages.

``num_gpu_blocks = KV memory // pool_block_bytes`` (``get_kv_cache_config_from_groups``),
and vLLM logs its token capacity as ``num_blocks / blocks one max-length request needs
(summed over groups) x max_model_len`` (``get_max_concurrency_for_kv_cache_config``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtool.sizing.layer_pages import LayerPages, PageKind


@dataclass(frozen=True)
class KvGroup:
    """One KV cache group: ``layers`` layers of one kind sharing a block table."""

    kind: PageKind
    layers: int  # real layers; the last group of a kind may have padding slots
    slots: int  # layers the group's pages are laid out for (group_size)
    block_size: int  # tokens per block for this group's layers
    page_bytes: int  # one layer's page (padded) on one rank; the largest when they differ
    window: int | None = None
    state_kind: str | None = None  # state groups: the layer kind (prefill checkpoint blocks)
    # (page bytes, layers) per page size, when the group's layers differ in page size
    # (vLLM's UniformTypeKVCacheSpecs: per-layer heads, sparse MLA's latent + indexer)
    layer_pages: tuple[tuple[int, int], ...] = ()

    @property
    def group_bytes(self) -> int:
        """One block of every layer slot of the group: the group's share of a pool block."""
        if self.layer_pages:
            return sum(page * layers for page, layers in self.layer_pages)
        return self.page_bytes * self.slots

    def blocks_per_request(
        self, max_model_len: int, in_flight_tokens: int, mamba_align: bool,
        checkpoint_blocks: int = 0,
    ) -> int:
        """Blocks one request of ``max_model_len`` tokens holds (``max_memory_usage_bytes``).

        Sliding and chunked windows also reserve for the ``in_flight_tokens`` scheduled but
        not yet settled; state groups in align mode (prefix caching) hold two blocks plus
        the layer kind's prefill checkpoint blocks (``MambaSpec``), else one.
        """
        if self.kind == "state":
            return 2 + checkpoint_blocks if mamba_align else 1
        if self.kind in ("full", "mla", "indexer") or self.window is None:
            return -(-max_model_len // self.block_size)
        if self.kind == "sliding":
            tokens = min(self.window - 1 + in_flight_tokens, max_model_len)
            return -(-tokens // self.block_size) + 1
        tokens = min(self.window + in_flight_tokens, max_model_len)
        return -(-tokens // self.block_size)


@dataclass(frozen=True)
class KvPool:
    """The groups and the bytes one block of the shared pool takes on one worker."""

    groups: tuple[KvGroup, ...]
    pool_block_bytes: int

    def num_blocks(self, kv_memory_bytes: int) -> int:
        return kv_memory_bytes // self.pool_block_bytes

    def blocks_per_request(
        self, formula: str, max_model_len: int, in_flight_tokens: int, mamba_align: bool,
        checkpoint_blocks: dict[str, int],
    ) -> int:
        """Pool blocks one max-length request takes, as the release counts them.

        ``per_group`` (vLLM >= 0.27): each group's blocks, summed. ``pooled``: the bytes
        every group's layer needs, summed, over one page of the first group, rounded up once.
        """
        needed = [
            (g.blocks_per_request(max_model_len, in_flight_tokens, mamba_align,
                                  checkpoint_blocks.get(g.state_kind or "", 0)), g.page_bytes)
            for g in self.groups
        ]
        if formula == "per_group":
            return sum(blocks for blocks, _ in needed)
        total = sum(blocks * page for blocks, page in needed)
        return -(-total // self.groups[0].page_bytes)


def _page(p: LayerPages, block: int, state_page: int) -> int:
    return state_page if p.kind == "state" else p.bytes_per_token * block


# Page kinds vLLM's KVCacheSpecRegistry files under one uniform type: the DSA indexer's
# cache is an MLAAttentionSpec like the latent beside it.
_UNIFORM_TYPE: dict[PageKind, PageKind] = {"indexer": "mla"}


def _one_type(pages: tuple[LayerPages, ...]) -> bool:
    """vLLM's ``UniformTypeKVCacheSpecs.is_uniform_type``: one kind (and one window)."""
    kinds = {(_UNIFORM_TYPE.get(p.kind, p.kind), p.window) for p in pages}
    if len(kinds) != 1:
        return False
    if pages[0].kind == "state":
        return len({p.state_bytes for p in pages}) == 1
    return True


def build_pool(pages: tuple[LayerPages, ...], block: int, state_page: int) -> KvPool:
    """Groups and pool block bytes for one worker's layers at ``block`` tokens per block.

    ``state_page`` is the (padded) bytes of one state layer's page.
    """
    pages = tuple(p for p in pages if p.count)
    if _one_type(pages):
        layers = sum(p.count for p in pages)
        per_block = sum(p.count * _page(p, block, state_page) for p in pages)
        by_page: dict[int, int] = {}
        for p in pages:
            page = _page(p, block, state_page)
            by_page[page] = by_page.get(page, 0) + p.count
        mixed = tuple(sorted(by_page.items(), reverse=True)) if len(by_page) > 1 else ()
        first = pages[0]
        group = KvGroup(
            first.kind, layers, layers, block, max(by_page), first.window, first.state_kind,
            layer_pages=mixed,
        )
        return KvPool((group,), per_block)
    largest = max(_page(p, block, state_page) for p in pages)
    buckets: dict[tuple[PageKind, int | None, int, str | None], list[LayerPages]] = {}
    for p in pages:
        page = _page(p, block, state_page)
        block_g = block
        if p.kind != "state" and page != largest and largest % page == 0:
            block_g = block * (largest // page)  # vLLM scales the block, not the page
        buckets.setdefault((p.kind, p.window, block_g, p.state_kind), []).append(p)
    counts = {key: sum(p.count for p in ps) for key, ps in buckets.items()}
    group_size = min(counts.values())
    if max(counts.values()) < group_size * 1.5:
        group_size = max(counts.values())
    groups: list[KvGroup] = []
    for (kind, window, block_g, state_kind), count in counts.items():
        num_groups = -(-count // group_size)
        for i in range(num_groups):
            # layers[i::num_groups]: the first (count % num_groups) groups get one more
            members = len(range(i, count, num_groups))
            groups.append(
                KvGroup(kind, members, group_size, block_g, largest, window, state_kind)
            )
    return KvPool(tuple(groups), group_size * largest)
