"""Parse a Hugging Face ``config.json`` into a :class:`ModelSpec`.

Only architectures whose cache layout kvtool knows are accepted (``rules/models/layouts.toml``
maps each model_type to one of ``LAYOUT_PARSERS``): an
unknown ``model_type`` is an error that lists the supported ones, never a guess. Every
missing or malformed field is reported by name together with the file it was read from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from kvtool import limits
from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir
from kvtool.sizing.checkpoint_kv import declared_kv_cache_dtype
from kvtool.sizing.compressed_mla import COMPRESS_RATIOS, INDEXED_RATIO
from kvtool.sizing.dtypes import model_dtype_bytes
from kvtool.sizing.facts import sizing_facts
from kvtool.sizing.spec import (
    AttentionGroup,
    AttentionKind,
    CompressedMlaLayout,
    GatedDeltaNetGroup,
    KimiDeltaAttentionGroup,
    Mamba1Group,
    Mamba2Group,
    ModelSpec,
    ShortConvGroup,
    SpecError,
    StateGroup,
)

# When a config names no dtype, vLLM's "auto" loads bf16 checkpoints as bf16; say so.
FALLBACK_DTYPE = "bfloat16"

_MAX_FIELD_VALUE = 2**53


class _Config:
    """A config.json (text part) with field access that names ``where`` on every error."""

    def __init__(self, raw: Mapping[str, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    def get(self, key: str, default: Any = None) -> Any:
        value = self.raw.get(key, default)
        return default if value is None else value

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def positive_int(self, key: str, default: int | None = None) -> int:
        """``key`` as an int >= 1; ``default`` when absent (None: the field is required)."""
        return self._int(key, default, minimum=1, kind="a positive integer")

    def non_negative_int(self, key: str, default: int = 0) -> int:
        """``key`` as an int >= 0 (a layer index or count that may be zero)."""
        return self._int(key, default, minimum=0, kind="a non-negative integer")

    def _int(self, key: str, default: int | None, *, minimum: int, kind: str) -> int:
        value = self.raw.get(key)
        if value is None:
            if default is not None:
                return default
            raise KvtoolError(f"{self.where}: missing field {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise KvtoolError(f"{self.where}: field {key!r} must be {kind}, got {value!r}")
        # Per-layer work and lists scale with layer counts; any other field past 2**53
        # is no real model's and loses exactness in the float arithmetic that follows.
        if key.endswith("_layers"):
            limits.SIZING_LAYERS.check(value, f"{self.where}: field {key!r} ({value})")
        elif value > _MAX_FIELD_VALUE:
            raise KvtoolError(f"{self.where}: field {key!r} is implausibly large ({value})")
        return value

    def head_dim(self) -> int:
        """``head_dim`` when given, else ``hidden_size / num_attention_heads`` (exactly)."""
        if self.has("head_dim"):
            return self.positive_int("head_dim")
        hidden = self.positive_int("hidden_size")
        heads = self.positive_int("num_attention_heads")
        if hidden % heads:
            raise KvtoolError(
                f"{self.where}: no 'head_dim' and hidden_size {hidden} is not divisible by "
                f"num_attention_heads {heads}; add 'head_dim'"
            )
        return hidden // heads

    def kv_heads(self) -> int:
        return self.positive_int(
            "num_key_value_heads", default=self.positive_int("num_attention_heads")
        )

    def layer_types(self, count: int) -> list[str] | None:
        types = self.raw.get("layer_types")
        if types is None:
            return None
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise KvtoolError(f"{self.where}: field 'layer_types' must be a list of strings")
        if len(types) != count:
            raise KvtoolError(
                f"{self.where}: field 'layer_types' has {len(types)} entries but "
                f"num_hidden_layers is {count}"
            )
        return types


def _attention(
    cfg: _Config, kind: AttentionKind, layers: int, window: int | None = None
) -> AttentionGroup:
    head = cfg.head_dim()
    return AttentionGroup(
        kind=kind,
        num_layers=layers,
        num_kv_heads=cfg.kv_heads(),
        head_size_k=head,
        head_size_v=head,
        sliding_window=window if kind in (AttentionKind.SLIDING, AttentionKind.CHUNKED) else None,
    )


def _full_and_sliding(
    cfg: _Config, sliding_layers: int, window_extra: int = 0
) -> tuple[AttentionGroup, ...]:
    """``window_extra``: tokens a model file adds to ``sliding_window`` (Cohere 2: one)."""
    layers = cfg.positive_int("num_hidden_layers")
    groups = []
    if layers - sliding_layers:
        groups.append(_attention(cfg, AttentionKind.FULL, layers - sliding_layers))
    if sliding_layers:
        window = cfg.positive_int("sliding_window") + window_extra
        groups.append(_attention(cfg, AttentionKind.SLIDING, sliding_layers, window))
    return tuple(groups)


def _groups_from_layer_types(
    cfg: _Config, layers: int, window_extra: int = 0
) -> tuple[AttentionGroup, ...] | None:
    """Full and sliding groups as ``layer_types`` lists them; None when the config has none."""
    types = cfg.layer_types(layers)
    if types is None:
        return None
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown:
        raise KvtoolError(f"{cfg.where}: unsupported layer_types {unknown} for this architecture")
    return _full_and_sliding(cfg, types.count("sliding_attention"), window_extra)


def _dense(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Llama-like decoders; sliding window where the config turns it on for all or some layers."""
    layers = cfg.positive_int("num_hidden_layers")
    listed = _groups_from_layer_types(cfg, layers)
    if listed is not None:
        return listed, ()
    if not cfg.has("sliding_window") or cfg.raw.get("use_sliding_window") is False:
        return _full_and_sliding(cfg, 0), ()
    # Qwen2-style: SWA only from layer max_window_layers on, when switched on.
    first_sliding = 0
    if cfg.raw.get("use_sliding_window"):
        first_sliding = cfg.non_negative_int("max_window_layers")
    return _full_and_sliding(cfg, max(0, layers - first_sliding)), ()


def _chatglm(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """ChatGLM2/3 and GLM-4-9B's chatglm configs: ``num_layers`` layers of full attention.

    chatglm.py ``GLMAttention``: ``multi_query_group_num`` KV heads when
    ``multi_query_attention``, else one per query head; head size hidden_size /
    num_attention_heads (``kv_channels`` is not read).
    """
    heads = cfg.positive_int("num_attention_heads")
    hidden = cfg.positive_int("hidden_size")
    if hidden % heads:
        raise KvtoolError(
            f"{cfg.where}: hidden_size {hidden} is not divisible by num_attention_heads {heads}"
        )
    kv_heads = heads
    if cfg.get("multi_query_attention"):
        kv_heads = cfg.positive_int("multi_query_group_num")
    group = AttentionGroup(
        kind=AttentionKind.FULL,
        num_layers=cfg.positive_int("num_layers"),
        num_kv_heads=kv_heads,
        head_size_k=hidden // heads,
        head_size_v=hidden // heads,
    )
    return (group,), ()


def _interleaved(
    every: int, window_extra: int = 0
) -> Callable[[_Config], tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]]:
    """Gemma-2/3 style: every ``every``-th layer (1-based) is global, the rest slide.

    ``sliding_window_pattern`` in the config overrides ``every``; ``layer_types`` wins over both.
    """

    def parse(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
        layers = cfg.positive_int("num_hidden_layers")
        listed = _groups_from_layer_types(cfg, layers, window_extra)
        if listed is not None:
            return listed, ()
        pattern = cfg.positive_int("sliding_window_pattern", default=every)
        full = sum(1 for i in range(layers) if (i + 1) % pattern == 0)
        return _full_and_sliding(cfg, layers - full, window_extra), ()

    return parse


def _mla(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """DeepSeek-style latent attention: one (kv_lora_rank + rope) vector per token per layer."""
    latent = cfg.positive_int("kv_lora_rank") + cfg.positive_int("qk_rope_head_dim")
    group = AttentionGroup(
        kind=AttentionKind.MLA,
        num_layers=cfg.positive_int("num_hidden_layers"),
        num_kv_heads=1,
        head_size_k=latent,
        head_size_v=0,
    )
    return (group,), ()


def _sparse_mla(
    quant_block: int, scale_bytes: int
) -> Callable[[_Config], tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]]:
    """DeepSeek-V3.2-style sparse MLA: the latent on every layer plus the DSA indexer's keys.

    vLLM builds the indexer (and its cache) when the config has ``index_topk``. Its key
    cache is uint8: ``index_head_dim`` fp8 values and a ``scale_bytes`` scale per
    ``quant_block`` of them per token. Layers that reuse another layer's top-k hold no
    indexer cache: ``index_topk_pattern[i] == "S"``, else every layer whose
    ``max(i - index_skip_topk_offset + 1, 0)`` is not a multiple of ``index_topk_freq``.
    """

    def parse(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
        (latent,), _ = _mla(cfg)
        cfg.positive_int("index_topk")  # vLLM's is_v32 test: no index_topk, no indexer
        head = cfg.positive_int("index_head_dim")
        layers = latent.num_layers
        pattern = cfg.get("index_topk_pattern")
        if pattern is not None:
            if not isinstance(pattern, str):
                raise KvtoolError(f"{cfg.where}: field 'index_topk_pattern' must be a string")
            indexed = sum(1 for i in range(layers) if i >= len(pattern) or pattern[i] != "S")
        else:
            freq = cfg.positive_int("index_topk_freq", default=1)
            offset = cfg.non_negative_int("index_skip_topk_offset", default=2)
            indexed = sum(1 for i in range(layers) if max(i - offset + 1, 0) % freq == 0)
        indexer = AttentionGroup(
            kind=AttentionKind.INDEXER,
            num_layers=indexed,
            num_kv_heads=1,
            head_size_k=head,
            head_size_v=0,
            token_bytes=head + head // quant_block * scale_bytes,
        )
        return (latent, indexer), ()

    return parse


def _jamba(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    layers = cfg.positive_int("num_hidden_layers")
    period = cfg.positive_int("attn_layer_period")
    offset = cfg.non_negative_int("attn_layer_offset")
    attention_layers = sum(1 for i in range(layers) if i % period == offset)
    mamba = Mamba1Group(
        num_layers=layers - attention_layers,
        d_inner=cfg.positive_int("mamba_expand") * cfg.positive_int("hidden_size"),
        d_conv=cfg.positive_int("mamba_d_conv"),
        d_state=cfg.positive_int("mamba_d_state"),
    )
    return (_attention(cfg, AttentionKind.FULL, attention_layers),), (mamba,)


# transformers' NemotronHConfig block names (current and legacy) -> hybrid_override_pattern letter.
_NEMOTRON_H_BLOCKS = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}


def _nemotron_h_pattern(cfg: _Config) -> str:
    """The block pattern: ``layers_block_type`` (Nemotron 3 configs) wins, as in transformers'
    NemotronHConfig, over the older ``hybrid_override_pattern`` string."""
    for key in ("layers_block_type", "layer_types"):
        blocks = cfg.get(key)
        if blocks is None:
            continue
        if not isinstance(blocks, list) or not all(isinstance(b, str) for b in blocks):
            raise KvtoolError(f"{cfg.where}: field {key!r} must be a list of strings")
        unknown = sorted(set(blocks) - set(_NEMOTRON_H_BLOCKS))
        if unknown:
            raise KvtoolError(f"{cfg.where}: field {key!r} has unknown block types {unknown}")
        return "".join(_NEMOTRON_H_BLOCKS[b] for b in blocks)
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise KvtoolError(
            f"{cfg.where}: missing field 'hybrid_override_pattern' (or 'layers_block_type')"
        )
    unknown = sorted(set(pattern) - set("M*-E"))
    if unknown:
        raise KvtoolError(f"{cfg.where}: hybrid_override_pattern has unknown block types {unknown}")
    return pattern


def _nemotron_h(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Blocks from the pattern: M = Mamba-2, * = attention, - and E = MLP/MoE."""
    pattern = _nemotron_h_pattern(cfg)
    mamba = Mamba2Group(
        num_layers=pattern.count("M"),
        num_heads=cfg.positive_int("mamba_num_heads"),
        head_dim=cfg.positive_int("mamba_head_dim"),
        n_groups=cfg.positive_int("n_groups"),
        d_state=cfg.positive_int("ssm_state_size"),
        d_conv=cfg.positive_int("conv_kernel"),
    )
    attention = (_attention(cfg, AttentionKind.FULL, pattern.count("*")),) if "*" in pattern else ()
    return attention, (mamba,) if mamba.num_layers else ()


def _granite_hybrid(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    layers = cfg.positive_int("num_hidden_layers")
    types = cfg.layer_types(layers)
    if types is None:
        raise KvtoolError(f"{cfg.where}: missing field 'layer_types'")
    unknown = sorted(set(types) - {"mamba", "attention"})
    if unknown:
        raise KvtoolError(f"{cfg.where}: unsupported layer_types {unknown}")
    attention_layers = types.count("attention")
    states: tuple[StateGroup, ...] = ()
    if types.count("mamba"):
        states = (
            Mamba2Group(
                num_layers=types.count("mamba"),
                num_heads=cfg.positive_int("mamba_n_heads"),
                head_dim=cfg.positive_int("mamba_d_head"),
                n_groups=cfg.positive_int("mamba_n_groups"),
                d_state=cfg.positive_int("mamba_d_state"),
                d_conv=cfg.positive_int("mamba_d_conv"),
            ),
        )
    attention = (_attention(cfg, AttentionKind.FULL, attention_layers),) if attention_layers else ()
    return attention, states


def _parallel_hybrid(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Falcon-H1: every decoder layer runs attention and a Mamba-2 mixer side by side.

    Each layer holds a KV page and a state page (falcon_h1.py ``FalconH1ParallelHybrid``).
    The mixer's width is ``mamba_d_ssm``, else ``mamba_expand x hidden_size``; kvtool's
    Mamba-2 state takes it as ``mamba_n_heads x mamba_d_head`` and names a config where
    the two differ rather than guess.
    """
    layers = cfg.positive_int("num_hidden_layers")
    heads = cfg.positive_int("mamba_n_heads")
    head_dim = cfg.positive_int("mamba_d_head")
    if cfg.has("mamba_d_ssm"):
        width = cfg.positive_int("mamba_d_ssm")
    else:
        width = cfg.positive_int("mamba_expand") * cfg.positive_int("hidden_size")
    if width != heads * head_dim:
        raise KvtoolError(
            f"{cfg.where}: field 'mamba_d_ssm' (the Mamba-2 width, {width}) is not "
            f"mamba_n_heads x mamba_d_head ({heads} x {head_dim}); kvtool cannot size this state"
        )
    mamba = Mamba2Group(
        num_layers=layers,
        num_heads=heads,
        head_dim=head_dim,
        n_groups=cfg.positive_int("mamba_n_groups"),
        d_state=cfg.positive_int("mamba_d_state"),
        d_conv=cfg.positive_int("mamba_d_conv"),
    )
    return (_attention(cfg, AttentionKind.FULL, layers),), (mamba,)


def _gated_deltanet(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Qwen3-Next / Qwen3.5: ``layer_types``, else every ``full_attention_interval``-th is full."""
    layers = cfg.positive_int("num_hidden_layers")
    types = cfg.layer_types(layers)
    if types is None:
        interval = cfg.positive_int("full_attention_interval")
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(layers)
        ]
    unknown = sorted(set(types) - {"full_attention", "linear_attention"})
    if unknown:
        raise KvtoolError(f"{cfg.where}: unsupported layer_types {unknown}")
    gdn = GatedDeltaNetGroup(
        num_layers=types.count("linear_attention"),
        num_k_heads=cfg.positive_int("linear_num_key_heads"),
        num_v_heads=cfg.positive_int("linear_num_value_heads"),
        k_head_dim=cfg.positive_int("linear_key_head_dim"),
        v_head_dim=cfg.positive_int("linear_value_head_dim"),
        d_conv=cfg.positive_int("linear_conv_kernel_dim"),
    )
    full = types.count("full_attention")
    attention = (_attention(cfg, AttentionKind.FULL, full),) if full else ()
    return attention, (gdn,) if gdn.num_layers else ()


def _kimi_delta(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Kimi-Linear / Kimi-K3: KDA state layers where ``linear_attn_config.kda_layers``
    lists them (1-based, as the config's ``is_kda_layer`` reads it), latent attention
    (MLA) on every other layer; ``full_attn_layers`` is not consulted, as in vLLM."""
    linear = cfg.get("linear_attn_config")
    if not isinstance(linear, Mapping):
        raise KvtoolError(f"{cfg.where}: missing field 'linear_attn_config'")
    kda = _Config(linear, f"{cfg.where}: linear_attn_config")
    layers = cfg.positive_int("num_hidden_layers")
    listed = linear.get("kda_layers")
    if not isinstance(listed, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in listed
    ):
        raise KvtoolError(f"{cfg.where}: field 'linear_attn_config.kda_layers' must be a list")
    outside = sorted(n for n in set(listed) if not 1 <= n <= layers)
    if outside:
        raise KvtoolError(
            f"{cfg.where}: field 'linear_attn_config.kda_layers' names layers {outside} "
            f"outside 1..{layers} (num_hidden_layers)"
        )
    state_layers = len(set(listed))
    (latent,), _ = _mla(cfg)
    states: tuple[StateGroup, ...] = ()
    if state_layers:
        states = (
            KimiDeltaAttentionGroup(
                num_layers=state_layers,
                num_heads=kda.positive_int("num_heads"),
                head_dim=kda.positive_int("head_dim"),
                d_conv=kda.positive_int("short_conv_kernel_size"),
            ),
        )
    attention: tuple[AttentionGroup, ...] = ()
    if layers - state_layers:
        attention = (
            AttentionGroup(
                kind=AttentionKind.MLA,
                num_layers=layers - state_layers,
                num_kv_heads=1,
                head_size_k=latent.head_size_k,
                head_size_v=0,
            ),
        )
    return attention, states


def _short_conv_hybrid(row: Mapping[str, Any]) -> _Parser:
    """LFM2: ``layer_types`` of full attention and gated short convolutions.

    A conv layer's state is ``conv_L_cache - 1`` columns of the conv width, the field the
    row's ``conv_width`` names (LFM2's ShortConv reads ``conv_dim``, LFM2-MoE's
    ``hidden_size``). Where the row has ``layer_types_from`` (LFM2), a config without
    ``layer_types`` makes the layers listed there (default: all) attention and the rest
    convolutions, as transformers' Lfm2Config derives them; elsewhere it is required.
    """
    width_field = str(row["conv_width"])
    derive_from = row.get("layer_types_from")

    def parse(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
        layers = cfg.positive_int("num_hidden_layers")
        types = cfg.layer_types(layers)
        if types is None and derive_from is None:
            raise KvtoolError(f"{cfg.where}: missing field 'layer_types'")
        if types is None:
            listed = cfg.get(str(derive_from), list(range(layers)))
            if not isinstance(listed, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in listed
            ):
                raise KvtoolError(f"{cfg.where}: field {derive_from!r} must be a list of layers")
            types = ["full_attention" if i in listed else "conv" for i in range(layers)]
        unknown = sorted(set(types) - {"full_attention", "conv"})
        if unknown:
            raise KvtoolError(f"{cfg.where}: unsupported layer_types {unknown}")
        full = types.count("full_attention")
        attention = (_attention(cfg, AttentionKind.FULL, full),) if full else ()
        states: tuple[StateGroup, ...] = ()
        if types.count("conv"):
            states = (
                ShortConvGroup(
                    num_layers=types.count("conv"),
                    conv_dim=cfg.positive_int(width_field),
                    d_conv=cfg.positive_int("conv_L_cache"),
                ),
            )
        return attention, states

    return parse


def _ssm_state_dtype(model_type: str, text: _Config) -> str | None:
    """The SSM state dtype vLLM chooses under "auto", if not the model dtype.

    Qwen3.5 uses the config's ``mamba_ssm_dtype``; Nemotron-H its ``mamba_ssm_cache_dtype``
    or a default from the facts table; a layout row's ``ssm_state_dtype`` is the state
    calculator's own default (KDA: float32). Other models keep the model dtype (None).
    """
    row_dtype = layout_rows().get(model_type, {}).get("ssm_state_dtype")
    if row_dtype is not None:
        return str(row_dtype)
    if model_type.startswith("qwen3_5"):
        declared = text.get("mamba_ssm_dtype")
        return str(declared) if declared is not None else None
    if model_type == "nemotron_h":
        return str(text.get("mamba_ssm_cache_dtype") or sizing_facts().nemotron_h_default_ssm_dtype)
    return None


def _chunked_local(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Llama 4: RoPE layers use chunked local attention, NoPE layers attend globally.

    ``no_rope_layers[i] == 0`` marks a global layer; without the list, every
    ``no_rope_layer_interval``-th layer (transformers' Llama4TextConfig default 4) is.
    """
    layers = cfg.positive_int("num_hidden_layers")
    flags = cfg.get("no_rope_layers")
    if not flags:
        interval = cfg.positive_int("no_rope_layer_interval", default=4)
        flags = [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(flags, list) or len(flags) != layers:
        raise KvtoolError(
            f"{cfg.where}: field 'no_rope_layers' must list one flag per layer "
            f"(num_hidden_layers is {layers})"
        )
    chunk = cfg.get("attention_chunk_size")
    local = sum(1 for flag in flags if flag) if chunk else 0
    groups = []
    if layers - local:
        groups.append(_attention(cfg, AttentionKind.FULL, layers - local))
    if local:
        size = cfg.positive_int("attention_chunk_size")
        groups.append(_attention(cfg, AttentionKind.CHUNKED, local, size))
    return tuple(groups), ()


def _per_layer_heads(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Nemotron-NAS (DeciLM): ``block_configs`` gives each layer its own attention.

    A layer's KV heads are ``num_attention_heads // attention.n_heads_in_group``; a layer
    whose attention is ``no_op`` holds no cache. Layers with equal heads share a group.
    """
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, list) or not blocks:
        raise KvtoolError(f"{cfg.where}: missing field 'block_configs'")
    layers = cfg.positive_int("num_hidden_layers", default=len(blocks))
    if layers != len(blocks):
        raise KvtoolError(
            f"{cfg.where}: field 'block_configs' has {len(blocks)} entries but "
            f"num_hidden_layers is {layers}"
        )
    heads = cfg.positive_int("num_attention_heads")
    per_heads: dict[int, int] = {}
    for index, block in enumerate(blocks):
        attention = block.get("attention") if isinstance(block, Mapping) else None
        if not isinstance(attention, Mapping):
            raise KvtoolError(f"{cfg.where}: block_configs[{index}] has no 'attention'")
        if attention.get("no_op"):
            continue
        group = attention.get("n_heads_in_group")
        if isinstance(group, bool) or not isinstance(group, int) or group < 1 or heads % group:
            raise KvtoolError(
                f"{cfg.where}: field 'block_configs[{index}].attention.n_heads_in_group' "
                f"must divide num_attention_heads {heads}, got {group!r}"
            )
        per_heads[heads // group] = per_heads.get(heads // group, 0) + 1
    head = cfg.head_dim()
    groups = tuple(
        AttentionGroup(
            kind=AttentionKind.FULL,
            num_layers=count,
            num_kv_heads=kv_heads,
            head_size_k=head,
            head_size_v=head,
        )
        for kv_heads, count in per_heads.items()
    )
    return groups, ()


def _gemma4(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Gemma 4: sliding layers and full layers with their own head size and KV heads.

    As transformers' Gemma4TextConfig resolves it (vLLM reads ``per_layer_config``):
    ``layer_types`` (default: every 6th layer full, the last always full); full layers use
    ``global_head_dim`` (512 unless given) and, when ``attention_k_eq_v``,
    ``num_global_key_value_heads``; the last ``num_kv_shared_layers`` layers reuse earlier
    layers' caches and hold none (gemma4.py ``kv_sharing_target_layer_name``).
    """
    layers = cfg.positive_int("num_hidden_layers")
    types = cfg.layer_types(layers)
    if types is None:
        every = cfg.positive_int("sliding_window_pattern", default=6)
        types = [
            "sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)
        ]
    types = [*types[:-1], "full_attention"]
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown:
        raise KvtoolError(f"{cfg.where}: unsupported layer_types {unknown}")
    shared = cfg.non_negative_int("num_kv_shared_layers")
    if shared >= layers:
        raise KvtoolError(
            f"{cfg.where}: field 'num_kv_shared_layers' {shared} leaves no layer of the "
            f"{layers} (num_hidden_layers) to hold a cache"
        )
    own = types[: layers - shared]
    head = cfg.head_dim()
    global_head = cfg.positive_int("global_head_dim", default=512)
    global_kv = cfg.kv_heads()
    if cfg.get("attention_k_eq_v"):
        global_kv = cfg.positive_int("num_global_key_value_heads", default=global_kv)
    groups = []
    if own.count("sliding_attention"):
        groups.append(
            AttentionGroup(
                kind=AttentionKind.SLIDING,
                num_layers=own.count("sliding_attention"),
                num_kv_heads=cfg.kv_heads(),
                head_size_k=head,
                head_size_v=head,
                sliding_window=cfg.positive_int("sliding_window"),
            )
        )
    groups.append(
        AttentionGroup(
            kind=AttentionKind.FULL,
            num_layers=own.count("full_attention"),
            num_kv_heads=global_kv,
            head_size_k=global_head,
            head_size_v=global_head,
        )
    )
    return tuple(groups), ()


def _mimo_v2(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """MiMo-V2: ``hybrid_layer_pattern[i] == 1`` marks a sliding layer with its own heads.

    Sliding layers: ``swa_num_key_value_heads`` x (``swa_head_dim`` K + ``swa_v_head_dim`` V),
    window ``sliding_window_size``; full layers: ``num_key_value_heads`` x (``head_dim`` K +
    ``v_head_dim`` V). V defaults to the K head size (mimo_v2.py MiMoV2Attention).
    """
    layers = cfg.positive_int("num_hidden_layers")
    pattern = cfg.get("hybrid_layer_pattern")
    if not isinstance(pattern, list) or len(pattern) != layers:
        raise KvtoolError(
            f"{cfg.where}: field 'hybrid_layer_pattern' must list one 0/1 per layer "
            f"(num_hidden_layers is {layers})"
        )
    sliding = sum(1 for flag in pattern if flag == 1)
    groups = []
    if layers - sliding:
        head = cfg.positive_int("head_dim")
        groups.append(
            AttentionGroup(
                kind=AttentionKind.FULL,
                num_layers=layers - sliding,
                num_kv_heads=cfg.kv_heads(),
                head_size_k=head,
                head_size_v=cfg.positive_int("v_head_dim", default=head),
            )
        )
    if sliding:
        head = cfg.positive_int("swa_head_dim")
        groups.append(
            AttentionGroup(
                kind=AttentionKind.SLIDING,
                num_layers=sliding,
                num_kv_heads=cfg.positive_int("swa_num_key_value_heads"),
                head_size_k=head,
                head_size_v=cfg.positive_int("swa_v_head_dim", default=head),
                sliding_window=cfg.positive_int("sliding_window_size"),
            )
        )
    return tuple(groups), ()


def _compress_ratios(cfg: _Config) -> tuple[int, ...]:
    """``compress_ratios`` of the decoder layers (entries past them are the MTP layers')."""
    layers = cfg.positive_int("num_hidden_layers")
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or not all(
        isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ratios
    ):
        raise KvtoolError(
            f"{cfg.where}: field 'compress_ratios' must be a list of non-negative integers"
        )
    unknown = sorted({r for r in ratios if r > 1 and r not in COMPRESS_RATIOS})
    if unknown:
        raise KvtoolError(
            f"{cfg.where}: field 'compress_ratios' has ratio {unknown[0]}; vLLM 0.32 builds "
            f"0, 1 (uncompressed), {', '.join(map(str, COMPRESS_RATIOS))}"
        )
    if len(ratios) < layers:
        raise KvtoolError(
            f"{cfg.where}: field 'compress_ratios' has {len(ratios)} entries but "
            f"num_hidden_layers is {layers}"
        )
    return tuple(ratios[:layers])


def _compressed_mla_layout(cfg: _Config, row: Mapping[str, Any]) -> CompressedMlaLayout:
    head = cfg.positive_int("index_head_dim")
    return CompressedMlaLayout(
        compress_ratios=_compress_ratios(cfg),
        head_dim=cfg.positive_int("head_dim"),
        index_head_dim=head,
        sliding_window=cfg.positive_int("sliding_window"),
        compressed_block=int(row["compressed_block"]),
        window_block=int(row["window_block"]),
        indexer_key_bytes=head
        + head // int(row["indexer_quant_block"]) * int(row["indexer_scale_bytes"]),
    )


def _compressed_mla(
    row: Mapping[str, Any],
) -> Callable[[_Config], tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]]:
    """DeepSeek-V4, seen per token: a sliding-window latent on every layer, a latent on
    the compressed layers and the indexer key on the ratio-4 ones (the per-token figures
    count every token; vLLM's blocks store one state per ratio tokens, modelled per
    layer by :mod:`kvtool.sizing.compressed_mla`)."""

    def parse(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
        layout = _compressed_mla_layout(cfg, row)
        ratios = layout.compress_ratios
        compressed = sum(1 for r in ratios if r > 1)
        indexed = sum(1 for r in ratios if r == INDEXED_RATIO)
        latent = {"num_kv_heads": 1, "head_size_k": layout.head_dim, "head_size_v": 0}
        groups = [
            AttentionGroup(
                kind=AttentionKind.SLIDING,
                num_layers=len(ratios),
                sliding_window=layout.sliding_window,
                **latent,
            )
        ]
        if compressed:
            groups.append(AttentionGroup(kind=AttentionKind.MLA, num_layers=compressed, **latent))
        if indexed:
            groups.append(
                AttentionGroup(
                    kind=AttentionKind.INDEXER,
                    num_layers=indexed,
                    num_kv_heads=1,
                    head_size_k=layout.index_head_dim,
                    head_size_v=0,
                    token_bytes=layout.indexer_key_bytes,
                )
            )
        return tuple(groups), ()

    return parse


_Parser = Callable[[_Config], tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]]

# One parser per cache layout; rules/models/layouts.toml maps each model_type to one.
LAYOUT_PARSERS: dict[str, Callable[[Mapping[str, Any]], _Parser]] = {
    "dense": lambda row: _dense,
    "chatglm": lambda row: _chatglm,
    "interleaved_sliding": lambda row: _interleaved(
        int(row["global_every"]), int(row.get("window_extra", 0))
    ),
    "chunked_local": lambda row: _chunked_local,
    "per_layer_heads": lambda row: _per_layer_heads,
    "gemma4": lambda row: _gemma4,
    "mimo_v2": lambda row: _mimo_v2,
    "mla": lambda row: _mla,
    "sparse_mla": lambda row: _sparse_mla(
        int(row["indexer_quant_block"]), int(row["indexer_scale_bytes"])
    ),
    "compressed_mla": _compressed_mla,
    "jamba": lambda row: _jamba,
    "nemotron_h": lambda row: _nemotron_h,
    "granite_hybrid": lambda row: _granite_hybrid,
    "parallel_hybrid": lambda row: _parallel_hybrid,
    "gated_deltanet": lambda row: _gated_deltanet,
    "kimi_delta": lambda row: _kimi_delta,
    "short_conv_hybrid": _short_conv_hybrid,
}

LAYOUTS_FILE = "models/layouts.toml"


@cache
def layout_rows() -> dict[str, dict[str, Any]]:
    """model_type -> its row in ``rules/models/layouts.toml``."""
    rows: dict[str, dict[str, Any]] = read_table(rules_dir() / LAYOUTS_FILE)["layouts"]
    for model_type, row in rows.items():
        if row.get("layout") not in LAYOUT_PARSERS or not row.get("vllm"):
            raise KvtoolError(
                f"{rules_dir() / LAYOUTS_FILE}: model_type {model_type!r} needs a 'layout' "
                f"(one of {', '.join(LAYOUT_PARSERS)}) and a 'vllm' citation"
            )
    return rows


def unmodelled_rows() -> dict[str, dict[str, str]]:
    """model_type -> its ``[unmodelled]`` row: an architecture vLLM serves, its cache unmodelled."""
    rows: dict[str, dict[str, str]] = read_table(rules_dir() / LAYOUTS_FILE).get("unmodelled", {})
    for model_type, row in rows.items():
        if not row.get("what") or not row.get("vllm") or model_type in layout_rows():
            raise KvtoolError(
                f"{rules_dir() / LAYOUTS_FILE}: unmodelled model_type {model_type!r} needs "
                "'what' and a 'vllm' citation, and no layout row"
            )
    return rows


def auto_kv_cache_dtypes(model_type: str) -> tuple[tuple[int, str], ...]:
    """(capability major, dtype) pairs a layout row gives ``--kv-cache-dtype auto``."""
    row = layout_rows().get(model_type) or {}
    return tuple(sorted((int(k), str(v)) for k, v in row.get("auto_kv_cache_dtype", {}).items()))


def _vllm_source(row: Mapping[str, str]) -> str:
    """The public URL of the vLLM file a layouts.toml row cites, at the table's release."""
    release = read_table(rules_dir() / LAYOUTS_FILE)["vllm_release"]
    cited = row["vllm"].split()[0]
    under = "vllm/" if "/" in cited else "vllm/model_executor/models/"
    return f"https://github.com/vllm-project/vllm/blob/v{release}/{under}{cited}"


# Config fields that mean a cache other than full/sliding attention heads: a config with
# any of them is not sized from its fields alone (MLA latents, DSA indexers, recurrent
# state, per-layer block configs, chunked local attention, hybrid layer patterns).
NOT_PLAIN_ATTENTION_FIELDS = (
    "kv_lora_rank", "index_topk", "index_head_dim", "linear_attn_config", "layers_block_type",
    "hybrid_override_pattern", "layers_block_types", "mamba_d_state", "ssm_state_size",
    "linear_num_value_heads", "block_configs", "attention_chunk_size", "compress_ratios",
    "num_kv_shared_layers", "hybrid_layer_pattern", "full_attention_interval",
)


# Class-name endings of the generative models vLLM's registry serves with a decoder KV
# cache; encoder-only and pooling classes (BertModel, ...ForSequenceClassification) hold none.
GENERATIVE_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration")


def inferred_layout(cfg: Mapping[str, Any], architectures: list[Any]) -> str | None:
    """Why a config with no layout row can be sized from its fields, else None.

    A decoder whose fields name only attention heads (``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim`` or ``hidden_size``) and, for windows, only
    ``layer_types`` of full and sliding attention or a model-wide ``sliding_window``,
    is what vLLM's attention layers build from those fields (one ``Attention`` per layer,
    a ``SlidingWindowSpec`` where ``layer_types`` says ``sliding_attention``).
    """
    if not any(str(a).endswith(GENERATIVE_SUFFIXES) for a in architectures):
        return None
    if any(cfg.get(name) is not None for name in NOT_PLAIN_ATTENTION_FIELDS):
        return None
    if not all(isinstance(cfg.get(n), int) for n in ("num_hidden_layers", "num_attention_heads")):
        return None
    if not isinstance(cfg.get("head_dim") or cfg.get("hidden_size"), int):
        return None
    types = cfg.get("layer_types")
    if types is not None and (
        not isinstance(types, list) or set(types) - {"full_attention", "sliding_attention"}
    ):
        return None
    if types:
        return "layer_types of full and sliding attention"
    return "sliding_window on every layer" if cfg.get("sliding_window") else "full attention"


def parser_for(model_type: str) -> _Parser | None:
    row = layout_rows().get(model_type)
    return None if row is None else LAYOUT_PARSERS[row["layout"]](row)


def has_layout(raw: Mapping[str, Any]) -> bool:
    """Whether kvtool knows a config.json's cache layout: its model_type (its text part's
    when it has one) has a layout row, or its fields name only attention heads
    (:func:`inferred_layout`), which is all vLLM's Transformers backend builds its
    ``Attention`` layers from (the model's head size and KV heads, ``sliding_window``
    on the layers ``layer_types`` calls sliding)."""
    text = raw.get("text_config")
    text_map = text if isinstance(text, Mapping) else raw
    model_type = text_map.get("model_type") or raw.get("model_type")
    if not isinstance(model_type, str):
        return False
    if model_type in layout_rows():
        return True
    declared = raw.get("architectures") or text_map.get("architectures") or []
    return model_type not in unmodelled_rows() and inferred_layout(
        text_map, declared if isinstance(declared, list) else []
    ) is not None


def supported_model_types() -> tuple[str, ...]:
    """The config.json model_type values kvtool size knows the cache layout of."""
    return tuple(sorted(layout_rows()))


def __getattr__(name: str) -> Any:
    # ``PARSERS`` (model_type -> parser) predates the layout table; callers that list
    # or dispatch on it keep working, built from the table on first use.
    if name == "PARSERS":
        return {model_type: parser_for(model_type) for model_type in supported_model_types()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _model_head_size(text: _Config, attention: tuple[AttentionGroup, ...]) -> int | None:
    """vLLM's ``get_head_size`` for a non-MLA model; None when it has no meaning or no value."""
    if not attention or attention[0].is_replicated:
        return None
    try:
        return text.head_dim()
    except KvtoolError:  # per-layer geometry only (the groups carry their own head sizes)
        return None


def spec_from_config(
    raw: Mapping[str, Any],
    *,
    name: str,
    where: str,
    source: str | None = None,
    quant_config: Mapping[str, Any] | None = None,
    quant_where: str | None = None,
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json mapping read from ``where``.

    ``source`` cites where the values come from when ``where`` is not itself the file.
    ``quant_config`` is a separate ``hf_quant_config.json`` (read from ``quant_where``),
    used when the config has no ``quantization_config``, as vLLM does.
    """
    if not isinstance(raw, Mapping):
        raise KvtoolError(f"{where}: expected a JSON object at the top level")
    text_raw = raw.get("text_config")
    text = _Config(text_raw if isinstance(text_raw, Mapping) else raw, where)
    model_type = text.get("model_type") or raw.get("model_type")
    if not isinstance(model_type, str):
        raise KvtoolError(f"{where}: missing field 'model_type'")
    parser = parser_for(model_type)
    text_map = text_raw if isinstance(text_raw, Mapping) else {}
    declared = raw.get("architectures") or text_map.get("architectures") or []
    inferred = (
        inferred_layout(text.raw, declared if isinstance(declared, list) else [])
        if parser is None
        else None
    )
    if inferred is not None and model_type not in unmodelled_rows():
        parser = _dense
    if parser is None:
        unmodelled = unmodelled_rows().get(model_type)
        why = (
            "its cache layout is unknown"
            if unmodelled is None
            else f"vLLM builds its cache from {unmodelled['what']} ({_vllm_source(unmodelled)}), "
            "which kvtool does not model yet"
        )
        raise KvtoolError(
            f"{where}: model_type {model_type!r} is not supported by kvtool size ({why}, so no "
            "figure would be trustworthy); supported: " + ", ".join(supported_model_types())
        )
    try:
        attention, states = parser(text)
    except SpecError as exc:
        raise KvtoolError(f"{where}: derived {exc.field!r} is invalid: {exc}") from None
    architectures = raw.get("architectures") or [model_type]
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise KvtoolError(f"{where}: field 'architectures' must be a list of class names")
    assumptions: list[str] = []
    if inferred is not None and parser is _dense and model_type not in layout_rows():
        assumptions.append(
            f"model_type {model_type!r} has no layout row: sized from its config fields "
            f"({inferred}), as vLLM's attention layers read them"
        )
    dtype = (
        text.get("torch_dtype") or text.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
    )
    if dtype is None:
        dtype = FALLBACK_DTYPE
        assumptions.append(
            f"config names no dtype: assumed {FALLBACK_DTYPE} (override with --dtype)"
        )
    model_dtype_bytes(str(dtype), f"{where}: field 'torch_dtype'")
    if attention and not attention[0].is_replicated and not text.has("block_configs"):
        if not text.has("head_dim"):
            assumptions.append("head_dim derived as hidden_size / num_attention_heads")
        # chatglm configs name their KV heads multi_query_group_num.
        layout = layout_rows().get(model_type, {}).get("layout")
        if not text.has("num_key_value_heads") and layout != "chatglm":
            assumptions.append("no num_key_value_heads: multi-head attention assumed")
    if text.non_negative_int("num_nextn_predict_layers"):
        assumptions.append(
            "MTP (num_nextn_predict_layers) layers not counted: "
            "add one layer when speculative decoding uses them"
        )
    ssm_dtype = _ssm_state_dtype(model_type, text)
    if ssm_dtype is not None:
        assumptions.append(f"SSM state dtype {ssm_dtype}, as vLLM picks for {model_type}")
    compressed_mla = None
    if layout_rows().get(model_type, {}).get("layout") == "compressed_mla":
        compressed_mla = _compressed_mla_layout(text, layout_rows()[model_type])
        assumptions.append(
            "per-token figures count a latent for every token on every layer; vLLM's "
            "compressed caches keep one per compress_ratio tokens (block-level figures "
            "follow vLLM's per-layer caches)"
        )
    max_len = text.get("max_position_embeddings")
    quant, quant_file = raw.get("quantization_config"), where
    if quant is None and quant_config is not None:
        quant, quant_file = quant_config, quant_where or where
    declared = declared_kv_cache_dtype(quant, quant_file)
    return ModelSpec(
        name=name,
        origin=where,
        source=source or where,
        architecture=str(architectures[0]),
        model_type=model_type,
        dtype=str(dtype).removeprefix("torch."),
        num_attention_heads=text.positive_int("num_attention_heads"),
        head_size=_model_head_size(text, attention),
        attention=attention,
        states=states,
        ssm_state_dtype=ssm_dtype,
        # Only a usable length: 0 (or true) would divide the tier's tokens by nothing.
        max_position_embeddings=max_len if _is_count(max_len) else None,
        checkpoint_kv_cache_dtype=declared[0] if declared else None,
        checkpoint_kv_cache_source=f"{quant_file}: {declared[1]}" if declared else None,
        auto_kv_cache_dtype_by_gpu=auto_kv_cache_dtypes(model_type),
        compressed_mla=compressed_mla,
        assumptions=tuple(assumptions),
    )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
