"""The KV cache dtype a checkpoint declares, which vLLM 0.32 uses for ``--kv-cache-dtype auto``.

Two declarations exist (vLLM v0.32.0 sources, under
https://github.com/vllm-project/vllm/tree/v0.32.0/vllm):

- ModelOpt checkpoints: ``quantization_config`` (config.json, ModelOpt >= 0.31) or
  ``hf_quant_config.json`` beside it (older ModelOpt; ``transformers_utils/config.py``
  reads it when config.json has none). ``kv_cache_quant_algo`` (or a ``kv_cache_scheme``
  dict) maps to a cache dtype in ``utils/torch_utils.py``
  ``get_kv_cache_quant_algo_string``; a config without ``quant_method`` but with
  ``producer.name == "modelopt"`` is marked ``modelopt`` first
  (``transformers_utils/model_arch_config_convertor.py``).
- compressed-tensors checkpoints: a ``kv_cache_scheme`` makes ``auto`` mean ``fp8``
  (``model_executor/layers/attention/attention.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# utils/torch_utils.py MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP
MODELOPT_KV_DTYPES = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}


def _is_modelopt(quant: Mapping[str, Any]) -> bool:
    method = str(quant.get("quant_method") or "").lower()
    if method.startswith("modelopt"):
        return True
    producer = quant.get("producer")
    return isinstance(producer, Mapping) and producer.get("name") == "modelopt"


def _modelopt_kv(quant: Mapping[str, Any]) -> str | None:
    inner = quant.get("quantization")
    inner = inner if isinstance(inner, Mapping) else quant
    algo = (
        inner.get("kv_cache_scheme")
        or quant.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or quant.get("kv_cache_quant_algo")
    )
    if isinstance(algo, Mapping):
        if (
            algo.get("dynamic") is False
            and algo.get("num_bits") == 8
            and algo.get("type") == "float"
        ):
            algo = "fp8"
        elif algo.get("num_bits") == 4 and algo.get("type") == "float":
            algo = "nvfp4"
        else:
            return None  # vLLM warns and falls back to auto
    if isinstance(algo, str):
        return MODELOPT_KV_DTYPES.get(algo.lower())
    return None


def declared_kv_cache_dtype(quant: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(cache dtype, the field that says so) for a checkpoint's quantization config."""
    if not isinstance(quant, Mapping):
        return None
    if _is_modelopt(quant):
        dtype = _modelopt_kv(quant)
        return None if dtype is None else (dtype, "kv_cache_quant_algo")
    if quant.get("kv_cache_scheme") is not None:
        return "fp8", "kv_cache_scheme"
    return None
