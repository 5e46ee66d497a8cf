"""Second derivation for golden sizes: count the bytes of torch tensors shaped like the cache.

Shapes follow the cited layouts (vLLM 0.32 ``v1/kv_cache_interface.py`` pages; Mamba and
GDN state shapes per sizing.md §3.1) and are built from numbers the tests pass in, not
from ``kvtool.sizing``. Tensors live on the ``meta`` device: shapes and dtypes, no memory.
"""

from __future__ import annotations

import torch

ELEMENT_DTYPE = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}


def _nbytes(shape: tuple[int, ...], element_bytes: int) -> int:
    return torch.empty(shape, dtype=ELEMENT_DTYPE[element_bytes], device="meta").nbytes


def kv_page_bytes(tokens: int, kv_heads: int, head_dim: int, element_bytes: int) -> int:
    """One layer's K and V pages for ``tokens`` tokens: two [tokens, heads, head_dim] tensors."""
    return 2 * _nbytes((tokens, kv_heads, head_dim), element_bytes)


def mla_page_bytes(tokens: int, latent_dim: int, element_bytes: int) -> int:
    """One MLA layer's page: a single [tokens, kv_lora_rank + rope] latent tensor."""
    return _nbytes((tokens, latent_dim), element_bytes)


def ds_mla_page_bytes(tokens: int, nope: int, rope: int, scale_block: int) -> int:
    """A FlashMLA-sparse fp8_ds_mla page: fp8 NoPE, one fp32 scale per block, bf16 RoPE."""
    return (
        _nbytes((tokens, nope), 1)
        + _nbytes((tokens, nope // scale_block), 4)
        + _nbytes((tokens, rope), 2)
    )


def dsa_indexer_page_bytes(tokens: int, head_dim: int, scale_block: int) -> int:
    """The DSA indexer's key page: fp8 keys and one fp32 scale per ``scale_block`` values."""
    return _nbytes((tokens, head_dim), 1) + _nbytes((tokens, head_dim // scale_block), 4)


def model_kv_bytes(
    tokens: int, layers: int, kv_heads: int, head_dim: int, element_bytes: int
) -> int:
    return sum(kv_page_bytes(tokens, kv_heads, head_dim, element_bytes) for _ in range(layers))


def mamba1_state_bytes(
    d_inner: int, d_conv: int, d_state: int, conv_bytes: int, ssm_bytes: int
) -> int:
    """Jamba layer: conv [d_inner, d_conv - 1] and SSM [d_inner, d_state]."""
    return _nbytes((d_inner, d_conv - 1), conv_bytes) + _nbytes((d_inner, d_state), ssm_bytes)


def mamba2_state_bytes(
    heads: int,
    head_dim: int,
    groups: int,
    d_state: int,
    d_conv: int,
    conv_bytes: int,
    ssm_bytes: int,
) -> int:
    """Mamba-2 layer: conv [heads*head_dim + 2*groups*d_state, d_conv-1].

    SSM state [heads, head_dim, d_state].
    """
    conv = _nbytes((heads * head_dim + 2 * groups * d_state, d_conv - 1), conv_bytes)
    return conv + _nbytes((heads, head_dim, d_state), ssm_bytes)


def gdn_state_bytes(hk: int, dk: int, hv: int, dv: int, d_conv: int, element_bytes: int) -> int:
    """Gated DeltaNet layer: conv [2*hk*dk + hv*dv, d_conv-1], temporal [hv, dv, dk]."""
    conv = _nbytes((2 * hk * dk + hv * dv, d_conv - 1), element_bytes)
    return conv + _nbytes((hv, dv, dk), element_bytes)


def kda_state_bytes(heads: int, head_dim: int, d_conv: int, conv_bytes: int, ssm_bytes: int) -> int:
    """Kimi Delta Attention layer: conv [3*heads*head_dim, d_conv-1], recurrent [heads, d, d]."""
    conv = _nbytes((3 * heads * head_dim, d_conv - 1), conv_bytes)
    return conv + _nbytes((heads, head_dim, head_dim), ssm_bytes)
