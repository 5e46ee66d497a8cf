"""Model identity without the hub: what kind of KV cache a served model needs.

One module for every command that must know the model (``audit``, ``size``, ``launch``):
``find_model_config`` is the one lookup (a local config.json or model directory, else a
catalog entry) that ``kvtool size`` and ``kvtool launch`` size from and ``audit``
classifies; ``check_served`` says when a vLLM release's model registry refuses the
architecture::

    from kvtool.models import identify

    identity = identify("Qwen/Qwen3.5-9B")              # family table: name patterns
    identity = identify("/models/x", config_path=None)  # a local model dir or config.json
    identity.traits    # frozenset({"gated_deltanet", "gqa", "multimodal"})
    identity.has_state # Mamba / Gated DeltaNet / linear attention layers: needs HMA

A config.json, when one is given or the model is a local path, decides (read through
``kvtool.sizing``'s public API, plus the fields sizing does not need: experts, vision
towers, chunked local attention); otherwise the family table ``rules/models/families.toml``
matches the name. ``identify`` returns None when neither knows the model.
"""

from kvtool.models.identity import (
    STATE_TRAITS,
    TRAITS,
    ModelIdentity,
    classify_config,
    identify,
)
from kvtool.models.served import check_served, refusal
from kvtool.models.source import ModelConfig, find_model_config

__all__ = [
    "STATE_TRAITS",
    "TRAITS",
    "ModelConfig",
    "ModelIdentity",
    "check_served",
    "classify_config",
    "find_model_config",
    "identify",
    "refusal",
]
