"""The transfer engine against every KV cache layout of vLLM 0.32, views built by vLLM itself.

Runs in the vLLM environment (``tests/connector/test_vllm_layouts.py``). For
each ``KVCacheLayout`` it lays out a 3-layer, 4-KV-head model's cache with
vLLM's own ``get_kv_cache_config_from_groups`` and ``allocate_kv_cache`` (the
worker's allocation path), registers the per-layer views with a worker-role
KvtoolConnector, stores scattered blocks, overwrites them and loads them
back into other blocks, then compares every byte. Prints one JSON object:
layout -> {"ok": bool, "error": str, "block_compact": bool}.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.worker.utils import allocate_kv_cache

from kvtool.connector.manager import LoadJob, StoreJob
from kvtool.connector.vllm import KvtoolConnector
from tests.connector.scheduler_harness import write_model

NUM_LAYERS, NUM_KV_HEADS, HEAD_SIZE, BLOCK_SIZE, NUM_BLOCKS = 3, 4, 8, 16, 12


def check_layout(model: Path, layout: KVCacheLayout) -> dict[str, Any]:
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=str(model), max_model_len=256, dtype="float16",
                                 skip_tokenizer_init=True),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
        device_config=DeviceConfig("cpu"),
        kv_transfer_config=KVTransferConfig(
            kv_connector="KvtoolConnector", kv_connector_module_path="kvtool.connector.vllm",
            kv_role="kv_both", kv_connector_extra_config={"kvtool.host_capacity_bytes": "64MiB"}),
    )
    vllm_config.cache_config.kv_cache_layout = layout.name
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS,
                             head_size=HEAD_SIZE, dtype=torch.float16)
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(NUM_LAYERS)]
    groups = [KVCacheGroupSpec(layers, spec)]
    kv_cache_config = get_kv_cache_config_from_groups(
        vllm_config, groups, NUM_BLOCKS * NUM_LAYERS * spec.page_size_bytes)
    kv = allocate_kv_cache(kv_cache_config, torch.device("cpu"), layout)
    # vLLM's own word on it: L and B outermost, so each page is one run of bytes.
    compact = layout.is_block_compact
    for tensor in kv.values():
        tensor.copy_(torch.randn(tensor.shape).to(tensor.dtype))
    original = {name: t.clone() for name, t in kv.items()}
    worker = KvtoolConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    try:
        worker.register_kv_caches(kv)
    except ValueError as exc:
        return {"ok": False, "error": str(exc), "block_compact": compact}
    engine = worker.engine
    assert engine is not None
    sources, targets, slots = (2, 3, 7, 10), (0, 5, 6, 11), (0, 1, 2, 5)
    keys = tuple(("key", b) for b in sources)
    engine.submit_store(StoreJob(1, sources, slots, keys))
    for tensor in kv.values():
        tensor.zero_()
    engine.submit_load(LoadJob(2, targets, slots, keys))
    results = engine.wait_all()
    ok = all(r.ok for r in results) and all(
        torch.equal(kv[name][dst], original[name][src])
        for name in kv for src, dst in zip(sources, targets, strict=True))
    untouched = [b for b in range(NUM_BLOCKS) if b not in targets]
    ok = ok and all(int(torch.count_nonzero(kv[name][untouched])) == 0 for name in kv)
    return {"ok": ok, "error": "" if ok else f"bytes differ: {results}", "block_compact": compact}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(Path(tmp) / "model", NUM_LAYERS)
        print(json.dumps({layout.name: check_layout(model, layout) for layout in KVCacheLayout}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
