"""The workloads, engine settings and connector settings of the recorded engine runs
(tests/simulate/record_engine_runs.py writes data/engine_runs.json from them;
test_engine_agreement.py replays them in simulate). Changing anything here means
recording the runs again: the fixture keeps this file's sha256."""

from __future__ import annotations

from typing import Any

from kvtool.simulate.trace import Request, generate, workload_params

BLOCK_BYTES = 16384
"""Tiny model (scripts/build_tiny_model.py): 2 layers x 8 KiB per 32-token block."""

ENGINE: dict[str, int] = {
    "block_size": 32, "num_gpu_blocks": 64, "max_num_seqs": 4, "max_batched_tokens": 512,
    "max_model_len": 1024,
}
"""A small pool under eviction pressure, as issue 25's engine runs (64-96 blocks)."""

HOST_STORES: dict[str, int] = {"large": 4096, "small": 48}
"""Host store size in blocks: one that never evicts here and one that does."""

POLICIES: dict[str, dict[str, Any]] = {
    "eager": {"kvtool.policy": "eager"},
    "fifo": {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1,
             "kvtool.fifo.select_count": 8},
    "eviction_aware": {"kvtool.policy": "eviction_aware"},
}
"""FIFO with the kvtool-connector-fifo launch recipe's knobs (at its defaults it stores
nothing on workloads this short)."""

WORKLOADS: dict[str, tuple[str, dict[str, Any], int]] = {
    "chat": ("chat", {"num_requests": 64, "turns": 4, "system_prompts": 2,
                      "system_tokens": 128, "user_tokens": 40, "output_tokens": 24,
                      "think_steps": 30, "start_every": 4}, 1),
    "rag": ("rag", {"num_requests": 48, "documents": 12, "hot_documents": 3,
                    "hot_fraction": 0.6, "system_tokens": 32, "document_tokens": 256,
                    "question_tokens": 24, "output_tokens": 8, "arrive_every": 2}, 2),
    "zipf": ("zipf", {"num_requests": 64, "prefixes": 24, "alpha": 1.1,
                      "prefix_tokens": 160, "suffix_tokens": 24, "output_tokens": 8,
                      "arrive_every": 1}, 3),
}
"""name -> (generator, parameters, seed)."""


def requests_of(name: str) -> list[Request]:
    kind, params, seed = WORKLOADS[name]
    return list(generate(kind, workload_params(kind, params), seed))
