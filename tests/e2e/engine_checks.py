"""Real-engine checks of kvtool's connector, run with the vLLM environment's python.

    .venv-vllm/bin/python tests/e2e/engine_checks.py SCENARIO --model DIR --out RESULT.json

Scenarios (each one process, engines in-process so both connector roles and the
engine's block pool are reachable for observation):

- ``policies``: a no-connector engine, then one engine per drain policy, over
  prompts with shared prefixes; per policy: first pass, drain, reset of vLLM's
  prefix cache, second pass served from the host store.
- ``eviction``: a 24-block KV pool and traffic that recycles blocks without
  pause; EVICTION_AWARE and FIFO at their defaults, plus a no-connector baseline;
  then long generations that make vLLM preempt and resume requests.
- ``tensor_parallel``: tensor-parallel size 2 (two worker processes, one core each):
  a no-connector engine, then EVICTION_AWARE over the shared-prefix prompts; a
  stored block is unprotected only after both workers copied their shard, and
  loads after the prefix-cache reset must fill both shards.

The result JSON holds token ids, cached-token counts, vLLM's external-hit
counter and the connector's counters; tests/e2e/test_engine.py asserts on it.
Every store is also checked at copy time: the engine block's current hash must
equal the hash the store is keyed by (a recycled block would differ).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK_SIZE = 32
CONNECTOR_MODULE = "kvtool.connector.vllm"
CONNECTOR_CLASS = "KvtoolConnector"
POLICIES = ("eager", "fifo", "eviction_aware")

# Prompts are token ids, so block boundaries are exact. Token ids 10..459 are
# ordinary tokens of the tiny model's 471-token vocabulary.
_FIRST_ID, _NUM_IDS = 10, 450


def _tokens(seed: int, length: int) -> list[int]:
    return [_FIRST_ID + (seed * 131 + j * 17 + (j * j) % 7) % _NUM_IDS for j in range(length)]


def shared_prefix_prompts() -> list[list[int]]:
    """Two families sharing 4- and 3-block prefixes, with tails of 9 to 45 tokens."""
    families = [(_tokens(1, 4 * BLOCK_SIZE), [9, 20, 45]), (_tokens(2, 3 * BLOCK_SIZE), [13, 40])]
    return [
        prefix + _tokens(100 + 10 * f + t, tail)
        for f, (prefix, tails) in enumerate(families)
        for t, tail in enumerate(tails)
    ]


def eviction_prompts() -> list[list[int]]:
    """Eight distinct prompts of 139 tokens: 4 full blocks and a partial one each
    (the eviction test of vllm-on-cpu.md §3.2)."""
    return [_tokens(200 + i, 4 * BLOCK_SIZE + 11) for i in range(8)]


PREEMPTING_OUTPUT_TOKENS = 100


def long_prompts() -> list[list[int]]:
    """Four fresh 139-token prompts; with 100 output tokens each needs 8 blocks."""
    return [_tokens(300 + i, 4 * BLOCK_SIZE + 11) for i in range(4)]


def kv_transfer_config(extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "kv_connector": CONNECTOR_CLASS,
        "kv_connector_module_path": CONNECTOR_MODULE,
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra,
    }


class Engine:
    """One in-process vLLM engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""

    def __init__(
        self,
        model: str,
        extra: dict[str, Any] | None,
        *,
        watch_stores: bool = True,
        **engine_args: Any,
    ) -> None:
        from vllm import LLM

        args: dict[str, Any] = {
            "model": model,
            "dtype": "bfloat16",
            "enable_prefix_caching": True,
            "block_size": BLOCK_SIZE,
            "enforce_eager": True,
            "seed": 0,
            "disable_log_stats": False,
        }
        args.update(engine_args)
        if extra is not None:
            args["kv_transfer_config"] = kv_transfer_config(extra)
        self.llm = LLM(**args)
        self.core = self.llm.llm_engine.engine_core.engine_core
        self.store_checks = {"stores_checked": 0, "stored_with_changed_hash": 0,
                             "rescues_checked": 0}
        if extra is not None and watch_stores:
            self._watch_stores()

    @property
    def connector(self) -> Any:
        return self.core.scheduler.connector

    def _watch_stores(self) -> None:
        """Check every store job at copy time against the scheduler's block pool. A
        rescue (``before_forward``) is of blocks the pass already handed out, so their
        hash changed by design; that their KV is the buffered one is what the
        scheduler harness's fingerprinting model checks (scenario ``rescue``), and the
        host hits' outputs here."""
        from vllm.distributed.kv_transfer import get_kv_transfer_group

        worker = get_kv_transfer_group()
        pool = self.core.scheduler.kv_cache_manager.block_pool
        submit: Callable[[Any], None] = worker.engine.submit_store
        checks = self.store_checks

        def checked_submit(job: Any) -> None:
            for block_id, key in zip(job.block_ids, job.keys, strict=True):
                current = pool.blocks[block_id].block_hash
                checks["stores_checked"] += 1
                if job.before_forward:
                    checks["rescues_checked"] += 1
                elif current is None or current[:-4] != key.block_hash:
                    checks["stored_with_changed_hash"] += 1
            submit(job)

        worker.engine.submit_store = checked_submit

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[dict[str, Any]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        return [
            {
                "tokens": list(o.outputs[0].token_ids),
                "prompt_tokens": len(o.prompt_token_ids or []),
                "cached_tokens": int(o.num_cached_tokens or 0),
                "preemptions": int(o.metrics.num_preemptions) if o.metrics is not None else 0,
            }
            for o in outputs
        ]

    def drain(self, max_steps: int = 200) -> int:
        """Step the idle engine until the connector has nothing buffered or in flight.

        In-process, LLM.generate stops stepping once its requests finish; a
        multiprocess engine keeps stepping on its own (has_pending_push_work).
        """
        steps = 0
        while self.connector.has_pending_push_work() and steps < max_steps:
            self.core.step()
            steps += 1
        return steps

    def external_hits(self) -> int:
        for metric in self.llm.get_metrics():
            if metric.name == "vllm:external_prefix_cache_hits":
                return int(getattr(metric, "value", 0))
        return 0

    def connector_stats(self) -> dict[str, Any]:
        stats = self.connector.manager.stats
        return {**stats.as_dict(), "ledger_balanced": stats.ledger_balanced(),
                **self.store_checks}

    def close(self) -> None:
        from vllm.distributed import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown()
        del self.llm, self.core
        gc.collect()
        cleanup_dist_env_and_memory()


def scenario_policies(model: str) -> dict[str, Any]:
    prompts = shared_prefix_prompts()
    engine_args = {"max_model_len": 512, "max_num_seqs": 8, "max_num_batched_tokens": 512}
    base = Engine(model, None, **engine_args)
    result: dict[str, Any] = {"prompts": prompts, "baseline": base.generate(prompts, 16)}
    base.close()
    for policy in POLICIES:
        engine = Engine(
            model, {"kvtool.policy": policy, "kvtool.host_capacity_bytes": "64MiB"}, **engine_args
        )
        first = engine.generate(prompts, 16)
        drain_steps = engine.drain()
        after_drain = engine.connector_stats()
        reset = engine.llm.reset_prefix_cache()
        hits_before = engine.external_hits()
        second = engine.generate(prompts, 16)
        result[policy] = {
            "first": first,
            "drain_steps": drain_steps,
            "stats_after_drain": after_drain,
            "reset_prefix_cache": reset,
            "second": second,
            "external_hits_delta": engine.external_hits() - hits_before,
            "stats": engine.connector_stats(),
        }
        engine.close()
    result["start_errors"] = {
        "misspelled_key": start_error(model, {"kvtool.polcy": "fifo"}, engine_args),
        "prefix_caching_off": start_error(
            model, {"kvtool.policy": "fifo"}, {**engine_args, "enable_prefix_caching": False}
        ),
    }
    return result


def start_error(model: str, extra: dict[str, Any], engine_args: dict[str, Any]) -> str:
    """The message an engine start with this connector config fails with ("" if it starts)."""
    try:
        engine = Engine(model, extra, **engine_args)
    except Exception as exc:
        from vllm.distributed import cleanup_dist_env_and_memory

        gc.collect()
        cleanup_dist_env_and_memory()
        cause: BaseException = exc
        while cause.__cause__ is not None:
            cause = cause.__cause__
        return f"{type(cause).__name__}: {cause}"
    engine.close()
    return ""


def scenario_eviction(model: str) -> dict[str, Any]:
    prompts = eviction_prompts()
    # 24 blocks of 16 KiB (2 layers x 8 KiB) and room for 4 requests of 5 blocks:
    # the second four requests recycle the first four's blocks.
    engine_args = {
        "max_model_len": 256,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 256,
        "kv_cache_memory_bytes": 24 * 16384,
    }
    base = Engine(model, None, **engine_args)
    result: dict[str, Any] = {
        "prompts": prompts,
        "baseline": base.generate(prompts, 4),
        "baseline_again": base.generate(prompts[:1], 4),
        "baseline_long": base.generate(long_prompts(), PREEMPTING_OUTPUT_TOKENS),
    }
    base.close()
    for policy in ("eviction_aware", "fifo"):
        engine = Engine(
            model, {"kvtool.policy": policy, "kvtool.host_capacity_bytes": "16MiB"}, **engine_args
        )
        traffic = engine.generate(prompts, 4)
        during = engine.connector_stats()
        # Prompt 0's blocks were recycled by the later prompts: a hit now can only
        # come from the host store.
        hits_before = engine.external_hits()
        again = engine.generate(prompts[:1], 4)
        hits_delta = engine.external_hits() - hits_before
        # Four requests growing to 8 blocks each cannot all fit in 23 usable blocks:
        # vLLM preempts and later resumes some of them.
        long = engine.generate(long_prompts(), PREEMPTING_OUTPUT_TOKENS)
        result[policy] = {
            "traffic": traffic,
            "stats_during_traffic": during,
            "again": again,
            "external_hits_delta": hits_delta,
            "long": long,
            "stats": engine.connector_stats(),
        }
        engine.close()
    return result


def scenario_tensor_parallel(model: str) -> dict[str, Any]:
    # vLLM's CPU workers bind OpenMP threads per NUMA node; a one-node machine needs an
    # explicit binding: one core per rank.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    prompts = shared_prefix_prompts()
    engine_args = {
        "max_model_len": 512,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 512,
        "tensor_parallel_size": 2,
        "distributed_executor_backend": "mp",
    }
    base = Engine(model, None, **engine_args)
    result: dict[str, Any] = {"prompts": prompts, "baseline": base.generate(prompts, 16)}
    base.close()
    # The worker-side connectors live in the two worker processes: no store watch here.
    engine = Engine(
        model,
        {"kvtool.policy": "eviction_aware", "kvtool.host_capacity_bytes": "64MiB"},
        watch_stores=False,
        **engine_args,
    )
    first = engine.generate(prompts, 16)
    drain_steps = engine.drain()
    reset = engine.llm.reset_prefix_cache()
    hits_before = engine.external_hits()
    second = engine.generate(prompts, 16)
    result["eviction_aware"] = {
        "first": first,
        "drain_steps": drain_steps,
        "reset_prefix_cache": reset,
        "second": second,
        "external_hits_delta": engine.external_hits() - hits_before,
        "world_size": engine.connector.setup.world_size,
        "stats": engine.connector_stats(),
    }
    engine.close()
    return result


SCENARIOS: dict[str, Callable[[str], dict[str, Any]]] = {
    "policies": scenario_policies,
    "eviction": scenario_eviction,
    "tensor_parallel": scenario_tensor_parallel,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    result = SCENARIOS[args.scenario](args.model)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
