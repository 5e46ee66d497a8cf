"""Ask a real vLLM engine for the KV cache spec of each model directory given; print JSON.

Run with the vLLM environment's python (``.venv-vllm``), not the test environment's:
``python vllm_kv_spec.py BLOCK_SIZE MODEL_DIR...``. Each directory holds only a
config.json: weights are random (``load_format="dummy"``) and no tokenizer is loaded, so
nothing is downloaded. The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``
is set by the caller) and its per-layer specs come from the executor, the same call the
engine core makes to size its cache.

Output, one JSON object: ``{model_dir: {"layers": {name: {"type", "block_size",
"page_size_bytes"}}}}``.
"""

from __future__ import annotations

import gc
import json
import sys

# A small pool: the test needs the spec, not capacity (the default takes a GiB).
KV_CACHE_BYTES = 32 * 1024 * 1024


def kv_spec(model_dir: str, block_size: int) -> dict[str, object]:
    from vllm import LLM

    llm = LLM(
        model=model_dir,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        block_size=block_size,
        enforce_eager=True,
        max_model_len=256,
        max_num_seqs=2,
        max_num_batched_tokens=256,
        seed=0,
        kv_cache_memory_bytes=KV_CACHE_BYTES,
    )
    executor = llm.llm_engine.model_executor
    (specs,) = executor.get_kv_cache_specs()
    layers = {
        name: {
            "type": type(spec).__name__,
            "block_size": spec.block_size,
            "page_size_bytes": spec.page_size_bytes,
        }
        for name, spec in specs.items()
    }
    del llm, executor
    gc.collect()
    return {"layers": layers}


def main(argv: list[str]) -> None:
    block_size = int(argv[0])
    print(json.dumps({model_dir: kv_spec(model_dir, block_size) for model_dir in argv[1:]}))


if __name__ == "__main__":
    main(sys.argv[1:])
