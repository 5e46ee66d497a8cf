"""CN: connectors, the hybrid KV cache manager (HMA) and offload semantics.

Which connector vLLM loads and how it decides HMA come from the context (release
table + curated semantic rows); the rules only compare them with the config.
One module per sub-family; the import list below is the family's whole registry.
"""

# One line per module: importing it registers its rules ("X as X" marks the import as
# the package's own, so it needs no second list).
from kvtool.audit.rules.connectors import hashseed as hashseed
from kvtool.audit.rules.connectors import hma as hma
from kvtool.audit.rules.connectors import kv_cache as kv_cache
from kvtool.audit.rules.connectors import offload_flags as offload_flags
from kvtool.audit.rules.connectors import parallel_refusals as parallel_refusals
from kvtool.audit.rules.connectors import runtime as runtime
from kvtool.audit.rules.connectors import startup as startup
