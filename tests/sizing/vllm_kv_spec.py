"""Ask a real vLLM engine for the KV cache spec of each tiny model; print one JSON object.

Run with the vLLM environment's python (``.venv-vllm``), not the test environment's:
``python vllm_kv_spec.py REQUESTS.json``, where the file lists
``{"model_dir": ..., "llm_kwargs": {...}}`` entries. Each directory holds only a
config.json: weights are random (``load_format="dummy"``) and no tokenizer is loaded, so
nothing is downloaded. The caller sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` so the engine
runs in this process, and the per-layer specs come from the executor: the same call the
engine core makes to size its cache.

Output: ``{model_dir: {layer_name: {"type", "block_size", "page_size_bytes",
"state_bytes"}}}``; ``state_bytes`` is the unpadded recurrent state of a Mamba-type layer.
"""

from __future__ import annotations

import gc
import json
import math
import sys
from pathlib import Path
from typing import Any

# A small pool: the test needs the spec, not capacity (the default takes a GiB).
KV_CACHE_BYTES = 32 * 1024 * 1024


def kv_spec(model_dir: str, llm_kwargs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    import torch
    from vllm import LLM

    llm = LLM(
        model=model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=256,
        max_num_seqs=2,
        max_num_batched_tokens=256,
        seed=0,
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        **llm_kwargs,
    )
    (specs,) = llm.llm_engine.model_executor.get_kv_cache_specs()
    layers: dict[str, dict[str, Any]] = {}
    for name, spec in specs.items():
        layer: dict[str, Any] = {
            "type": type(spec).__name__,
            "block_size": spec.block_size,
            "page_size_bytes": spec.page_size_bytes,
        }
        if hasattr(spec, "shapes"):
            layer["state_bytes"] = sum(
                math.prod(shape) * torch.empty((), dtype=dtype).element_size()
                for shape, dtype in zip(spec.shapes, spec.dtypes, strict=True)
            )
        layers[name] = layer
    del llm
    gc.collect()
    return layers


def main(requests_file: str) -> None:
    requests = json.loads(Path(requests_file).read_text())
    result = {r["model_dir"]: kv_spec(r["model_dir"], r["llm_kwargs"]) for r in requests}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
