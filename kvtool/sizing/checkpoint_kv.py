"""The KV cache dtype a checkpoint declares, which vLLM 0.32 uses for ``--kv-cache-dtype auto``.

Two declarations exist (vLLM v0.32.0 sources, under
https://github.com/vllm-project/vllm/tree/v0.32.0/vllm):

- ModelOpt checkpoints: ``quantization_config`` (config.json, ModelOpt >= 0.31) or
  ``hf_quant_config.json`` beside it (older ModelOpt; ``transformers_utils/config.py``
  reads it when config.json has none). ``kv_cache_quant_algo`` (or a ``kv_cache_scheme``
  dict) maps to a cache dtype in ``utils/torch_utils.py``
  ``get_kv_cache_quant_algo_string``; a config without ``quant_method`` but with
  ``producer.name == "modelopt"`` is marked ``modelopt`` first, and only when its
  ``quantization.quant_algo`` is a known one
  (``transformers_utils/model_arch_config_convertor.py``
  ``_normalize_quantization_config``): a flat config with ``quant_algo`` at the top level
  stays unquantized, so ``auto`` is the model dtype.
- compressed-tensors checkpoints: a ``kv_cache_scheme`` makes ``auto`` mean ``fp8``
  (``model_executor/layers/attention/attention.py`` reads it from the checkpoint's
  quantization config object, which only a recognised ``quant_method`` builds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtool.errors import KvtoolError

# utils/torch_utils.py MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP
MODELOPT_KV_DTYPES = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}


# model_arch_config_convertor.py: the quant_algo values that mark a producer-only ModelOpt
# config as modelopt (FP8 variants) or modelopt_fp4 (NVFP4).
MODELOPT_QUANT_ALGOS = frozenset({"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4"})


def _is_modelopt(quant: Mapping[str, Any], where: str) -> bool:
    method = str(quant.get("quant_method") or "").lower()
    if method.startswith("modelopt"):
        return True
    inner = quant.get("quantization")
    inner = inner if isinstance(inner, Mapping) else {}
    producer = quant.get("producer")
    marked = (
        isinstance(producer, Mapping) and producer.get("name") == "modelopt"
    ) or "modelopt_quant_config" in inner
    algo = inner.get("quant_algo")
    if marked and algo is not None and str(algo).upper() not in MODELOPT_QUANT_ALGOS:
        # model_arch_config_convertor.py raises "Unknown ModelOpt quant algo": the engine
        # does not start, so no KV figure of this checkpoint is vLLM's.
        raise KvtoolError(
            f"{where}: field 'quantization.quant_algo' is {algo!r}, which vLLM 0.32 does not "
            f"load (it knows {', '.join(sorted(MODELOPT_QUANT_ALGOS))} for ModelOpt checkpoints)"
        )
    return marked and algo is not None


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


def declared_kv_cache_dtype(
    quant: Mapping[str, Any] | None, where: str
) -> tuple[str, str] | None:
    """(cache dtype, the field that says so) for a checkpoint's quantization config.

    ``where`` names the file the config was read from, for the error when vLLM would
    refuse the checkpoint.
    """
    if not isinstance(quant, Mapping):
        return None
    if _is_modelopt(quant, where):
        dtype = _modelopt_kv(quant)
        return None if dtype is None else (dtype, "kv_cache_quant_algo")
    method = str(quant.get("quant_method") or "").lower()
    if method == "compressed-tensors" and quant.get("kv_cache_scheme") is not None:
        return "fp8", "kv_cache_scheme"
    return None
