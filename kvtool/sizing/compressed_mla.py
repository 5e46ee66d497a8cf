"""DeepSeek-V4's cache layers as vLLM 0.32 registers them, one :class:`LayerCache` each.

Per decoder layer i with ratio r = ``compress_ratios[i]`` (vLLM v0.32.0,
``models/deepseek_v4/attention.py``, ``models/deepseek_v4/compressor.py`` and
``v1/attention/backends/mla/sparse_swa.py``), in registration order:

- r > 1: the compressed latent (``MLAAttentionSpec``, one state per r tokens, blocks of
  ``compressed_block`` tokens);
- every layer: the sliding-window latent (``SlidingWindowMLASpec``, ``window_block``);
- r > 1: the compressor's float32 state (``SlidingWindowMLASpec``: 2 x c x head_dim per
  slot, c = 2 for r = 4 else 1, window c x r, block 4 for r = 4, 8 for r = 128);
- r = 4: the indexer's uint8 key cache (``MLAAttentionSpec`` like the latent) and the
  indexer compressor's float32 state (2 x 2 x index_head_dim, window 2 x r, block 4).

The caches are laid out as fp8_ds_mla, the only layout FlashMLA runs DeepSeek-V4 with: a
latent state is 584 B (448 B fp8 NoPE, 128 B bf16 RoPE, 8 B scales) and every page is
padded to a multiple of 576 B.
"""

from __future__ import annotations

from kvtool.sizing.packed_groups import LayerCache
from kvtool.sizing.spec import CompressedMlaLayout

DS_MLA_STATE_BYTES = 584
DS_MLA_ALIGNMENT = 576
STATE_ELEMENT_BYTES = 4  # compressor states are float32
COMPRESS_RATIOS = (4, 128)  # compressor.py asserts these; 0 and 1 mean uncompressed
INDEXED_RATIO = 4  # layers with this ratio carry the DSA indexer


def _padded(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _compressor_block(ratio: int) -> int:
    """compressor.py: state pages must match a KV page, so blocks of 4 (r=4) or 8 (r=128)."""
    return 4 if ratio == INDEXED_RATIO else 8


def layer_caches(layout: CompressedMlaLayout) -> tuple[LayerCache, ...]:
    """Every cache layer of one worker, in vLLM's registration order."""
    align, state = DS_MLA_ALIGNMENT, DS_MLA_STATE_BYTES
    caches: list[LayerCache] = []
    for ratio in layout.compress_ratios:
        compressed = ratio > 1
        if compressed:
            states = layout.compressed_block // ratio
            caches.append(
                LayerCache(
                    "mla", "mla", layout.compressed_block, _padded(states * state, align), align
                )
            )
        caches.append(
            LayerCache(
                "sliding",
                "sliding",
                layout.window_block,
                _padded(layout.window_block * state, align),
                align,
                layout.sliding_window,
            )
        )
        if not compressed:
            continue
        overlap = 2 if ratio == INDEXED_RATIO else 1
        block = _compressor_block(ratio)
        slot = 2 * overlap * layout.head_dim * STATE_ELEMENT_BYTES
        caches.append(
            LayerCache(
                "sliding", "sliding", block, _padded(block * slot, align), align, overlap * ratio
            )
        )
        if ratio != INDEXED_RATIO:
            continue
        states = layout.compressed_block // ratio
        caches.append(
            LayerCache(
                "indexer",
                "mla",
                layout.compressed_block,
                _padded(states * layout.indexer_key_bytes, align),
                align,
            )
        )
        index_slot = 2 * 2 * layout.index_head_dim * STATE_ELEMENT_BYTES
        caches.append(
            LayerCache(
                "sliding",
                "sliding",
                block,
                _padded(block * index_slot, align),
                align,
                overlap * ratio,
            )
        )
    return tuple(caches)
