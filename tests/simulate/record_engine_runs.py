"""Run the real vLLM engine with kvtool's connector on the simulate validation workloads
and record its counters (tests/simulate/data/engine_runs.json).

Run with the vLLM environment's python, kvtool from this checkout first::

    PYTHONPATH=. /work/main/.venv-vllm/bin/python tests/simulate/record_engine_runs.py \
        --out tests/simulate/data/engine_runs.json

One engine process per (workload, host store size, policy): vLLM keeps one
worker-side connector per process. Each engine is stepped one scheduler step at
a time; a request is added before the step its trace arrival names (a
follower, ``after``, that many steps after the step its predecessor finished
in), its prompt built by kvtool.simulate.trace.prompt_token_ids with the
predecessor's real output where the trace feeds a reply back. After the last
request the engine keeps stepping while the connector holds work
(``has_pending_push_work``), as an idle server does. Recorded per run: vLLM's
prefix-cache and external prefix-cache counters, preemptions, steps, the
connector manager's own counters, and the engine's settings, so
tests/simulate/test_engine_agreement.py replays the same workload in simulate.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from build_tiny_model import build_tiny_model  # noqa: E402

from tests.simulate.engine_workloads import (  # noqa: E402
    BLOCK_BYTES,
    ENGINE,
    HOST_STORES,
    POLICIES,
    WORKLOADS,
    requests_of,
)

MAX_IDLE_STEPS = 2000


def engine_args(model: Path, extra: dict[str, Any]) -> dict[str, Any]:
    return dict(
        model=str(model), dtype="bfloat16", enable_prefix_caching=True,
        block_size=ENGINE["block_size"], enforce_eager=True, seed=0, disable_log_stats=False,
        max_model_len=ENGINE["max_model_len"], max_num_seqs=ENGINE["max_num_seqs"],
        max_num_batched_tokens=ENGINE["max_batched_tokens"], async_scheduling=False,
        kv_cache_memory_bytes=ENGINE["num_gpu_blocks"] * BLOCK_BYTES,
        kv_transfer_config={
            "kv_connector": "KvtoolConnector",
            "kv_connector_module_path": "kvtool.connector.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        },
    )


def _metric(llm: Any, name: str) -> int:
    return int(sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == name))


def run_one(model: Path, workload: str, store: str, policy: str) -> dict[str, Any]:
    """One engine, one workload: the counters (runs in its own process)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from kvtool.simulate.trace import prompt_token_ids

    extra = {**POLICIES[policy], "kvtool.host_capacity_bytes": HOST_STORES[store] * BLOCK_BYTES}
    llm = LLM(**engine_args(model, extra))
    engine = llm.llm_engine
    core = engine.engine_core.engine_core
    scheduler = core.scheduler
    requests = requests_of(workload)
    by_id = {r.id: r for r in requests}
    due: list[tuple[int, int, str]] = []
    for order, request in enumerate(requests):
        if request.after is None:
            heapq.heappush(due, (request.arrival, order, request.id))
    followers: dict[str, list[str]] = {}
    for request in requests:
        if request.after is not None:
            followers.setdefault(request.after, []).append(request.id)
    order_of = {r.id: i for i, r in enumerate(requests)}
    outputs: dict[str, list[int]] = {}
    before = {name: _metric(llm, name) for name in (
        "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
        "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits",
        "vllm:num_preemptions")}
    stats_before = scheduler.connector.manager.stats.as_dict()
    step = 0
    finished = 0
    while finished < len(requests):
        while due and due[0][0] <= step:
            request = by_id[heapq.heappop(due)[2]]
            params = SamplingParams(temperature=0.0, max_tokens=request.output_tokens,
                                    ignore_eos=True)
            ids = prompt_token_ids(request, outputs=outputs)
            engine.add_request(request.id, TokensPrompt(prompt_token_ids=ids), params)
        if not engine.has_unfinished_requests():
            step = due[0][0] if due else step + 1
            continue
        for output in engine.step():
            if not output.finished:
                continue
            finished += 1
            request = by_id[output.request_id]
            if request.output_key is not None:
                outputs[request.output_key] = list(output.outputs[0].token_ids)
            for follower in followers.get(request.id, []):
                delay = by_id[follower].arrival
                heapq.heappush(due, (step + 1 + delay, order_of[follower], follower))
        step += 1
    idle = 0
    while scheduler.has_requests() and idle < MAX_IDLE_STEPS:
        core.step()
        idle += 1
    after = {name: _metric(llm, name) for name in before}
    stats = scheduler.connector.manager.stats.as_dict()
    return {
        "workload": workload, "store": store, "policy": policy,
        "steps": step + idle, "idle_steps": idle,
        "num_gpu_blocks": int(scheduler.kv_cache_manager.block_pool.num_gpu_blocks),
        "prompt_tokens": sum(r.prompt_tokens for r in requests),
        "gpu_hit_tokens": after["vllm:prefix_cache_hits"] - before["vllm:prefix_cache_hits"],
        "gpu_queries": after["vllm:prefix_cache_queries"] - before["vllm:prefix_cache_queries"],
        "external_hit_tokens": (after["vllm:external_prefix_cache_hits"]
                                - before["vllm:external_prefix_cache_hits"]),
        "external_queries": (after["vllm:external_prefix_cache_queries"]
                             - before["vllm:external_prefix_cache_queries"]),
        "preemptions": after["vllm:num_preemptions"] - before["vllm:num_preemptions"],
        "stats": {k: v - stats_before.get(k, 0) for k, v in stats.items()},
    }


def _finished(runs_file: Path) -> dict[str, dict[str, Any]]:
    if not runs_file.exists():
        return {}
    runs = [json.loads(line) for line in runs_file.read_text().splitlines() if line.strip()]
    return {f"{r['workload']}/{r['store']}/{r['policy']}": r for r in runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kvtool" / "bench")
    parser.add_argument("--only", help="workload/store/policy: run one, print its JSON line")
    parser.add_argument("--runs", type=Path,
                        help="JSON Lines of finished runs: appended to, and runs already in it "
                             "are not run again (so shards can share it)")
    parser.add_argument("--shard", default="0/1", help="K/N: run every N-th run from the K-th")
    parser.add_argument("--cpu", type=int, help="the CPU the engines bind their threads to")
    parser.add_argument("--finalize", action="store_true",
                        help="write the fixture from the runs recorded so far (the missing "
                             "ones listed in its provenance) and run nothing")
    args = parser.parse_args(argv)
    model = build_tiny_model(args.cache / "tiny-model")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(args.cache / "vllm-cache"))
    if args.only:
        workload, store, policy = args.only.split("/")
        print("RESULT " + json.dumps(run_one(model, workload, store, policy)), flush=True)
        return 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CONFIGURE_LOGGING": "0", "PYTHONPATH": str(REPO)}
    env["VLLM_CPU_OMP_THREADS_BIND"] = str(
        args.cpu if args.cpu is not None else max(os.sched_getaffinity(0)))
    runs_file = args.runs or args.out.with_suffix(".runs.jsonl")
    shard, shards = (int(x) for x in args.shard.split("/"))
    wanted = [f"{w}/{s}/{p}" for w in WORKLOADS for s in HOST_STORES for p in POLICIES]
    for index, only in enumerate(wanted):
        if args.finalize:
            break
        if index % shards == shard and only not in _finished(runs_file):
            done = subprocess.run(
                [sys.executable, __file__, "--out", str(args.out), "--cache",
                 str(args.cache), "--only", only],
                env=env, capture_output=True, text=True, check=False)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if done.returncode or not lines:
                sys.stderr.write(done.stderr[-4000:])
                raise SystemExit(f"{only}: the engine run failed")
            runs_file.parent.mkdir(parents=True, exist_ok=True)
            with runs_file.open("a") as handle:
                handle.write(lines[-1].removeprefix("RESULT ") + "\n")
            print(only, "recorded", file=sys.stderr, flush=True)
    finished = _finished(runs_file)
    missing = [only for only in wanted if only not in finished]
    if missing and not args.finalize:
        return 0  # another shard is still running; the last one writes the fixture
    runs = [finished[only] for only in wanted if only in finished]
    import vllm

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    workloads_file = REPO / "tests" / "simulate" / "engine_workloads.py"
    document = {
        "provenance": {
            "command": ("PYTHONPATH=. /work/main/.venv-vllm/bin/python "
                        "tests/simulate/record_engine_runs.py --out " + str(args.out)
                        + " [--shard K/N --cpu C, one per CPU]"),
            "kvtool_commit": commit,
            "workloads_sha256": hashlib.sha256(workloads_file.read_bytes()).hexdigest(),
            "vllm_version": vllm.__version__,
            "python": platform.python_version(),
            "not_recorded": missing,
        },
        "engine": ENGINE,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
