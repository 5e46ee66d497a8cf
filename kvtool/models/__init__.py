"""Model identity without the hub: what kind of KV cache a served model needs.

One module for every command that must know the model (``audit``, ``size``, ``launch``)::

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

__all__ = ["STATE_TRAITS", "TRAITS", "ModelIdentity", "classify_config", "identify"]
