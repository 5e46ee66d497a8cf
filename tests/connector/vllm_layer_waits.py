"""KvtoolConnector's per-layer loads through its vLLM hooks, forward contexts built by vLLM.

Runs in the vLLM environment (``tests/connector/test_vllm_layer_waits.py``). A
worker-role KvtoolConnector registers a 12-layer model's KV (CPU tensors);
then its transfer engine is rebuilt over the same tensors on the lazy stream
stand-in of ``tests/connector/lazy_streams.py`` (no CUDA here; see there), so
copies run only when a wait forces them. For each kind of forward it binds
metadata with one synchronous load, calls ``start_load_kv`` inside vLLM's own
``set_forward_context``, reads the KV as the forward's kernels would, and
reports what each read saw. Per-layer waits start only once every registered
layer has called ``wait_for_layer_load`` in some forward: a case before any
forward, and a connector with one registered layer that never asks (as a
Mamba layer would not), show the whole load waited for up front. Prints one
JSON object: case -> figures.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    CUDAGraphMode,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.forward_context import get_forward_context, set_forward_context
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.worker.utils import allocate_kv_cache

from kvtool.connector.manager import LoadJob, StoreJob
from kvtool.connector.transfer import TransferEngine
from kvtool.connector.vllm import KvtoolConnector
from kvtool.connector.vllm.common import KvtoolConnectorMetadata
from tests.connector.lazy_streams import LazyQueue
from tests.connector.scheduler_harness import write_model

NUM_LAYERS, BLOCK_SIZE, NUM_BLOCKS = 12, 16, 16
SOURCES, TARGETS, SLOTS = (2, 3), (9, 12), (0, 1)
KEYS = tuple(("key", b) for b in SOURCES)


class Forward:
    """One worker-role connector, its KV, and a fresh lazy engine per case."""

    def __init__(self, model: Path, silent_layers: int = 0) -> None:
        self.vllm_config = VllmConfig(
            model_config=ModelConfig(model=str(model), max_model_len=256, dtype="float16",
                                     skip_tokenizer_init=True),
            cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
            device_config=DeviceConfig("cpu"),
            kv_transfer_config=KVTransferConfig(
                kv_connector="KvtoolConnector", kv_connector_module_path="kvtool.connector.vllm",
                kv_role="kv_both",
                kv_connector_extra_config={"kvtool.host_capacity_bytes": "16MiB"}),
        )
        self.vllm_config.cache_config.kv_cache_layout = KVCacheLayout.LBHNC.name
        spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=2, head_size=8,
                                 dtype=torch.float16)
        # The layers the forward asks about; the silent ones are registered too.
        self.layers = [f"model.layers.{i}.self_attn.attn" for i in range(NUM_LAYERS)]
        registered = self.layers + [f"model.layers.{NUM_LAYERS + i}.mixer"
                                    for i in range(silent_layers)]
        kv_cache_config = get_kv_cache_config_from_groups(
            self.vllm_config, [KVCacheGroupSpec(registered, spec)],
            NUM_BLOCKS * len(registered) * spec.page_size_bytes)
        self.kv = allocate_kv_cache(kv_cache_config, torch.device("cpu"), KVCacheLayout.LBHNC)
        self.connector = KvtoolConnector(self.vllm_config, KVConnectorRole.WORKER,
                                         kv_cache_config)
        self.connector.register_kv_caches(self.kv)
        self.queue = LazyQueue()
        self.original: dict[str, torch.Tensor] = {}

    def use_lazy_engine(self) -> TransferEngine:
        """The worker's transfer engine rebuilt over the same KV on a fresh lazy queue."""
        self.queue = LazyQueue()
        worker = self.connector.connector_worker
        assert worker is not None
        worker.engine = TransferEngine.from_kv_caches(self.kv, worker.setup.num_slots,
                                                      queue=self.queue)
        return worker.engine

    def start(self, attn_metadata: Any, mode: CUDAGraphMode, *,
              fresh_engine: bool = True) -> None:
        """A lazy engine (fresh unless told otherwise) holding SOURCES; the step's sync
        load into TARGETS started the way the model runner starts it, inside the
        step's forward context."""
        worker = self.connector.connector_worker
        assert worker is not None and worker.engine is not None
        if fresh_engine:
            self.use_lazy_engine()
        assert worker.engine is not None
        for tensor in self.kv.values():
            tensor.copy_(torch.randn(tensor.shape).to(tensor.dtype))
        self.original = {name: t.clone() for name, t in self.kv.items()}
        worker.engine.submit_store(StoreJob(1, SOURCES, SLOTS, KEYS))
        self.queue.run_everything()
        for tensor in self.kv.values():
            tensor.zero_()
        self.connector.bind_connector_metadata(
            KvtoolConnectorMetadata(load_jobs=[LoadJob(2, TARGETS, SLOTS, KEYS)]))
        with set_forward_context(attn_metadata, self.vllm_config,
                                 cudagraph_runtime_mode=mode):
            self.connector.start_load_kv(get_forward_context())

    def warm_up(self, order: list[str] | None = None) -> None:
        """A step without loads whose forward asks about each of ``layers`` (in ``order``)."""
        self.connector.bind_connector_metadata(KvtoolConnectorMetadata())
        with set_forward_context({name: object() for name in self.layers}, self.vllm_config,
                                 cudagraph_runtime_mode=CUDAGraphMode.PIECEWISE):
            self.connector.start_load_kv(get_forward_context())
            for name in order or self.layers:
                self.connector.wait_for_layer_load(name)
        self.connector.get_finished(set())
        self.connector.clear_connector_metadata()

    def loaded(self) -> list[bool]:
        """Per layer (model order), whether a kernel queued now reads the loaded bytes."""
        def read() -> list[bool]:
            return [all(torch.equal(self.kv[name][dst], self.original[name][src])
                        for src, dst in zip(SOURCES, TARGETS, strict=True))
                    for name in self.layers]
        result: list[bool] = self.queue.read(read)
        return result

    def per_layer_reads(self, layers: list[str]) -> list[list[bool]]:
        """What the attention of each of ``layers`` would see: the hook, then the read."""
        seen = []
        for name in layers:
            self.connector.wait_for_layer_load(name)
            seen.append(self.loaded())
        return seen


def run_case(forward: Forward, attn_metadata: Any, mode: CUDAGraphMode,
             after: Callable[[Forward], None], ask: int = NUM_LAYERS) -> dict[str, Any]:
    forward.start(attn_metadata, mode)
    up_front = forward.loaded()
    reads = forward.per_layer_reads(forward.layers[:ask])
    after(forward)  # the hook that follows the forward
    return {
        "loaded_before_any_hook": up_front,
        # Layer i's read saw layers 0..i loaded and nothing after: pipelined in order.
        "reads_exactly_up_to_the_layer": all(
            seen == [j <= i for j in range(NUM_LAYERS)] for i, seen in enumerate(reads)),
        "each_read_saw_its_layer": all(seen[i] for i, seen in enumerate(reads)),
        "loaded_after": forward.loaded(),
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        model = write_model(Path(tmp) / "model", NUM_LAYERS)
        forward = Forward(model)
        metadata = {name: object() for name in forward.layers}  # any per-layer metadata

        def get_finished(f: Forward) -> None:  # model runner v1, right after the forward
            f.connector.get_finished(set())

        def finish_forward(f: Forward) -> None:  # model runner v2
            f.connector.finish_forward()

        def wait_for_save(f: Forward) -> None:  # v1 without a drafter: first after forward
            f.connector.wait_for_save()

        def nothing(f: Forward) -> None:
            return

        cases = {
            "before_every_layer_asked": run_case(
                forward, metadata, CUDAGraphMode.PIECEWISE, get_finished),
        }
        forward.warm_up()
        cases |= {
            "piecewise": run_case(forward, metadata, CUDAGraphMode.PIECEWISE, get_finished),
            "eager": run_case(forward, metadata, CUDAGraphMode.NONE, get_finished),
            "full_graph": run_case(forward, metadata, CUDAGraphMode.FULL, nothing, ask=0),
            "no_attention_metadata": run_case(forward, None, CUDAGraphMode.NONE, nothing,
                                              ask=0),
            "first_layer_only_then_get_finished": run_case(
                forward, metadata, CUDAGraphMode.PIECEWISE, get_finished, ask=1),
            "first_layer_only_then_finish_forward": run_case(
                forward, metadata, CUDAGraphMode.PIECEWISE, finish_forward, ask=1),
            "first_layer_only_then_wait_for_save": run_case(
                forward, metadata, CUDAGraphMode.PIECEWISE, wait_for_save, ask=1),
        }
        # A model whose forward reads its layers in another order than vLLM registered
        # them: loads copy in the order the forward asked, so each read still sees
        # exactly the layers read before it (the first read waits for one layer only).
        backwards = Forward(model)
        backwards.use_lazy_engine()
        asked = forward.layers[::-1]
        backwards.warm_up(asked)
        backwards.start(metadata, CUDAGraphMode.PIECEWISE, fresh_engine=False)
        up_front = backwards.loaded()
        reads = backwards.per_layer_reads(asked)
        cases["read_in_another_order"] = {
            "loaded_before_any_hook": up_front,
            "reads_exactly_up_to_the_layer": all(
                seen == [forward.layers[j] in asked[:i + 1] for j in range(NUM_LAYERS)]
                for i, seen in enumerate(reads)),
        }
        silent = Forward(model, silent_layers=1)
        silent.warm_up()
        cases["a_registered_layer_never_asks"] = run_case(
            silent, metadata, CUDAGraphMode.PIECEWISE, get_finished)
        print(json.dumps(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
