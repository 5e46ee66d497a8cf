"""One TP rank's cache-holding layers as vLLM sees them: a page kind and its bytes.

:func:`layer_pages` turns a :class:`ModelSpec` into the per-layer facts vLLM 0.32 builds
its ``KVCacheSpec`` objects from (``v1/kv_cache_interface.py``): bytes per token of an
attention layer's page (``FullAttentionSpec`` / ``SlidingWindowSpec`` /
``ChunkedLocalAttentionSpec`` / ``MLAAttentionSpec``, also the DSA indexer's) and the
unpadded state bytes of a recurrent layer (``MambaSpec``). Grouping and block sizes are
decided elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvtool.sizing.dtypes import model_dtype_bytes
from kvtool.sizing.spec import AttentionKind, ModelSpec

PageKind = Literal["full", "sliding", "chunked", "mla", "indexer", "state"]


@dataclass(frozen=True)
class LayerPages:
    """``count`` layers on one rank whose pages are alike.

    Attention layers: ``bytes_per_token`` is one layer's page per token (``window`` for
    sliding and chunked-local layers). State layers: ``state_bytes`` is one layer's
    unpadded state per sequence and ``bytes_per_token`` is 0.
    """

    kind: PageKind
    count: int
    bytes_per_token: int = 0
    window: int | None = None
    state_bytes: int = 0
    state_kind: str | None = None  # the state layer's kind (mamba2, gdn, ...): its blocks


_PAGE_KINDS: dict[AttentionKind, PageKind] = {
    AttentionKind.FULL: "full",
    AttentionKind.SLIDING: "sliding",
    AttentionKind.CHUNKED: "chunked",
    AttentionKind.MLA: "mla",
    AttentionKind.INDEXER: "indexer",
}


def layer_page_kind(kind: AttentionKind) -> PageKind:
    """The page kind of an attention group's layers."""
    return _PAGE_KINDS[kind]


def _stage_layers(count: int, pp: int) -> int:
    """Layers of one kind on the first pipeline stage (vLLM splits layers evenly)."""
    return -(-count // pp)


def layer_pages(
    spec: ModelSpec, tp: int, pp: int, kv_bytes: int, conv_dtype: str, ssm_dtype: str
) -> tuple[LayerPages, ...]:
    """The cache-holding layers of one worker (TP rank, first PP stage)."""
    pages: list[LayerPages] = []
    for group in spec.attention:
        pages.append(
            LayerPages(
                kind=_PAGE_KINDS[group.kind],
                count=_stage_layers(group.num_layers, pp),
                bytes_per_token=group.bytes_per_token_per_layer(tp, kv_bytes),
                window=group.sliding_window,
            )
        )
    conv_b = model_dtype_bytes(conv_dtype, "model dtype")
    ssm_b = model_dtype_bytes(ssm_dtype, "SSM state dtype")
    for state in spec.states:
        conv, ssm = state.state_elements_per_rank(tp)
        pages.append(
            LayerPages(
                kind="state",
                count=_stage_layers(state.num_layers, pp),
                state_bytes=conv * conv_b + ssm * ssm_b,
                state_kind=state.kind,
            )
        )
    return tuple(pages)


def as_full_attention(pages: tuple[LayerPages, ...]) -> tuple[LayerPages, ...]:
    """The pages with the hybrid KV cache manager off (``unify_hybrid_kv_cache_specs``).

    Sliding-window and chunked-local layers mixed with full attention become full-attention
    layers: every layer keeps every token in one group. All-sliding models stay as they are.
    """
    kinds = {p.kind for p in pages if p.count}
    if len(kinds) <= 1:
        return pages
    return tuple(
        LayerPages("full", p.count, p.bytes_per_token) if p.kind in ("sliding", "chunked") else p
        for p in pages
    )
