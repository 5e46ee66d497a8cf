"""CN: connectors, the hybrid KV cache manager (HMA) and offload semantics.

Which connector vLLM loads and how it decides HMA come from the context (release
table + curated semantic rows); the rules only compare them with the config.
One module per sub-family; the import list below is the family's whole registry.
"""

from kvtool.audit.rules.connectors import (
    hashseed,
    hma,
    kv_cache,
    offload_flags,
    parallel_refusals,
    runtime,
    startup,
)

__all__ = [
    "hashseed",
    "hma",
    "kv_cache",
    "offload_flags",
    "parallel_refusals",
    "runtime",
    "startup",
]
