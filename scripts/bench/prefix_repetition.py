"""Prefix-repetition workload on the tiny model: no connector vs kvtool's connector per policy.

Run with the vLLM environment's python::

    .venv-vllm/bin/python scripts/bench/prefix_repetition.py [--quick] [--json]

Workload: requests alternate between 2 hot prefixes (every other request, so
they stay resident in vLLM's prefix cache) and 30 cold prefixes (each recurs
only after 59 other requests, by which time the 96-block KV pool has recycled
its blocks). Each prompt is a 4-block prefix plus a unique 20-token tail;
greedy, 8 output tokens. A cold prefix can only be a hit when a connector
stored it before vLLM recycled its blocks; storing a hot prefix is wasted bytes.

Method. Every configuration (no connector, each policy, and a second
no-connector engine as a control) runs in its own engine process: vLLM keeps
one worker-side connector per process, so two differently configured engines
cannot share one. The engines start fresh 3 times (one process runs a few
percent faster or slower than its twin; the control measures it), and each
trial queues its whole request list (fresh prefixes every trial) on every
engine at once, as ``LLM.generate`` would; then the engines advance in turns
of ``SLICE_STEPS`` engine steps, one configuration after another in the orders
of a Williams square (each runs first, and right after each other one,
equally often). Every configuration takes the same steps over the same
requests (``steps_<name>``), so slice k of one configuration and slice k of
the baseline did the same work a second or two apart. On this shared 2-core
machine a pass's speed drifts by tens of percent over minutes, far more than
the differences measured; pairing at this grain keeps the drift out of the
ratios. Each engine's OpenMP threads are bound to one CPU (the last this
process may use; ``VLLM_CPU_OMP_THREADS_BIND`` unless set): with two threads,
any other process on either core stalls every parallel region, and vLLM's
automatic binding made some engines here 10-20x slower at random.

Figures. ``throughput_ratio_<name>`` is the median over all paired slices of
the slice's steps per second with that configuration over the baseline's,
with a bootstrap 95% interval of that median (``throughput_ratio_ci_lo_<name>``,
``_ci_hi_``); ``throughput_ratio_total_<name>`` is the ratio of whole-run
throughputs (prompt plus output tokens per second of stepping), and
``throughput_ratio_control`` the no-connector control's: what the method
cannot resolve. ``cpu_throughput_ratio_<name>`` is the same median over the
engine process's CPU seconds. ``ttft_ms_<name>`` is vLLM's mean first-token
latency (queueing included). The external hit rate (vLLM's external
prefix-cache hits / prompt tokens) is over the whole run; the blocks and bytes
the connector stored are means per trial. ``--json`` prints one object with
these keys (policy names in lower case).

FIFO runs with the knobs of the ``kvtool-connector-fifo`` launch recipe
(threshold 1, select 8): at its defaults (threshold 100) it stores nothing here.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

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
SLICE_STEPS = 60
"""Engine steps per turn: a fifth of a second on this machine; a trial takes 721 steps."""
POLICY_EXTRA: dict[str, dict[str, Any]] = {
    "eager": {"kvtool.policy": "eager"},
    "fifo": {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1, "kvtool.fifo.select_count": 8},
    "eviction_aware": {"kvtool.policy": "eviction_aware"},
}
BASELINE, CONTROL = "none", "control"
"""The two no-connector configurations: ratios are against the baseline; the control
is the same engine again, so its ratio is what the method cannot resolve."""
BOOTSTRAP_RESAMPLES = 2000
TARGET_RATIO = 0.95
"""Issue 6: each lazy policy within 5% of no-connector throughput."""
ENGINE_START_TIMEOUT_S = 300.0


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


def machine_busy_s() -> float:
    """CPU-seconds every process on the machine has spent so far (Linux /proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    jiffies = [int(f) for f in fields]
    idle = jiffies[3] + jiffies[4]  # idle + iowait
    return (sum(jiffies[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- engine process


def engine_args(model: Path, policy: str | None) -> dict[str, Any]:
    """``LLM`` arguments: the same engine for every configuration, plus the connector."""
    args: dict[str, Any] = dict(
        model=str(model),
        dtype="bfloat16",
        enable_prefix_caching=True,
        block_size=BLOCK_SIZE,
        enforce_eager=True,
        seed=0,
        disable_log_stats=False,
        max_model_len=256,
        max_num_seqs=4,
        max_num_batched_tokens=512,
        kv_cache_memory_bytes=POOL_BLOCKS * BLOCK_BYTES,
    )
    if policy is not None:
        args["kv_transfer_config"] = {
            "kv_connector": "KvtoolConnector",
            "kv_connector_module_path": "kvtool.connector.vllm",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {
                **POLICY_EXTRA[policy],
                "kvtool.host_capacity_bytes": "64MiB",
            },
        }
    return args


class Engine:
    """One configuration's in-process engine, driven a slice of steps at a time."""

    def __init__(self, model: Path, policy: str | None) -> None:
        from vllm import LLM, SamplingParams

        self.policy = policy
        self.llm = LLM(**engine_args(model, policy))
        self.params = SamplingParams(temperature=0.0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
        # The engine's first step pays one-off costs; one short prompt keeps them out.
        self.submit([[11] * 40])
        self.steps(10_000)
        self.finish()

    def submit(self, prompts: list[list[int]]) -> None:
        """Queue every request of a trial at once, as ``LLM.generate`` does."""
        from vllm.inputs import TokensPrompt

        self._prompts = prompts
        self._ttfts: list[float] = []
        self._hits_before = self._external_hits()
        self._stored_before = self._stored()
        engine = self.llm.llm_engine
        for i, prompt in enumerate(prompts):
            engine.add_request(
                f"{id(prompts)}-{i}", TokensPrompt(prompt_token_ids=prompt), self.params
            )

    def steps(self, limit: int) -> dict[str, float]:
        """Run up to ``limit`` engine steps (fewer when every request finished), timed."""
        engine = self.llm.llm_engine
        ttfts = self._ttfts
        # A collection pause in the middle of a slice would be charged to whichever
        # configuration it happened to fall on.
        gc.collect()
        gc.disable()
        try:
            machine_start = machine_busy_s()
            start, cpu_start = time.perf_counter(), time.process_time()
            done = 0
            while done < limit and engine.has_unfinished_requests():
                for output in engine.step():
                    if output.finished and output.metrics is not None:
                        ttfts.append(output.metrics.first_token_latency)
                done += 1
            wall = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            machine = machine_busy_s() - machine_start
        finally:
            gc.enable()
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "steps": float(done),
            # CPU the rest of the machine used meanwhile, in CPUs.
            "others_cpus": max(0.0, machine - cpu) / wall if wall > 0 else 0.0,
        }

    def finish(self) -> dict[str, float]:
        """What the submitted requests did, once every one of them finished."""
        prompts = self._prompts
        blocks_after, bytes_after = self._stored()
        return {
            "requests": float(len(self._ttfts)),
            "ttft_s_sum": float(sum(self._ttfts)),
            "prompt_tokens": float(sum(len(p) for p in prompts)),
            "tokens": float(sum(len(p) for p in prompts) + OUTPUT_TOKENS * len(prompts)),
            "external_hits": self._external_hits() - self._hits_before,
            "blocks_stored": blocks_after - self._stored_before[0],
            "bytes_stored": bytes_after - self._stored_before[1],
        }

    def _stored(self) -> tuple[float, float]:
        if self.policy is None:
            return 0.0, 0.0
        engine_core = self.llm.llm_engine.engine_core.engine_core
        stats = engine_core.scheduler.connector.manager.stats
        return float(stats.stored), float(stats.stored_bytes)

    def _external_hits(self) -> float:
        return float(
            sum(
                getattr(m, "value", 0)
                for m in self.llm.get_metrics()
                if m.name == "vllm:external_prefix_cache_hits"
            )
        )


def serve_engine(model: Path, config: str) -> NoReturn:
    """Engine-process main: one JSON command per stdin line, one JSON answer per line.

    Commands: ``{"submit": [prompt, ...]}``, ``{"steps": n}``, ``{"finish": true}``.
    """
    serve_protocol(lambda: Engine(model, None if config in (BASELINE, CONTROL) else config))


def serve_protocol(make_engine: Callable[[], Any]) -> NoReturn:
    """Run the engine-process side of the protocol over ``make_engine()`` (anything with
    ``submit``, ``steps`` and ``finish``): ``ready``, then one JSON answer per command."""
    # vLLM and its libraries print to stdout; the protocol keeps the real one.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    engine = make_engine()
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
    # Nothing is left to save: skip vLLM's exit handlers, which take seconds.
    os._exit(0)


def engine_env() -> dict[str, str]:
    """Environment of the engine processes."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CONFIGURE_LOGGING": "0",
    }
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(max(os.sched_getaffinity(0))))
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the pool is sized explicitly
    return env


class EngineProcess:
    """A child process running :func:`serve_engine`; its output goes to ``log``.

    Started with a fresh interpreter: forking one that imported vLLM hangs the
    child in vLLM's start-up. ``script`` is the benchmark whose ``--engine-process``
    main the child runs (this one unless another benchmark reuses the class).
    """

    def __init__(self, model: Path, config: str, log: Path, env: dict[str, str],
                 script: Path = Path(__file__)) -> None:
        self.config = config
        self.log = log
        with log.open("w") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), "--engine-process", config, "--model", str(model)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=env,
            )

    def wait_ready(self) -> None:
        if self._read_line() != "ready":
            raise self._died("did not start")

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise self._died(f"stopped before {next(iter(command))!r}") from exc
        line = self._read_line()
        if not line:
            raise self._died(f"stopped at {next(iter(command))!r}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _read_line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _died(self, what: str) -> RuntimeError:
        self.stop()
        tail = self.log.read_text(errors="replace").strip().splitlines()[-15:]
        return RuntimeError(
            f"engine process {self.config!r} {what}; log {self.log}:\n" + "\n".join(tail)
        )

    def close_input(self) -> None:
        """Close its input: it exits once it has read everything."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()

    def stop(self) -> None:
        """Close its input, or kill it by PID when it has not exited after a grace period."""
        self.close_input()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def stop_all(engines: Sequence[EngineProcess]) -> None:
    for engine in engines:
        engine.close_input()  # all exit at once
    for engine in engines:
        engine.stop()


# --------------------------------------------------------------------------- method


def williams_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` items in which each comes first, and right after each other
    item, equally often: ``n`` rows for even ``n``, twice that for odd ``n``."""
    first = [0]
    for i in range(1, n):
        first.append((i + 1) // 2 if i % 2 else n - i // 2)
    rows = [[(x + shift) % n for x in first] for shift in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def bootstrap_median_interval(values: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values``."""
    rng = random.Random(seed)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP_RESAMPLES)
    )
    return medians[int(0.025 * len(medians))], medians[int(0.975 * len(medians)) - 1]


def summarise(
    slices: dict[str, list[dict[str, float]]], outcomes: dict[str, list[dict[str, float]]]
) -> dict[str, float]:
    """The ``--json`` figures.

    ``slices[name][k]`` is the k-th slice of engine steps of that configuration
    (slice k covers the same steps of the same trial for every configuration);
    ``outcomes[name][t]`` is what trial t's requests did there.
    """
    figures: dict[str, float] = {}
    base = slices[BASELINE]
    trials = len(outcomes[BASELINE])
    for name, runs in slices.items():
        done = outcomes[name]
        wall = sum(r["wall_s"] for r in runs)
        figures[f"wall_s_{name}"] = wall
        figures[f"steps_{name}"] = sum(r["steps"] for r in runs)
        figures[f"cpu_s_{name}"] = sum(r["cpu_s"] for r in runs)
        figures[f"throughput_tok_s_{name}"] = sum(o["tokens"] for o in done) / wall
        figures[f"ttft_ms_{name}"] = (
            1000 * sum(o["ttft_s_sum"] for o in done) / sum(o["requests"] for o in done)
        )
        figures[f"external_hit_rate_{name}"] = sum(o["external_hits"] for o in done) / sum(
            o["prompt_tokens"] for o in done
        )
        for key in ("blocks_stored", "bytes_stored"):
            figures[f"{key}_{name}"] = sum(o[key] for o in done) / trials
        figures[f"others_cpus_mean_{name}"] = statistics.fmean(r["others_cpus"] for r in runs)
        # Steps per second of the same engine steps, run seconds apart; every
        # configuration takes the same steps (steps_<name>), so this is the
        # throughput ratio slice by slice.
        paired = [
            (r["steps"] / r["wall_s"]) / (b["steps"] / b["wall_s"])
            for r, b in zip(runs, base, strict=False)
            if r["steps"] and b["steps"]
        ]
        cpu_paired = [
            (r["steps"] / r["cpu_s"]) / (b["steps"] / b["cpu_s"])
            for r, b in zip(runs, base, strict=False)
            if r["steps"] and b["steps"]
        ]
        figures[f"throughput_ratio_{name}"] = statistics.median(paired)
        lo, hi = bootstrap_median_interval(paired)
        figures[f"throughput_ratio_ci_lo_{name}"] = lo
        figures[f"throughput_ratio_ci_hi_{name}"] = hi
        figures[f"cpu_throughput_ratio_{name}"] = statistics.median(cpu_paired)
    for name in slices:
        figures[f"throughput_ratio_total_{name}"] = (
            figures[f"throughput_tok_s_{name}"] / figures[f"throughput_tok_s_{BASELINE}"]
        )
        figures[f"ttft_ratio_{name}"] = figures[f"ttft_ms_{name}"] / figures[f"ttft_ms_{BASELINE}"]
    if figures.get("bytes_stored_eager"):
        figures["bytes_ratio_eviction_aware_vs_eager"] = (
            figures["bytes_stored_eviction_aware"] / figures["bytes_stored_eager"]
        )
    return figures


def run_trials(
    model: Path,
    configs: list[str],
    rounds: int,
    trials: int,
    generations: int,
    logs: Path,
    console: Any,
) -> tuple[dict[str, list[dict[str, float]]], dict[str, list[dict[str, float]]]]:
    """``generations`` times, start one engine per configuration and give it its
    share of the trials; every trial queues its requests on each engine, then runs
    slices of ``SLICE_STEPS`` steps on every configuration in turn until all finished."""
    env = engine_env()
    orders = williams_orders(len(configs))
    slices: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    outcomes: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    turn = 0
    for generation in range(generations):
        with console.status(f"starting {len(configs)} engines ({generation + 1}/{generations})"):
            engines = [
                EngineProcess(model, name, logs / f"{name}-{generation}.log", env)
                for name in configs
            ]
            try:
                for engine in engines:
                    engine.wait_ready()
            except BaseException:
                stop_all(engines)
                raise
        try:
            for trial in range(generation, trials, generations):
                prompts = workload(rounds, trial)
                for engine in engines:
                    engine.call({"submit": prompts})
                running = set(range(len(configs)))
                with console.status(f"trial {trial + 1}/{trials}: {len(prompts)} requests"):
                    while running:
                        for index in orders[turn % len(orders)]:
                            if index not in running:
                                continue
                            result = engines[index].call({"steps": SLICE_STEPS})
                            slices[configs[index]].append(result)
                            if result["steps"] < SLICE_STEPS:
                                running.discard(index)
                        turn += 1
                for name, engine in zip(configs, engines, strict=True):
                    outcomes[name].append(engine.call({"finish": True}))
        finally:
            stop_all(engines)
    return slices, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 rounds, 1 trial, no control (instead of 6 rounds, 12 trials "
        "on 3 generations of engines)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "kvtool" / "bench",
        help="where the tiny model is built once and vLLM keeps its cache (default %(default)s)",
    )
    parser.add_argument("--engine-process", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.engine_process:
        return serve_engine(args.model, args.engine_process)

    from rich.console import Console

    console = Console(stderr=True)
    rounds, trials, generations = (2, 1, 1) if args.quick else (6, 12, 3)
    configs = [BASELINE, *POLICY_EXTRA] + ([] if args.quick else [CONTROL])
    # Built once (seconds of imports and training), then reused, like the wheels
    # policy_step_cost.py caches: the weights are seeded, so a rebuild is identical.
    model = build_tiny_model(args.cache / "tiny-model")
    # vLLM's own cache: kept beside it, as a cold one makes every engine start slower.
    os.environ.setdefault("VLLM_CACHE_ROOT", str(args.cache / "vllm-cache"))
    with tempfile.TemporaryDirectory(prefix="kvtool-bench-") as tmp:
        slices, outcomes = run_trials(
            model, configs, rounds, trials, generations, Path(tmp), console
        )
    figures = {
        "requests_per_trial": float(len(workload(rounds, 0))),
        "trials": float(trials),
        "generations": float(generations),
        "slices": float(len(slices[BASELINE])),
        **summarise(slices, outcomes),
    }

    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    print(
        f"prefix repetition: {trials} trial(s) of {figures['requests_per_trial']:.0f} "
        f"requests, {HOT_PREFIXES} hot + {COLD_PREFIXES} cold {PREFIX_BLOCKS}-block "
        f"prefixes, KV pool {POOL_BLOCKS} blocks; ratio: median over "
        f"{figures['slices']:.0f} paired slices of {SLICE_STEPS} steps [95% interval]"
    )
    print(
        f"{'connector':<16}{'tok/s':>8}{'ratio':>8}{'interval':>15}{'total':>8}"
        f"{'cpu ratio':>10}{'TTFT ms':>9}{'ext hit':>9}{'stored':>8}{'bytes':>10}"
    )
    for name in configs:
        interval = (
            f"{figures[f'throughput_ratio_ci_lo_{name}']:.3f}-"
            f"{figures[f'throughput_ratio_ci_hi_{name}']:.3f}"
        )
        print(
            f"{name:<16}{figures[f'throughput_tok_s_{name}']:>8.0f}"
            f"{figures[f'throughput_ratio_{name}']:>8.3f}{interval:>15}"
            f"{figures[f'throughput_ratio_total_{name}']:>8.3f}"
            f"{figures[f'cpu_throughput_ratio_{name}']:>10.3f}"
            f"{figures[f'ttft_ms_{name}']:>9.1f}"
            f"{figures[f'external_hit_rate_{name}']:>9.3f}"
            f"{figures[f'blocks_stored_{name}']:>8.0f}{figures[f'bytes_stored_{name}']:>10.0f}"
        )
    print(
        f"eviction_aware bytes / eager bytes: {figures['bytes_ratio_eviction_aware_vs_eager']:.3f}"
    )
    verdicts = ", ".join(
        f"{policy} {'yes' if figures[f'throughput_ratio_ci_lo_{policy}'] >= TARGET_RATIO else 'no'}"
        for policy in POLICY_EXTRA
    )
    print(
        f"within {1 - TARGET_RATIO:.0%} of no connector (interval's lower bound >= "
        f"{TARGET_RATIO}): {verdicts}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
