"""Classify a model's attention and state layers from its config.json or its name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import msgspec

from kvtool.errors import KvtoolError
from kvtool.models.source import find_model_config
from kvtool.resources import read_table, rules_dir

FAMILIES_FILE = "models/families.toml"

# The vocabulary of traits, each a property of the cache layout vLLM builds.
TRAITS: tuple[str, ...] = (
    "dense",  # full attention only, one KV head per query head
    "gqa",  # full attention with fewer KV heads than query heads
    "mla",  # multi-head latent attention (one compressed latent per token)
    "sliding_window",  # some layers keep only a window of tokens
    "chunked_local",  # some layers attend within fixed chunks (Llama 4)
    "mamba",  # Mamba / Mamba2 state layers
    "gated_deltanet",  # Gated DeltaNet state layers (Qwen3-Next, Qwen3.5)
    "linear_attention",  # other linear-attention state layers (MiniMax lightning, Kimi KDA)
    "moe",  # mixture of experts (no effect on the cache, reported for context)
    "multimodal",  # a vision/audio wrapper around the language model
)
# Layers that keep a recurrent state instead of per-token KV: vLLM needs HMA for them.
STATE_TRAITS: frozenset[str] = frozenset({"mamba", "gated_deltanet", "linear_attention"})

_ATTENTION_TRAITS: frozenset[str] = frozenset({"dense", "gqa", "mla"})
_STATE_KIND_TRAIT = {"mamba1": "mamba", "mamba2": "mamba", "gdn": "gated_deltanet"}
_EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# Phi-3-vision (phi3_v) and Phi-4-multimodal keep their image encoder in img_processor /
# embd_layer rather than a vision_config.
_WRAPPER_FIELDS = (
    "vision_config",
    "audio_config",
    "vision_tower",
    "mm_projector_type",
    "img_processor",
    "embd_layer",
)


class ModelIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """What kind of model ``name`` is and where that was read.

    Invariant: ``traits`` is a subset of :data:`TRAITS` and holds exactly one of
    ``dense``/``gqa``/``mla`` or none of them (a pure state-space model).
    """

    name: str
    traits: frozenset[str]
    source: str  # "config.json at PATH" or the family row's cited config.json URL
    family: str | None = None  # the family table row that matched, if any

    def __post_init__(self) -> None:
        unknown = self.traits - set(TRAITS)
        if unknown:
            raise ValueError(f"{self.name}: unknown traits {sorted(unknown)}")

    @property
    def has_state(self) -> bool:
        """State layers (Mamba, Gated DeltaNet, linear attention) next to attention layers:
        two KV cache spec kinds that vLLM cannot unify, so it does not start without HMA."""
        return bool(self.traits & STATE_TRAITS) and bool(self.traits & _ATTENTION_TRAITS)

    @property
    def sliding_window(self) -> bool:
        return "sliding_window" in self.traits

    @property
    def chunked_local(self) -> bool:
        return "chunked_local" in self.traits

    @property
    def hybrid(self) -> bool:
        """More than one KV cache group kind: HMA changes the layout."""
        return self.has_state or self.sliding_window or self.chunked_local

    def describe(self) -> str:
        """Traits in table order, e.g. ``gqa + gated_deltanet + multimodal``."""
        return " + ".join(t for t in TRAITS if t in self.traits)


class FamilyRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One row of rules/models/families.toml."""

    family: str
    patterns: tuple[str, ...]  # regular expressions searched in the lower-cased name
    traits: tuple[str, ...]
    config: str  # public URL of a config.json of the family that shows the traits
    note: str = ""
    # "owner/repo@commit path": a public copy of a config.json of the family that the row
    # was checked against, when the hub file itself could not be read.
    copy: str = ""

    def matches(self, name: str) -> bool:
        lowered = name.lower()
        return any(
            literal_prefix(pattern) in lowered and _compiled(self.family, pattern).search(lowered)
            for pattern in self.patterns
        )


@cache
def families() -> tuple[FamilyRow, ...]:
    """The family table, first match wins; ``KvtoolError`` when it is malformed."""
    table = read_table(rules_dir() / FAMILIES_FILE)
    try:
        rows = msgspec.convert(table.get("families", []), type=tuple[FamilyRow, ...])
        for row in rows:
            ModelIdentity(name=row.family, traits=frozenset(row.traits), source=row.config)
    except (msgspec.ValidationError, ValueError) as exc:
        raise KvtoolError(f"{rules_dir() / FAMILIES_FILE}: bad row: {exc}") from exc
    return rows


def _text_part(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    text = raw.get("text_config") or raw.get("llm_config") or raw.get("language_config")
    return text if isinstance(text, Mapping) else raw


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _layer_traits(text: Mapping[str, Any]) -> set[str]:
    """Traits read from layer-type fields, for configs sizing has no parser for."""
    traits: set[str] = set()
    words: list[str] = []
    for key in ("layer_types", "layers_block_type", "block_types"):
        value = text.get(key)
        if isinstance(value, list):
            words += [str(v).lower() for v in value]
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        traits.add("mamba")
    for word in words:
        if "sliding" in word or word in ("local", "swa"):
            traits.add("sliding_window")
        elif "mamba" in word or word == "ssm":
            traits.add("mamba")
        elif "deltanet" in word or "linear" in word:
            traits.add("linear_attention" if "deltanet" not in word else "gated_deltanet")
    if text.get("linear_attn_config") is not None:
        traits.add("linear_attention")
    if _positive(text.get("kv_lora_rank")):
        traits.add("mla")
    if _positive(text.get("sliding_window")) and text.get("use_sliding_window", True):
        traits.add("sliding_window")
    return traits


def _window_never_reached(text: Mapping[str, Any]) -> bool:
    """One window for every layer (no ``layer_types``) at least as long as any sequence."""
    window, longest = text.get("sliding_window"), text.get("max_position_embeddings")
    if text.get("layer_types") is not None or not (_positive(window) and _positive(longest)):
        return False
    return isinstance(window, int) and isinstance(longest, int) and window >= longest


def classify_config(raw: Mapping[str, Any], *, name: str, where: str) -> ModelIdentity:
    """Classify a config.json mapping read from ``where``.

    Attention and state groups come from ``kvtool.sizing.spec_from_config`` when sizing
    knows the ``model_type``; otherwise from the layer-type fields. Experts, vision
    wrappers and chunked local attention are read here (sizing does not need them).
    """
    from kvtool.sizing import spec_from_config
    from kvtool.sizing.spec import AttentionKind

    text = _text_part(raw)
    traits: set[str] = set()
    has_attention = _positive(text.get("num_attention_heads"))
    try:
        spec = spec_from_config(raw, name=name, where=where)
    except KvtoolError:
        traits |= _layer_traits(text)
    else:
        has_attention = bool(spec.attention)
        traits |= {_STATE_KIND_TRAIT.get(group.kind, "linear_attention") for group in spec.states}
        if spec.is_mla:
            traits.add("mla")
        # vLLM gives sliding and chunked-local layers different cache specs; sizing
        # counts both as local windows, so the kind tells them apart here.
        kinds = {group.kind for group in spec.attention}
        if AttentionKind.SLIDING in kinds:
            traits.add("sliding_window")
        if AttentionKind.CHUNKED in kinds:
            traits.add("chunked_local")
    if _positive(text.get("attention_chunk_size")):
        traits.add("chunked_local")
    if _window_never_reached(text):
        # Phi-3.5-mini, Phi-3.5-vision, Phi-4-mini: sliding_window 262144 with
        # max_position_embeddings 131072, so every layer attends to the whole sequence.
        traits.discard("sliding_window")
    if any(_positive(text.get(key)) and text.get(key) != 1 for key in _EXPERT_FIELDS):
        traits.add("moe")
    if text is not raw or any(raw.get(key) is not None for key in _WRAPPER_FIELDS):
        traits.add("multimodal")
    if "mla" not in traits and has_attention:
        heads = text.get("num_attention_heads")
        kv_heads = text.get("num_key_value_heads", heads)
        if _positive(heads) and _positive(kv_heads):
            traits.add("gqa" if kv_heads < heads else "dense")
    return ModelIdentity(name=name, traits=frozenset(traits), source=f"config.json at {where}")


def identify(name: str, *, config_path: str | None = None) -> ModelIdentity | None:
    """The model's identity from ``config_path``, a local ``name`` path, or the family table.

    A given ``config_path`` that cannot be read is an error (``KvtoolError``); a name that
    no source knows gives None.
    """
    found = find_model_config(name, config_path=config_path or None, catalog=False)
    if found is not None:
        return classify_config(found.raw, name=name, where=found.where)
    row = family_row(name)
    if row is None:
        return None
    return ModelIdentity(
        name=name, traits=frozenset(row.traits), source=row.config, family=row.family
    )


@cache
def family_row(name: str) -> FamilyRow | None:
    """The first family row whose patterns match ``name`` (an audit asks once per model
    name, however many engines serve it)."""
    return next((row for row in families() if row.matches(name)), None)


@cache
def literal_prefix(pattern: str) -> str:
    """Text every match of ``pattern`` starts with ('' where that is not plain to see):
    a name without it cannot match, so the pattern need not be compiled for it. The
    table's ~90 patterns are mostly searched for a name told by one of the last rows
    (the general ``llama-3`` after the specific ones), and compiling them all cost every
    cold start more than the rest of the identification (issue 26)."""
    if "|" in pattern:  # an alternative may start anywhere
        return ""
    literal: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char.isascii() and (char.isalnum() or char in "-_/:"):
            literal.append(char)
            index += 1
        elif char == "\\" and pattern[index + 1 : index + 2] in tuple(".-_/:+?*()[]{}^$\\"):
            literal.append(pattern[index + 1])
            index += 2
        else:
            break
    if literal and pattern[index : index + 1] in ("?", "*", "{"):
        literal.pop()  # the last character may be repeated zero times
    return "".join(literal)


@cache
def _compiled(family: str, pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled; ``KvtoolError`` naming the row when it is not a regular
    expression (the table's patterns are compiled when first needed, not at load)."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        where = rules_dir() / FAMILIES_FILE
        raise KvtoolError(f"{where}: bad row {family}: not a regular expression: {exc}") from exc
