"""Pure sizing formulas, each a small function of plain numbers.

These are the helpers other commands reuse (``kvtool audit`` sizing rules, ``kvtool
launch``): TP-total vs per-rank conversions, KAITO's L1 formula, the native offload
and LMCache MP capacity arithmetic. No I/O, no models; constants come in as arguments.
"""

from __future__ import annotations

import math
from fractions import Fraction


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``value``."""
    return -(-value // multiple) * multiple


# How far (in units in the last place) a product may stray from a whole number and still
# count as that number: a multiplication and a decimal-to-binary conversion each add half.
FLOAT_NOISE_ULPS = 4


def round_up_gib(value: float, decimals: int) -> float:
    """``value`` rounded *up* to ``decimals`` places: a flag's size is never under the tier.

    The result is the double nearest a ``decimals``-place number, so ``str()`` prints it
    short. Float noise (25.874100000000002) does not add a step: a scaled value within a
    few ulps of a whole number is that number. The tolerance is in ulps, not a fixed
    number of places, so a tiny positive size still rounds up instead of down to zero.
    """
    scale: int = 10**decimals
    scaled = value * scale
    nearest = round(scaled)
    if abs(scaled - nearest) <= FLOAT_NOISE_ULPS * math.ulp(scaled):
        return nearest / scale
    return math.ceil(scaled) / scale


def per_rank_gib(total_gib: float, ranks: int) -> float:
    """Per-rank share of a TP-wide total (LMCache in-process, SGLang per-rank sizes)."""
    return total_gib / ranks


def total_from_per_rank_gib(per_rank: float, ranks: int) -> float:
    """TP-wide total from a per-rank size: ``--kv-offloading-size`` = per-rank x TP (F3)."""
    return per_rank * ranks


def kaito_l1_gib(available_gib: float, utilization: float, tp: int) -> float:
    """KAITO's LMCache L1 size: available host RAM x utilization / TP (F4).

    The /TP is KAITO's; with one MP server per pod holding every rank's shard it shrinks
    the pod's tier TP-fold. ``str()`` of the result is KAITO's argv.
    """
    return available_gib * utilization / tp


def native_chunk_bytes(stored_bytes_per_block: int, blocks_per_chunk: int, alignment: int) -> int:
    """Bytes of one native offload chunk: every stored copy of a block group, 4 KiB aligned (F2)."""
    return round_up(stored_bytes_per_block * blocks_per_chunk, alignment)


def native_tokens(size_gib: float, chunk_bytes: int, tokens_per_chunk: int, gib: int) -> int:
    """Tokens a native ``--kv-offloading-size`` of ``size_gib`` holds (whole chunks only)."""
    return math.floor(size_gib * gib) // chunk_bytes * tokens_per_chunk


def native_group_tokens(num_chunks: int, tokens_per_chunk: tuple[int, ...]) -> int:
    """Tokens ``num_chunks`` chunks hold when each KV cache group stores its own chunk per
    block hash: a token takes 1/tokens_per_chunk of a chunk in every group."""
    share = sum(Fraction(1, t) for t in tokens_per_chunk)
    return math.floor(num_chunks / share)


def native_chunks_for_tokens(tokens: int, tokens_per_chunk: tuple[int, ...]) -> int:
    """Chunks ``tokens`` tokens take over every group (inverse of :func:`native_group_tokens`)."""
    return sum(-(-tokens // t) for t in tokens_per_chunk)


def native_size_gib_for_tokens(
    tokens: int, chunk_bytes: int, tokens_per_chunk: int, gib: int
) -> float:
    """Smallest ``--kv-offloading-size`` (GiB) holding ``tokens`` (inverse of F2)."""
    return math.ceil(tokens / tokens_per_chunk) * chunk_bytes / gib


def lmcache_object_bytes(
    chunk_tokens: int, bytes_per_token_piece: int, extra_bytes: int, alignment: int
) -> int:
    """Bytes of one LMCache MP object: one rank's piece of one chunk, aligned (F5)."""
    return round_up(chunk_tokens * bytes_per_token_piece + extra_bytes, alignment)


def lmcache_tokens(
    l1_gib: float, object_bytes: int, pieces: int, chunk_tokens: int, gib: int
) -> int:
    """Tokens an L1 of ``l1_gib`` holds when each chunk is stored as ``pieces`` objects (F5)."""
    return math.floor(l1_gib * gib) // (object_bytes * pieces) * chunk_tokens


def bench_num_prefixes(gpu_tokens: int, cpu_tokens: int, prefix_len: int) -> tuple[int, int]:
    """(min, max) prefix count for a prefix-repetition benchmark (F7).

    The minimum makes the aggregate prefix tokens exceed twice the GPU tier, so prefixes are
    evicted to the CPU tier; the maximum keeps them all within the CPU tier.
    """
    return 2 * gpu_tokens // prefix_len + 1, cpu_tokens // prefix_len


def transfer_seconds(num_bytes: float, gigabytes_per_second: float) -> float:
    """Seconds to move ``num_bytes`` at a decimal GB/s rate."""
    return num_bytes / (gigabytes_per_second * 1e9)
