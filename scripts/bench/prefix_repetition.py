"""Prefix-repetition workload on the tiny model: no connector vs kvtool's connector per policy.

Run with the vLLM environment's python::

    .venv-vllm/bin/python scripts/bench/prefix_repetition.py [--quick] [--json]

Workload: requests alternate between 2 hot prefixes (every other request, so
they stay resident in vLLM's prefix cache) and 30 cold prefixes (each recurs
only after 59 other requests, by which time the 96-block KV pool has recycled
its blocks). Each prompt is a 4-block prefix plus a unique 20-token tail;
greedy, 8 output tokens, all requests submitted at once. A cold prefix can only
be a hit when a connector stored it before vLLM recycled its blocks; storing a
hot prefix is wasted bytes.

Method: every configuration (no connector, then each policy) runs each trial's
request list once on a fresh in-process engine; every trial uses fresh prefixes,
and within a trial the configurations take turns in the orders of a Williams
square (each runs first, and right after each other configuration, equally
often), so slow phases of a shared machine and any carry-over from the
previous engine fall on every configuration alike. Discarded warm-up runs (no
connector, then EAGER) go first; automatic garbage collection is paused while
a pass is timed.

Figures per configuration, from its quiet passes (those during which the rest
of the machine used under 10% of its CPUs, read from /proc/stat;
``quiet_trials_<name>`` counts them; with none, every pass counts): throughput
(prompt+output tokens per second of ``generate``) and mean TTFT (vLLM's
per-request first-token latency, queueing included) of its fastest pass, and
tokens per CPU-second of this process in its least-CPU pass. On this machine a
pass's time is a floor plus disturbances that only add (the same engine on
the same requests varies by up to 40%; fresh engines of one configuration fall
into a fast and a slow cluster about 30% apart), so the fastest of many passes
is the steady estimate; ``throughput_ratio_<policy>`` is the fastest pass's throughput
over the no-connector fastest pass's, ``cpu_throughput_ratio_<policy>`` likewise.
``throughput_ratio_median_<policy>`` (``_lo``/``_hi``) is the median (range) of
the per-trial ratios against the no-connector pass of the same trial: the
spread of a single comparison. The external hit rate (vLLM's external
prefix-cache hits / prompt tokens) and the blocks and bytes the connector
stored during the pass are means over all trials.
``--json`` prints one object with
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
WARMUP_VARIANT = 999
"""Prefixes of the discarded warm-up runs: no trial uses them."""
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


CPUS = os.cpu_count() or 1
QUIET_SHARE = 0.1
"""A pass is quiet when the rest of the machine used under this share of its CPUs."""


def machine_busy_s() -> float:
    """CPU-seconds every process on the machine has spent so far (Linux /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    jiffies = [int(f) for f in fields]
    idle = jiffies[3] + jiffies[4]  # idle + iowait
    return (sum(jiffies[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def engine_args(model: Path, policy: str | None) -> dict[str, Any]:
    """``LLM`` arguments: the same engine for every configuration, plus the connector."""
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
    return args


class Engine:
    """One configuration's engine; :meth:`run` times one pass of a request list."""

    def __init__(self, model: Path, policy: str | None) -> None:
        from vllm import LLM, SamplingParams

        self.policy = policy
        self.llm = LLM(**engine_args(model, policy))
        self.params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)

    def _stored(self) -> tuple[float, float]:
        if self.policy is None:
            return 0.0, 0.0
        engine_core = self.llm.llm_engine.engine_core.engine_core
        stats = engine_core.scheduler.connector.manager.stats
        return float(stats.stored), float(stats.stored_bytes)

    def run(self, prompts: list[list[int]]) -> dict[str, float]:
        from vllm.inputs import TokensPrompt

        hits_before = _counter(self.llm, "vllm:external_prefix_cache_hits")
        blocks_before, bytes_before = self._stored()
        # A collection pause in the middle of a pass would be charged to whichever
        # configuration it happened to fall on.
        gc.collect()
        gc.disable()
        try:
            machine_start = machine_busy_s()
            start, cpu_start = time.perf_counter(), time.process_time()
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                                        self.params, use_tqdm=False)
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            machine = machine_busy_s() - machine_start
        finally:
            gc.enable()
        prompt_tokens = sum(len(p) for p in prompts)
        ttfts = [o.metrics.first_token_latency for o in outputs if o.metrics is not None]
        processed = prompt_tokens + OUTPUT_TOKENS * len(prompts)
        blocks_after, bytes_after = self._stored()
        hits = _counter(self.llm, "vllm:external_prefix_cache_hits") - hits_before
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "throughput_tok_s": processed / wall,
            "cpu_throughput_tok_s": processed / cpu,
            "ttft_ms": 1000 * sum(ttfts) / max(1, len(ttfts)),
            "external_hit_rate": hits / prompt_tokens,
            "blocks_stored": blocks_after - blocks_before,
            "bytes_stored": bytes_after - bytes_before,
            # CPU the rest of the machine used meanwhile, as a share of all its CPUs.
            "others_cpu_share": max(0.0, machine - cpu) / (wall * CPUS),
        }

    def close(self) -> None:
        from vllm.distributed import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()
        cleanup_dist_env_and_memory()


def run_config(model: Path, prompts: list[list[int]], policy: str | None) -> dict[str, float]:
    """Start a fresh engine (connector ``policy`` or none), time one pass of ``prompts``, stop."""
    from vllm.inputs import TokensPrompt

    engine = Engine(model, policy)
    try:
        # The engine's first step pays one-off costs; one short prompt keeps them out.
        engine.llm.generate([TokensPrompt(prompt_token_ids=[11] * 40)], engine.params,
                            use_tqdm=False)
        return engine.run(prompts)
    finally:
        engine.close()


def williams_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` items in which each comes first, and right after each other
    item, equally often: ``n`` rows for even ``n``, twice that for odd ``n``."""
    first = [0]
    for i in range(1, n):
        first.append((i + 1) // 2 if i % 2 else n - i // 2)
    rows = [[(x + shift) % n for x in first] for shift in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def quiet(runs: list[dict[str, float]]) -> list[dict[str, float]]:
    """Passes during which the rest of the machine stayed under QUIET_SHARE of its
    CPUs; every pass when there is none (``quiet_trials_*`` then says 0)."""
    return [r for r in runs if r["others_cpu_share"] < QUIET_SHARE] or runs


def summarise(passes: dict[str, list[dict[str, float]]]) -> dict[str, float]:
    """The ``--json`` figures from every configuration's passes (trial i at index i)."""
    figures: dict[str, float] = {}
    base = passes["none"]
    fastest_base = min(quiet(base), key=lambda r: r["wall_s"])
    for name, runs in passes.items():
        calm = quiet(runs)
        figures[f"quiet_trials_{name}"] = float(
            sum(r["others_cpu_share"] < QUIET_SHARE for r in runs))
        figures[f"others_cpu_share_max_{name}"] = max(r["others_cpu_share"] for r in runs)
        # Timing of the fastest quiet pass: disturbances only ever add time.
        fastest = min(calm, key=lambda r: r["wall_s"])
        for key in ("wall_s", "throughput_tok_s", "ttft_ms"):
            figures[f"{key}_{name}"] = fastest[key]
        least_cpu = min(calm, key=lambda r: r["cpu_s"])
        figures[f"cpu_s_{name}"] = least_cpu["cpu_s"]
        figures[f"cpu_throughput_tok_s_{name}"] = least_cpu["cpu_throughput_tok_s"]
        for key in ("external_hit_rate", "blocks_stored", "bytes_stored"):
            figures[f"{key}_{name}"] = sum(r[key] for r in runs) / len(runs)
        figures[f"throughput_ratio_{name}"] = (
            fastest["throughput_tok_s"] / fastest_base["throughput_tok_s"])
        figures[f"ttft_ratio_{name}"] = fastest["ttft_ms"] / fastest_base["ttft_ms"]
        # Per-trial ratios against the baseline pass of the same trial, both quiet:
        # their median and range show how far one pass can be trusted.
        paired = [r["throughput_tok_s"] / b["throughput_tok_s"]
                  for r, b in zip(runs, base, strict=True)
                  if max(r["others_cpu_share"], b["others_cpu_share"]) < QUIET_SHARE]
        paired = paired or [r["throughput_tok_s"] / b["throughput_tok_s"]
                            for r, b in zip(runs, base, strict=True)]
        figures[f"throughput_ratio_median_{name}"] = median(paired)
        figures[f"throughput_ratio_lo_{name}"] = min(paired)
        figures[f"throughput_ratio_hi_{name}"] = max(paired)
    for name in passes:
        figures[f"cpu_throughput_ratio_{name}"] = (
            figures[f"cpu_throughput_tok_s_{name}"] / figures["cpu_throughput_tok_s_none"])
    eager_bytes = figures["bytes_stored_eager"]
    figures["bytes_ratio_eviction_aware_vs_eager"] = (
        figures["bytes_stored_eviction_aware"] / eager_bytes if eager_bytes else 0.0
    )
    return figures


def _counter(llm: Any, name: str) -> float:
    return float(sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds, 1 trial (instead of 6 rounds, 12 trials)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                       "VLLM_NO_USAGE_STATS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                       "VLLM_CONFIGURE_LOGGING": "0"}.items():
        os.environ.setdefault(key, value)
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the pool is sized explicitly

    from rich.console import Console

    console = Console(stderr=True)
    rounds, trials = (2, 1) if args.quick else (6, 12)
    configs: tuple[str | None, ...] = (None, *POLICY_EXTRA)
    names = [policy or "none" for policy in configs]
    orders = williams_orders(len(configs))
    passes: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="kvtool-bench-") as tmp:
        model = build_tiny_model(Path(tmp) / "tiny-model")
        os.environ.setdefault("VLLM_CACHE_ROOT", str(Path(tmp) / "vllm-cache"))
        # The process's first engine, and its first engine with a connector, pay
        # one-off import, kernel and allocator costs: discarded runs take them.
        for policy in (None, "eager"):
            with console.status(f"warm-up run (discarded), connector={policy or 'none'}"):
                run_config(model, workload(rounds, WARMUP_VARIANT), policy)
        for trial in range(trials):
            prompts = workload(rounds, trial)
            for index in orders[trial % len(orders)]:
                with console.status(f"trial {trial + 1}/{trials}: {len(prompts)} requests, "
                                    f"connector={names[index]}"):
                    passes[names[index]].append(run_config(model, prompts, configs[index]))
    figures = {"requests": float(len(workload(rounds, 0))), "trials": float(trials),
               **summarise(passes)}

    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    print(f"prefix repetition: {figures['requests']:.0f} requests, {HOT_PREFIXES} hot + "
          f"{COLD_PREFIXES} cold {PREFIX_BLOCKS}-block prefixes, KV pool {POOL_BLOCKS} blocks, "
          f"fastest of {trials} trials; median and range of per-trial ratios")
    print(f"{'connector':<16}{'tok/s':>9}{'ratio':>8}{'median':>8}{'range':>14}{'quiet':>6}"
          f"{'cpu ratio':>10}{'TTFT ms':>9}{'ext hit':>9}{'stored':>8}{'bytes':>10}")
    for name in names:
        spread = (f"{figures[f'throughput_ratio_lo_{name}']:.3f}-"
                  f"{figures[f'throughput_ratio_hi_{name}']:.3f}")
        print(f"{name:<16}{figures[f'throughput_tok_s_{name}']:>9.0f}"
              f"{figures[f'throughput_ratio_{name}']:>8.3f}"
              f"{figures[f'throughput_ratio_median_{name}']:>8.3f}{spread:>14}"
              f"{figures[f'quiet_trials_{name}']:>6.0f}"
              f"{figures[f'cpu_throughput_ratio_{name}']:>10.3f}"
              f"{figures[f'ttft_ms_{name}']:>9.1f}"
              f"{figures[f'external_hit_rate_{name}']:>9.3f}"
              f"{figures[f'blocks_stored_{name}']:>8.0f}{figures[f'bytes_stored_{name}']:>10.0f}")
    print(f"eviction_aware bytes / eager bytes: "
          f"{figures['bytes_ratio_eviction_aware_vs_eager']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
