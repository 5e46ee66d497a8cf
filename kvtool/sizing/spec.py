"""Model geometry that decides KV-cache bytes: attention layer groups and recurrent-state groups.

A :class:`ModelSpec` is what :mod:`kvtool.sizing.hf_config` extracts from a config.json.
It stores whole-model counts (all heads, all layers); per-rank shapes are derived for a
given tensor-parallel size by the methods here, so one spec serves every deployment.
"""

from __future__ import annotations

from enum import Enum
from typing import ClassVar, Literal

import msgspec


class AttentionKind(str, Enum):
    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"  # chunked local attention (Llama 4): a window that restarts per chunk
    MLA = "mla"
    # The DSA indexer's key cache beside sparse MLA (DeepSeek-V3.2, GLM-5): one fp8 key
    # and its scales per token, replicated on every TP rank like the latent.
    INDEXER = "indexer"


class SpecError(ValueError):
    """A derived geometry field out of range; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Frozen(msgspec.Struct, frozen=True, kw_only=True):
    """Immutable geometry record; construction checks each field's lower bound.

    ``MINIMUMS`` maps a field to the least value it may hold (None is an unset optional
    field and passes); a config.json that yields less raises :class:`SpecError`.
    """

    MINIMUMS: ClassVar[dict[str, int]] = {}

    def __post_init__(self) -> None:
        for field, least in self.MINIMUMS.items():
            value = getattr(self, field)
            if value is not None and value < least:
                raise SpecError(field, f"must be at least {least}, got {value}")


class AttentionGroup(_Frozen, frozen=True, kw_only=True):
    """``num_layers`` attention layers with the same cache geometry.

    Invariant: MLA and indexer groups have ``num_kv_heads == 1`` and ``head_size_v == 0``
    (one vector per token, replicated on every TP rank); sliding groups have a window, and
    chunked-local groups carry their ``attention_chunk_size`` in ``sliding_window``.
    ``token_bytes`` fixes a layer's bytes per token whatever the KV cache dtype: the
    indexer's uint8 cache, or a latent the attention backend packs (fp8_ds_mla).
    """

    MINIMUMS: ClassVar[dict[str, int]] = {
        "num_layers": 1,
        "num_kv_heads": 1,
        "head_size_k": 1,
        "head_size_v": 0,
        "sliding_window": 1,
        "token_bytes": 1,
    }

    kind: AttentionKind
    num_layers: int
    num_kv_heads: int
    head_size_k: int
    head_size_v: int
    sliding_window: int | None = None
    token_bytes: int | None = None

    @property
    def is_local(self) -> bool:
        """The layer attends to a bounded window, not the whole sequence."""
        return self.kind in (AttentionKind.SLIDING, AttentionKind.CHUNKED)

    @property
    def is_replicated(self) -> bool:
        """Every TP rank holds the whole vector (MLA latent, DSA indexer key)."""
        return self.kind in (AttentionKind.MLA, AttentionKind.INDEXER)

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one TP rank holds: a shard, or one replicated head when heads < TP."""
        if self.is_replicated:
            return 1
        return max(1, self.num_kv_heads // tp)

    def elements_per_token_per_layer(self, tp: int) -> int:
        """K plus V elements one rank stores per token per layer."""
        return self.kv_heads_per_rank(tp) * (self.head_size_k + self.head_size_v)

    def logical_elements_per_token_per_layer(self) -> int:
        """Elements per token per layer for the whole model, with no replica counted."""
        heads = 1 if self.is_replicated else self.num_kv_heads
        return heads * (self.head_size_k + self.head_size_v)

    def bytes_per_token_per_layer(self, tp: int, kv_bytes: int) -> int:
        """Bytes one rank stores per token per layer at ``kv_bytes`` per KV element."""
        if self.token_bytes is not None:
            return self.token_bytes
        return self.elements_per_token_per_layer(tp) * kv_bytes

    def logical_bytes_per_token_per_layer(self, kv_bytes: int) -> int:
        """Bytes per token per layer for the whole model, with no replica counted."""
        if self.token_bytes is not None:
            return self.token_bytes
        return self.logical_elements_per_token_per_layer() * kv_bytes


class Mamba1Group(_Frozen, frozen=True, kw_only=True):
    """Mamba-1 layers (Jamba): conv state (d_conv-1) x d_inner, SSM state d_inner x d_state."""

    MINIMUMS: ClassVar[dict[str, int]] = {"num_layers": 1, "d_inner": 1, "d_conv": 2, "d_state": 1}

    kind: Literal["mamba1"] = "mamba1"
    num_layers: int
    d_inner: int
    d_conv: int
    d_state: int

    def split_error(self, tp: int) -> str | None:
        """Why ``tp`` ranks cannot split these layers, or None."""
        return (
            f"mamba d_inner (mamba_expand x hidden_size) {self.d_inner}"
            if self.d_inner % tp
            else None
        )

    def state_elements_per_rank(self, tp: int) -> tuple[int, int]:
        """(conv, ssm) elements per sequence per layer on one rank; d_inner is split by TP."""
        inner = self.d_inner // tp
        return (self.d_conv - 1) * inner, inner * self.d_state


class Mamba2Group(_Frozen, frozen=True, kw_only=True):
    """Mamba-2 layers (Nemotron-H, Granite-4 hybrids): heads x head_dim x d_state SSM state."""

    MINIMUMS: ClassVar[dict[str, int]] = {
        "num_layers": 1,
        "num_heads": 1,
        "head_dim": 1,
        "n_groups": 1,
        "d_state": 1,
        "d_conv": 2,
    }

    kind: Literal["mamba2"] = "mamba2"
    num_layers: int
    num_heads: int
    head_dim: int
    n_groups: int
    d_state: int
    d_conv: int

    def split_error(self, tp: int) -> str | None:
        if self.num_heads % tp:
            return f"mamba_num_heads {self.num_heads}"
        if self.n_groups % tp and self.n_groups != 1:
            return f"n_groups {self.n_groups}"
        return None

    def groups_per_rank(self, tp: int) -> int:
        """B/C groups one rank holds; a single group is replicated on every rank."""
        return self.n_groups // tp if self.n_groups % tp == 0 else 1

    def state_elements_per_rank(self, tp: int) -> tuple[int, int]:
        conv_dim = (
            self.num_heads * self.head_dim // tp + 2 * self.groups_per_rank(tp) * self.d_state
        )
        return (self.d_conv - 1) * conv_dim, self.num_heads // tp * self.head_dim * self.d_state


class GatedDeltaNetGroup(_Frozen, frozen=True, kw_only=True):
    """Gated DeltaNet linear-attention layers (Qwen3-Next, Qwen3.5/3.6).

    Conv state (k-1) x (2 Hk dk + Hv dv), temporal state Hv x dv x dk; both split by TP.
    """

    MINIMUMS: ClassVar[dict[str, int]] = {
        "num_layers": 1,
        "num_k_heads": 1,
        "num_v_heads": 1,
        "k_head_dim": 1,
        "v_head_dim": 1,
        "d_conv": 2,
    }

    kind: Literal["gdn"] = "gdn"
    num_layers: int
    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    d_conv: int

    def split_error(self, tp: int) -> str | None:
        if self.num_k_heads % tp:
            return f"linear_num_key_heads {self.num_k_heads}"
        if self.num_v_heads % tp:
            return f"linear_num_value_heads {self.num_v_heads}"
        return None

    def state_elements_per_rank(self, tp: int) -> tuple[int, int]:
        conv_dim = (
            2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
        ) // tp
        return (
            self.d_conv - 1
        ) * conv_dim, self.num_v_heads // tp * self.v_head_dim * self.k_head_dim


class KimiDeltaAttentionGroup(_Frozen, frozen=True, kw_only=True):
    """Kimi Delta Attention layers (Kimi-Linear, Kimi-K3): ``linear_attn_config``.

    ``num_heads`` heads of ``head_dim`` for Q, K and V alike: conv state (k-1) x 3 H d,
    recurrent state H x d x d; both split by TP (vLLM ``kda_state_shape``).
    """

    MINIMUMS: ClassVar[dict[str, int]] = {
        "num_layers": 1,
        "num_heads": 1,
        "head_dim": 1,
        "d_conv": 2,
    }

    kind: Literal["kda"] = "kda"
    num_layers: int
    num_heads: int
    head_dim: int
    d_conv: int

    def split_error(self, tp: int) -> str | None:
        if self.num_heads % tp:
            return f"linear_attn_config.num_heads {self.num_heads}"
        return None

    def state_elements_per_rank(self, tp: int) -> tuple[int, int]:
        conv_dim = 3 * self.num_heads * self.head_dim // tp
        return (self.d_conv - 1) * conv_dim, self.num_heads // tp * self.head_dim**2


class ShortConvGroup(_Frozen, frozen=True, kw_only=True):
    """Gated short-convolution layers (LFM2): only a conv state, (L_cache - 1) x conv_dim.

    The channels are split by TP; there is no recurrent (SSM) state (vLLM
    ``short_conv_state_shape``).
    """

    MINIMUMS: ClassVar[dict[str, int]] = {"num_layers": 1, "conv_dim": 1, "d_conv": 2}

    kind: Literal["short_conv"] = "short_conv"
    num_layers: int
    conv_dim: int
    d_conv: int

    def split_error(self, tp: int) -> str | None:
        return f"conv_dim {self.conv_dim}" if self.conv_dim % tp else None

    def state_elements_per_rank(self, tp: int) -> tuple[int, int]:
        return (self.d_conv - 1) * (self.conv_dim // tp), 0


class CompressedMlaLayout(_Frozen, frozen=True, kw_only=True):
    """DeepSeek-V4's per-layer caches: compressed MLA, a sliding window, compressor states.

    ``compress_ratios[i]`` is decoder layer i's ratio (tokens per stored state; 0 or 1:
    the layer keeps only its sliding-window cache). ``compressed_block`` and
    ``window_block`` are the tokens per block of the compressed and sliding-window caches;
    ``indexer_key_bytes`` is one state of the ratio-4 layers' indexer key cache.
    """

    MINIMUMS: ClassVar[dict[str, int]] = {
        "head_dim": 1,
        "index_head_dim": 1,
        "sliding_window": 1,
        "compressed_block": 1,
        "window_block": 1,
        "indexer_key_bytes": 1,
    }

    compress_ratios: tuple[int, ...]
    head_dim: int
    index_head_dim: int
    sliding_window: int
    compressed_block: int
    window_block: int
    indexer_key_bytes: int


StateGroup = (
    Mamba1Group | Mamba2Group | GatedDeltaNetGroup | KimiDeltaAttentionGroup | ShortConvGroup
)


class ModelSpec(_Frozen, frozen=True, kw_only=True):
    """Everything about a model that KV-cache sizing needs, and where it came from.

    Invariant: ``attention`` is non-empty or ``states`` is (a model with neither holds
    no cache); layer counts in both add up to the decoder layers that hold state.
    """

    MINIMUMS: ClassVar[dict[str, int]] = {"num_attention_heads": 1}

    name: str
    origin: str  # where the fields were read: a config.json path or a catalog entry
    source: str  # the citation for the values (the path itself for a local file)
    architecture: str
    model_type: str
    dtype: str  # model dtype; "auto" KV caches and recurrent states use it
    num_attention_heads: int
    # vLLM's ModelConfig.get_head_size for a non-MLA model: the config's head_dim, else
    # hidden_size / num_attention_heads (None for MLA and attention-free models).
    head_size: int | None = None
    attention: tuple[AttentionGroup, ...] = ()
    states: tuple[StateGroup, ...] = ()
    # SSM state dtype vLLM picks when --mamba-ssm-cache-dtype is "auto"; None = model dtype.
    ssm_state_dtype: str | None = None
    max_position_embeddings: int | None = None
    # KV cache dtype the checkpoint declares (vLLM's --kv-cache-dtype auto uses it), and
    # the file and field it was read from.
    checkpoint_kv_cache_dtype: str | None = None
    checkpoint_kv_cache_source: str | None = None
    # (CUDA capability major, dtype): what vLLM's per-model config hook makes of
    # --kv-cache-dtype auto on that GPU generation (GLM-5 on SM100: fp8_e4m3).
    auto_kv_cache_dtype_by_gpu: tuple[tuple[int, str], ...] = ()
    # DeepSeek-V4: caches laid out per layer and packed block-outermost (None otherwise).
    compressed_mla: CompressedMlaLayout | None = None
    assumptions: tuple[str, ...] = ()  # defaults kvtool filled in, said out loud

    @property
    def is_mla(self) -> bool:
        return any(g.kind is AttentionKind.MLA for g in self.attention)

    @property
    def is_sparse_mla(self) -> bool:
        """MLA with a DSA indexer cache (vLLM: the config has ``index_topk``)."""
        return any(g.kind is AttentionKind.INDEXER for g in self.attention)

    @property
    def has_sliding_window(self) -> bool:
        """Some layers keep only a local window (sliding or chunked-local attention)."""
        return any(g.is_local for g in self.attention)

    @property
    def attention_layers(self) -> int:
        return sum(g.num_layers for g in self.attention)

    @property
    def state_layers(self) -> int:
        return sum(g.num_layers for g in self.states)

    @property
    def architecture_class(self) -> str:
        """One word for the cache layout: dense, mla, sliding-window or hybrid-state."""
        if self.states:
            return "hybrid-state"
        if self.is_mla:
            return "mla"
        if self.has_sliding_window:
            return "sliding-window"
        return "dense"
