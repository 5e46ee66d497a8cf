"""Prefix-repetition workload on the tiny model: no connector vs kvtool's connector per policy.

Run with the vLLM environment's python (one process, engines in-process, one
after another, on the same workload)::

    .venv-vllm/bin/python scripts/bench/prefix_repetition.py [--quick] [--json]

Workload: requests alternate between 2 hot prefixes (every other request, so
they stay resident in vLLM's prefix cache) and 30 cold prefixes (each recurs
only after 59 other requests, by which time the 96-block KV pool has recycled
its blocks). Each prompt is a 4-block prefix plus a unique 20-token tail;
greedy, 8 output tokens, all requests submitted at once. A cold prefix can only
be a hit when a connector stored it before vLLM recycled its blocks; storing a
hot prefix is wasted bytes.

Each configuration (no connector, then each policy) gets a fresh in-process
engine per trial; configurations take turns within a trial (the first one rotates) and
every trial uses fresh prefixes; automatic garbage collection is paused while a
run is timed. Figures per configuration: throughput (prompt+output tokens per
second of ``generate``) and mean TTFT (vLLM's per-request first-token latency,
queueing included) of its fastest trial, since the machine may be shared,
and tokens per CPU-second of this process (its least-CPU trial), which other
processes on a shared machine disturb less;
external hit rate (vLLM's external prefix-cache hits / prompt tokens) and the
blocks and bytes the connector stored during the run, averaged over trials. A
discarded warm-up run goes first. Ratios are against the no-connector runs of
the same process. ``--json`` prints one object with
``throughput_ratio_<policy>``, ``external_hit_rate_<policy>``,
``bytes_stored_<policy>``, ``ttft_ms_<policy>`` (and ``_none``) and more.

FIFO runs with the knobs of the ``kvtool-connector-fifo`` launch recipe
(threshold 1, select 8): at its defaults (threshold 100) it stores nothing here.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from build_tiny_model import build_tiny_model  # noqa: E402

BLOCK_SIZE = 32
BLOCK_BYTES = 16384  # tiny model: 2 layers x 8 KiB per block (vllm-on-cpu.md §2)
PREFIX_BLOCKS = 4
TAIL_TOKENS = 20
OUTPUT_TOKENS = 8
HOT_PREFIXES = 2
COLD_PREFIXES = 30
POOL_BLOCKS = 96
POLICY_EXTRA: dict[str, dict[str, Any]] = {
    "eager": {"kvtool.policy": "eager"},
    "fifo": {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1,
             "kvtool.fifo.select_count": 8},
    "eviction_aware": {"kvtool.policy": "eviction_aware"},
}


def _tokens(rng: random.Random, length: int) -> list[int]:
    # Ordinary ids of the tiny model's 471-token vocabulary.
    return [rng.randrange(10, 460) for _ in range(length)]


def workload(rounds: int, variant: int) -> list[list[int]]:
    """The request sequence; each ``variant`` uses fresh prefixes and tails."""
    rng = random.Random(variant)
    hot = [_tokens(rng, PREFIX_BLOCKS * BLOCK_SIZE) for _ in range(HOT_PREFIXES)]
    cold = [_tokens(rng, PREFIX_BLOCKS * BLOCK_SIZE) for _ in range(COLD_PREFIXES)]
    prompts = []
    for _ in range(rounds):
        for c, prefix in enumerate(cold):
            prompts.append(hot[c % HOT_PREFIXES] + _tokens(rng, TAIL_TOKENS))
            prompts.append(prefix + _tokens(rng, TAIL_TOKENS))
    return prompts


def run_config(model: Path, prompts: list[list[int]], policy: str | None) -> dict[str, float]:
    """Start an engine (connector ``policy`` or none), run ``prompts`` once, measure, stop."""
    from vllm import LLM, SamplingParams
    from vllm.distributed import cleanup_dist_env_and_memory
    from vllm.inputs import TokensPrompt

    args: dict[str, Any] = dict(
        model=str(model), dtype="bfloat16", enable_prefix_caching=True,
        block_size=BLOCK_SIZE, enforce_eager=True, seed=0, disable_log_stats=False,
        max_model_len=256, max_num_seqs=4, max_num_batched_tokens=512,
        kv_cache_memory_bytes=POOL_BLOCKS * BLOCK_BYTES,
    )
    if policy is not None:
        args["kv_transfer_config"] = {
            "kv_connector": "KvtoolConnector",
            "kv_connector_module_path": "kvtool.connector.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {**POLICY_EXTRA[policy],
                                          "kvtool.host_capacity_bytes": "64MiB"},
        }
    llm = LLM(**args)
    params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    llm.generate([TokensPrompt(prompt_token_ids=[11] * 40)], params, use_tqdm=False)
    hits_before = _counter(llm, "vllm:external_prefix_cache_hits")

    # Earlier engines of this process leave garbage behind; a collection pause in
    # the middle of a later run would be charged to whichever configuration ran late.
    gc.collect()
    gc.disable()
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                               use_tqdm=False)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        gc.enable()

    prompt_tokens = sum(len(p) for p in prompts)
    ttfts = [o.metrics.first_token_latency for o in outputs if o.metrics is not None]
    processed = prompt_tokens + OUTPUT_TOKENS * len(prompts)
    result = {
        "wall_s": wall,
        "cpu_s": cpu,
        "throughput_tok_s": processed / wall,
        "cpu_throughput_tok_s": processed / cpu,
        "ttft_ms": 1000 * sum(ttfts) / max(1, len(ttfts)),
        "external_hit_rate": (_counter(llm, "vllm:external_prefix_cache_hits") - hits_before)
        / prompt_tokens,
        "blocks_stored": 0.0,
        "bytes_stored": 0.0,
    }
    if policy is not None:
        stats = llm.llm_engine.engine_core.engine_core.scheduler.connector.manager.stats
        result["blocks_stored"] = float(stats.stored)
        result["bytes_stored"] = float(stats.stored_bytes)
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    cleanup_dist_env_and_memory()
    return result


def combine(trials: list[dict[str, float]]) -> dict[str, float]:
    """Timing from the least disturbed trial (the machine may be shared); counts averaged."""
    best = min(trials, key=lambda r: r["wall_s"])
    result = {key: best[key] for key in ("wall_s", "throughput_tok_s", "ttft_ms")}
    least_cpu = min(trials, key=lambda r: r["cpu_s"])
    result["cpu_s"] = least_cpu["cpu_s"]
    result["cpu_throughput_tok_s"] = least_cpu["cpu_throughput_tok_s"]
    for key in ("external_hit_rate", "blocks_stored", "bytes_stored"):
        result[key] = sum(r[key] for r in trials) / len(trials)
    return result


def _counter(llm: Any, name: str) -> float:
    return float(sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds, 1 trial (instead of 6 rounds, 4 trials)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "VLLM_NO_USAGE_STATS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                       "VLLM_CONFIGURE_LOGGING": "0"}.items():
        os.environ.setdefault(key, value)
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the pool is sized explicitly

    from rich.console import Console

    console = Console(stderr=True)
    rounds, trials = (2, 1) if args.quick else (6, 4)
    configs = (None, *POLICY_EXTRA)
    figures: dict[str, float] = {"requests": float(len(workload(rounds, 0))),
                                 "trials": float(trials)}
    measured: dict[str, list[dict[str, float]]] = {policy or "none": [] for policy in configs}
    with tempfile.TemporaryDirectory(prefix="kvtool-bench-") as tmp:
        model = build_tiny_model(Path(tmp) / "tiny-model")
        os.environ.setdefault("VLLM_CACHE_ROOT", str(Path(tmp) / "vllm-cache"))
        # The first engine of a process pays one-off kernel and allocator warm-up;
        # a discarded run keeps that out of the no-connector baseline.
        with console.status("warm-up run (discarded)"):
            run_config(model, workload(rounds, 999), None)
        # Configurations take turns within each trial, so a change in machine load
        # hits all of them alike; each trial uses fresh prefixes.
        for trial in range(trials):
            prompts = workload(rounds, trial)
            turn = trial % len(configs)  # rotate who goes first
            for policy in configs[turn:] + configs[:turn]:
                name = policy or "none"
                with console.status(f"trial {trial + 1}/{trials}: {len(prompts)} requests, "
                                    f"connector={name}"):
                    measured[name].append(run_config(model, prompts, policy))
    runs = {name: combine(trials_of) for name, trials_of in measured.items()}
    base = runs["none"]
    for name, run in runs.items():
        for key, value in run.items():
            figures[f"{key}_{name}"] = value
        figures[f"throughput_ratio_{name}"] = run["throughput_tok_s"] / base["throughput_tok_s"]
        figures[f"cpu_throughput_ratio_{name}"] = (
            run["cpu_throughput_tok_s"] / base["cpu_throughput_tok_s"]
        )
        figures[f"ttft_ratio_{name}"] = run["ttft_ms"] / base["ttft_ms"]
    eager_bytes = runs["eager"]["bytes_stored"]
    figures["bytes_ratio_eviction_aware_vs_eager"] = (
        runs["eviction_aware"]["bytes_stored"] / eager_bytes if eager_bytes else 0.0
    )

    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    print(f"prefix repetition: {figures['requests']:.0f} requests, {HOT_PREFIXES} hot + "
          f"{COLD_PREFIXES} cold {PREFIX_BLOCKS}-block prefixes, KV pool {POOL_BLOCKS} blocks, "
          f"best of {trials} trials")
    print(f"{'connector':<16}{'tok/s':>9}{'ratio':>8}{'cpu ratio':>10}{'TTFT ms':>9}"
          f"{'ext hit':>9}{'stored':>8}{'bytes':>10}")
    for name, run in runs.items():
        print(f"{name:<16}{run['throughput_tok_s']:>9.0f}"
              f"{figures[f'throughput_ratio_{name}']:>8.3f}"
              f"{figures[f'cpu_throughput_ratio_{name}']:>10.3f}{run['ttft_ms']:>9.1f}"
              f"{run['external_hit_rate']:>9.3f}{run['blocks_stored']:>8.0f}"
              f"{run['bytes_stored']:>10.0f}")
    print(f"eviction_aware bytes / eager bytes: "
          f"{figures['bytes_ratio_eviction_aware_vs_eager']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
