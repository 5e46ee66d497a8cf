"""Byte widths of model and KV-cache element types, by the names vLLM and HF configs use."""

from __future__ import annotations

from kvtool.errors import KvtoolError

# HF ``torch_dtype``/``dtype`` and vLLM ``--dtype`` spellings.
MODEL_DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
}

# ``--kv-cache-dtype`` values whose element width is plain: no per-token scale bytes.
# "auto" means the model dtype. FP8 variants keep one per-tensor scale, not per token.
KV_DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}

KV_DTYPE_CHOICES: tuple[str, ...] = ("auto", *KV_DTYPE_BYTES)


def model_dtype_bytes(name: str, where: str) -> int:
    """Bytes per element of a model dtype; ``where`` names the field for the error."""
    key = name.removeprefix("torch.").lower()
    if key not in MODEL_DTYPE_BYTES:
        raise KvtoolError(
            f"{where}: unknown dtype {name!r}; expected one of {', '.join(MODEL_DTYPE_BYTES)}"
        )
    return MODEL_DTYPE_BYTES[key]


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per KV element for ``--kv-cache-dtype`` (``auto`` = the model dtype)."""
    if kv_cache_dtype == "auto":
        return model_dtype_bytes(model_dtype, "model dtype")
    if kv_cache_dtype not in KV_DTYPE_BYTES:
        raise KvtoolError(
            f"--kv-cache-dtype {kv_cache_dtype!r} is not supported by kvtool size: quantized "
            "modes with per-token scales change the page size in ways a config cannot show; "
            f"use one of {', '.join(KV_DTYPE_CHOICES)} or read the page size from the vLLM log"
        )
    return KV_DTYPE_BYTES[kv_cache_dtype]
