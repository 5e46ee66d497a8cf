"""Parse a Hugging Face ``config.json`` into a :class:`ModelSpec`.

Only architectures whose cache layout kvtool knows are accepted (see ``PARSERS``): an
unknown ``model_type`` is an error that lists the supported ones, never a guess. Every
missing or malformed field is reported by name together with the file it was read from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvtool import limits
from kvtool.errors import KvtoolError
from kvtool.sizing.dtypes import model_dtype_bytes
from kvtool.sizing.facts import sizing_facts
from kvtool.sizing.spec import (
    AttentionGroup,
    AttentionKind,
    GatedDeltaNetGroup,
    Mamba1Group,
    Mamba2Group,
    ModelSpec,
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
        sliding_window=window if kind is AttentionKind.SLIDING else None,
    )


def _full_and_sliding(cfg: _Config, sliding_layers: int) -> tuple[AttentionGroup, ...]:
    layers = cfg.positive_int("num_hidden_layers")
    groups = []
    if layers - sliding_layers:
        groups.append(_attention(cfg, AttentionKind.FULL, layers - sliding_layers))
    if sliding_layers:
        window = cfg.positive_int("sliding_window")
        groups.append(_attention(cfg, AttentionKind.SLIDING, sliding_layers, window))
    return tuple(groups)


def _groups_from_layer_types(cfg: _Config, layers: int) -> tuple[AttentionGroup, ...] | None:
    """Full and sliding groups as ``layer_types`` lists them; None when the config has none."""
    types = cfg.layer_types(layers)
    if types is None:
        return None
    unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
    if unknown:
        raise KvtoolError(f"{cfg.where}: unsupported layer_types {unknown} for this architecture")
    return _full_and_sliding(cfg, types.count("sliding_attention"))


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


def _interleaved(
    every: int,
) -> Callable[[_Config], tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]]:
    """Gemma-2/3 style: every ``every``-th layer (1-based) is global, the rest slide.

    ``sliding_window_pattern`` in the config overrides ``every``; ``layer_types`` wins over both.
    """

    def parse(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
        layers = cfg.positive_int("num_hidden_layers")
        listed = _groups_from_layer_types(cfg, layers)
        if listed is not None:
            return listed, ()
        pattern = cfg.positive_int("sliding_window_pattern", default=every)
        full = sum(1 for i in range(layers) if (i + 1) % pattern == 0)
        return _full_and_sliding(cfg, layers - full), ()

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


def _nemotron_h(cfg: _Config) -> tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]:
    """Blocks from ``hybrid_override_pattern``: M = Mamba-2, * = attention, - and E = MLP/MoE."""
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise KvtoolError(f"{cfg.where}: missing field 'hybrid_override_pattern'")
    unknown = sorted(set(pattern) - set("M*-E"))
    if unknown:
        raise KvtoolError(f"{cfg.where}: hybrid_override_pattern has unknown block types {unknown}")
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


def _ssm_state_dtype(model_type: str, text: _Config) -> str | None:
    """The SSM state dtype vLLM's per-model config hooks choose under "auto", if any.

    Qwen3.5 uses the config's ``mamba_ssm_dtype``; Nemotron-H its ``mamba_ssm_cache_dtype``
    or a default from the facts table. Other models keep the model dtype (None).
    """
    if model_type.startswith("qwen3_5"):
        declared = text.get("mamba_ssm_dtype")
        return str(declared) if declared is not None else None
    if model_type == "nemotron_h":
        return str(text.get("mamba_ssm_cache_dtype") or sizing_facts().nemotron_h_default_ssm_dtype)
    return None


_Parser = Callable[[_Config], tuple[tuple[AttentionGroup, ...], tuple[StateGroup, ...]]]

PARSERS: dict[str, _Parser] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "granite",
            "granitemoe",
            "olmo2",
            "phi3",
        ),
        _dense,
    ),
    "gemma2": _interleaved(2),
    "gemma3": _interleaved(6),
    "gemma3_text": _interleaved(6),
    "gpt_oss": _interleaved(2),
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "kimi_k2"), _mla),
    "jamba": _jamba,
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granite_hybrid,
    **dict.fromkeys(
        ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
        _gated_deltanet,
    ),
}


def spec_from_config(
    raw: Mapping[str, Any], *, name: str, where: str, source: str | None = None
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json mapping read from ``where``.

    ``source`` cites where the values come from when ``where`` is not itself the file.
    """
    if not isinstance(raw, Mapping):
        raise KvtoolError(f"{where}: expected a JSON object at the top level")
    text_raw = raw.get("text_config")
    text = _Config(text_raw if isinstance(text_raw, Mapping) else raw, where)
    model_type = text.get("model_type") or raw.get("model_type")
    if not isinstance(model_type, str):
        raise KvtoolError(f"{where}: missing field 'model_type'")
    parser = PARSERS.get(model_type)
    if parser is None:
        raise KvtoolError(
            f"{where}: model_type {model_type!r} is not supported by kvtool size (its cache "
            "layout is unknown, so no figure would be trustworthy); supported: "
            + ", ".join(sorted(PARSERS))
        )
    try:
        attention, states = parser(text)
    except SpecError as exc:
        raise KvtoolError(f"{where}: derived {exc.field!r} is invalid: {exc}") from None
    architectures = raw.get("architectures") or [model_type]
    assumptions: list[str] = []
    dtype = (
        text.get("torch_dtype") or text.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
    )
    if dtype is None:
        dtype = FALLBACK_DTYPE
        assumptions.append(
            f"config names no dtype: assumed {FALLBACK_DTYPE} (override with --dtype)"
        )
    model_dtype_bytes(str(dtype), f"{where}: field 'torch_dtype'")
    if attention and attention[0].kind is not AttentionKind.MLA:
        if not text.has("head_dim"):
            assumptions.append("head_dim derived as hidden_size / num_attention_heads")
        if not text.has("num_key_value_heads"):
            assumptions.append("no num_key_value_heads: multi-head attention assumed")
    if text.non_negative_int("num_nextn_predict_layers"):
        assumptions.append(
            "MTP (num_nextn_predict_layers) layers not counted: "
            "add one layer when speculative decoding uses them"
        )
    ssm_dtype = _ssm_state_dtype(model_type, text)
    if ssm_dtype is not None:
        assumptions.append(f"SSM state dtype {ssm_dtype}, as vLLM picks for {model_type}")
    max_len = text.get("max_position_embeddings")
    return ModelSpec(
        name=name,
        origin=where,
        source=source or where,
        architecture=str(architectures[0]),
        model_type=model_type,
        dtype=str(dtype).removeprefix("torch."),
        num_attention_heads=text.positive_int("num_attention_heads"),
        attention=attention,
        states=states,
        ssm_state_dtype=ssm_dtype,
        max_position_embeddings=max_len if isinstance(max_len, int) else None,
        assumptions=tuple(assumptions),
    )
