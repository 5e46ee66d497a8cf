"""kvtool size: KV-cache bytes per token and offload tier sizing (one implementation for all).

Public API (``kvtool audit`` sizing rules and ``kvtool launch`` call these)::

    from kvtool.sizing import load_model_spec, make_deployment, compute

    spec = load_model_spec("llama-3.1-70b")          # or a config.json path / model dir
    report = compute(spec, make_deployment(tp=8, host_ram_gib=1900))
    report.kv_bytes_per_token_per_rank                # 40960
    report.kv_offloading_size_gib                     # 950.0 (TP-wide total, GiB)
    report.l1_capacity_gib                            # 118.75 (KAITO: avail x util / TP)

- ``load_model_spec(path_or_name, release=None) -> ModelSpec``: a config.json, a model
  directory or a curated catalog name (``rules/models/catalog.toml``), found by
  ``kvtool.models.find_model_config``. Raises ``KvtoolError`` naming the missing field
  and file, or the unsupported ``model_type``; with ``release``, also when that vLLM
  release's model registry no longer serves the architecture (or serves it only through
  its Transformers backend and kvtool knows no layout for it).
- ``spec_from_config(mapping, name=, where=) -> ModelSpec``: the same from an in-memory dict.
- ``Deployment`` / ``make_deployment(**flags)``: validated deployment (``tp``, ``pp``,
  ``dcp``, ``kv_cache_dtype``, ``block_size``, ``context_len``, ``sessions``,
  ``host_ram_gib``, ``utilization``, ``cpu_tier_gib``, ``gpu_kv_gib``, ``num_gpu_blocks``,
  load-time assumptions); ``make_deployment`` turns bad values into ``KvtoolError``.
- ``compute(spec, deployment) -> SizingReport``: every figure, warnings and the arithmetic,
  including the engine layout vLLM 0.32 builds (``kvtool.sizing.kv_plan``): the attention
  backend for ``gpu`` (``attention_backend`` overrides), the block size and its reason
  (``block_size_reason``: pinned, the backend's kernel block, or raised so one attention
  page covers a padded state page), the KV cache groups and the pool block, so
  ``num_gpu_blocks`` and ``gpu_tier_tokens`` are vLLM's own numbers. Deployment extras:
  ``gpu`` (default h200), ``attention_backend``, ``prefix_caching`` (two state pages per
  sequence), ``max_in_flight_tokens`` (for sliding-window token capacity).
- ``kvtool.sizing.hf_config.supported_model_types()``: model_type values with a layout row
  in ``rules/models/layouts.toml``.
- Pure helpers in :mod:`kvtool.sizing.arithmetic`: ``per_rank_gib``,
  ``total_from_per_rank_gib``, ``kaito_l1_gib``, ``native_tokens``,
  ``native_size_gib_for_tokens``, ``lmcache_tokens``, ``bench_num_prefixes``.

Units: bytes, GiB = 2^30 bytes (vLLM multiplies ``--kv-offloading-size`` by 2^30), GB/s = 1e9.
Exports are resolved lazily so that importing the CLI stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtool.sizing.deployment import Deployment, make_deployment
    from kvtool.sizing.hf_config import spec_from_config
    from kvtool.sizing.model_spec import load_model_spec
    from kvtool.sizing.report import SizingReport, compute
    from kvtool.sizing.spec import ModelSpec

_EXPORTS = {
    "load_model_spec": "kvtool.sizing.model_spec",
    "spec_from_config": "kvtool.sizing.hf_config",
    "Deployment": "kvtool.sizing.deployment",
    "make_deployment": "kvtool.sizing.deployment",
    "compute": "kvtool.sizing.report",
    "SizingReport": "kvtool.sizing.report",
    "ModelSpec": "kvtool.sizing.spec",
}

__all__ = [
    "Deployment",
    "ModelSpec",
    "SizingReport",
    "compute",
    "load_model_spec",
    "make_deployment",
    "spec_from_config",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'kvtool.sizing' has no attribute {name!r}")
