"""The KV block size vLLM 0.32 runs with, and why (``Platform.update_block_size_for_backend``).

Three steps, as vLLM takes them (``platforms/interface.py``):

1. ``--block-size`` when given; else the attention backend's preferred block: the
   default 16 when its kernel accepts it, else its smallest kernel block (FlashMLA: 64).
2. Attention + state hybrids: the block grows, in steps of the backend's kernel block
   (at least 128 for MLA hybrids), until one layer's attention page covers one state
   page; the state page is then padded to exactly that size. This step overrides a
   pinned ``--block-size`` that is too small, as vLLM does.
3. Nothing else: mixed page sizes among attention layers are reconciled later, per
   KV cache group (:mod:`kvtool.sizing.kv_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtool.errors import KvtoolError
from kvtool.sizing.backends import Backend, preferred_block_for
from kvtool.sizing.layer_pages import LayerPages


@dataclass(frozen=True)
class BlockChoice:
    """The block size, the reason in words, and the padded state page (0 without state)."""

    block_size: int
    reason: str
    state_page_bytes: int = 0  # one layer's unpadded state page on one rank
    state_page_padded_bytes: int = 0  # what vLLM allocates per state page


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def choose_block_size(
    pages: tuple[LayerPages, ...],
    backend: Backend,
    pinned: int | None,
    default_block_size: int,
    mla: bool,
    layer_backends: tuple[Backend, ...] = (),
) -> BlockChoice:
    """vLLM's block size for these layers on ``backend`` (``pinned`` = ``--block-size``).

    ``layer_backends`` are the backends of other cache layers (the DSA indexer's): the
    block is then one every backend takes.
    """
    backends = [backend, *(b for b in layer_backends if b != backend)]
    names = " and ".join(b.name for b in backends)
    if pinned is not None:
        block, reason = pinned, f"--block-size {pinned}"
    else:
        block = preferred_block_for(backends, default_block_size)
        reason = (
            f"vLLM default {default_block_size}, accepted by {names}"
            if block == default_block_size
            else f"{names} kernels take blocks of {block}"
        )
    states = [p.state_bytes for p in pages if p.kind == "state"]
    attention = [p.bytes_per_token for p in pages if p.kind != "state"]
    if not states or not attention:
        _check_kernel_blocks(block, backends, pinned)
        return BlockChoice(block, reason)
    state_page = max(states)
    attn_page_1 = attention[0]  # vLLM sizes it from the model's one head count and size
    alignment = max(backend.smallest_kernel_block, block)
    if mla:
        alignment = max(alignment, 128)
    needed = alignment * _cdiv(state_page, alignment * attn_page_1)
    needed = backend.smallest_kernel_block * _cdiv(needed, backend.smallest_kernel_block)
    if block < needed:
        reason = (
            f"raised from {block} ({reason}) to {needed} so that one attention page "
            f"({attn_page_1:,} B/token) covers one state page ({state_page:,} B), "
            f"in steps of {alignment}"
        )
        block = needed
    _check_kernel_blocks(block, backends, pinned)
    # block >= needed, so the attention page always covers the state page here.
    return BlockChoice(block, reason, state_page, block * attn_page_1)


def _check_kernel_blocks(block: int, backends: list[Backend], pinned: int | None) -> None:
    """Refuse a pinned block vLLM cannot split into kernel blocks for every backend.

    vLLM runs a block as kernel blocks that divide it (``select_common_block_size``) and
    fails at start-up when some backend has none; a block vLLM chose itself always fits.
    """
    rejecting = [b for b in backends if not b.accepts_block(block)]
    if pinned is not None and rejecting:
        raise KvtoolError(
            f"--block-size {pinned}: vLLM finds no kernel block that divides {block} for "
            + ", ".join(f"{b.name} (takes {b.describe_blocks()})" for b in rejecting)
        )
