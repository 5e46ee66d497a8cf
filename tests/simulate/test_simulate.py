"""kvtool simulate: the connector core's drain policies replayed over an in-memory pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtool.simulate.engine import EngineSettings, Simulation
from kvtool.simulate.sweep import quiet_connector
from kvtool.simulate.trace import PrefixRepetitionParams, Request, Segment, prefix_repetition

BLOCK_BYTES = 1 << 20


def _engine(**overrides: Any) -> EngineSettings:
    values: dict[str, Any] = {"num_gpu_blocks": 96, "block_size": 16, "max_num_seqs": 4,
                              "max_batched_tokens": 512, "host_blocks": 4096,
                              "block_bytes": BLOCK_BYTES}
    return EngineSettings(**{**values, **overrides})


# Eight 256-token prefixes (16 blocks each, 128 blocks in all) do not fit a 96-block
# GPU pool, so the pool must recycle prefixes and the host tier can serve them back.
TRACE = list(prefix_repetition(PrefixRepetitionParams(
    num_prefixes=8, prefix_tokens=256, suffix_tokens=32, output_tokens=16, num_requests=120),
    seed=1))


def _run(config: dict[str, Any], trace: list[Request] = TRACE, **engine: Any) -> Any:
    with quiet_connector():
        return Simulation(_engine(**engine), config).run(trace)


def test_gpu_prefix_hits_match_a_hand_count() -> None:
    # One 64-token prompt (4 blocks) served 4 times in a row on a pool that never
    # recycles: vLLM computes at least the last prompt token, so only (64 - 1) // 16 = 3
    # blocks = 48 tokens can hit, for each of the 3 repeats: 144 hit tokens.
    trace = [Request(id=f"r{i}", arrival=i * 50, segments=(Segment("p", 64),), output_tokens=4)
             for i in range(4)]
    result = _run({"kvtool.policy": "eager"}, trace, max_num_seqs=1)
    assert result.gpu_hit_tokens == 144
    assert result.external_hit_tokens == 0
    assert result.prompt_tokens == 256


def test_eager_stores_every_block_and_loses_none() -> None:
    result = _run({"kvtool.policy": "eager"})
    assert result.blocks_stored == result.blocks_buffered > 0
    assert result.blocks_lost_to_eviction == 0
    assert result.bytes_stored == result.blocks_stored * BLOCK_BYTES
    assert result.external_hit_tokens > 0  # evicted prefixes come back from the host


@pytest.mark.parametrize(
    "config",
    [{"kvtool.policy": "eager"}, {"kvtool.policy": "fifo"},
     {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1},
     {"kvtool.policy": "eviction_aware"}],
    ids=["eager", "fifo-default", "fifo-1", "eviction-aware"],
)
def test_every_buffered_block_ends_in_one_outcome(config: dict[str, Any]) -> None:
    result = _run(config)
    stats = result.stats
    assert stats["pending"] == 0 and stats["in_flight"] == 0  # the idle drain finished
    dropped = sum(v for k, v in stats.items() if k.startswith("dropped_"))
    assert stats["admitted"] == stats["stored"] + stats["failed"] + dropped


def test_fifo_at_defaults_keeps_the_hits_of_eager() -> None:
    # Threshold 100 (LMCache 0.5.6's default) never triggers on 120 requests; FIFO still
    # releases what the next scheduling pass could recycle (issue 25), so it loses nothing.
    fifo = _run({"kvtool.policy": "fifo"})
    eager = _run({"kvtool.policy": "eager"})
    assert fifo.blocks_lost_to_eviction == 0
    assert fifo.external_hit_tokens == eager.external_hit_tokens


def test_eviction_aware_keeps_eager_hits_and_writes_no_more() -> None:
    eager = _run({"kvtool.policy": "eager"})
    aware = _run({"kvtool.policy": "eviction_aware"})
    assert aware.bytes_stored <= eager.bytes_stored
    assert aware.external_hit_tokens == eager.external_hit_tokens > 0


def test_cli_sweeps_knobs_per_policy(kvtool_cli: Any) -> None:
    result = kvtool_cli("simulate", "--num-requests", "40", "--num-gpu-blocks", "96",
                        "--set", "kvtool.fifo.threshold=1,100",
                        "--set", "kvtool.idle_drain_steps=2", "--output-format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    settings = [run["setting"] for run in report["runs"]]
    assert settings == [
        "eager idle_drain_steps=2",
        "fifo threshold=1 idle_drain_steps=2",
        "fifo threshold=100 idle_drain_steps=2",
        "eviction_aware idle_drain_steps=2",
    ]
    # Block bytes from the sizing catalog: Llama-3.1-8B, 16 tokens x 131,072 B (sizing.md G-B1).
    assert report["engine"]["block_bytes"] == 16 * 131_072
    for run in report["runs"]:
        assert run["bytes_stored"] == run["blocks_stored"] * 16 * 131_072


def test_cli_reads_a_trace_file(kvtool_cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(
        {"id": f"r{i}", "arrival": i, "prefix": "doc", "prefix_tokens": 128,
         "suffix_tokens": 16, "output_tokens": 4}) for i in range(6)) + "\n")
    result = kvtool_cli("simulate", "--trace", str(trace), "--policy", "eager",
                        "--block-bytes", "4096", "--output-format", "json")
    assert result.exit_code == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["requests"] == 6
    assert run["gpu_hit_tokens"] > 0


def test_workload_options_with_a_trace_are_refused(kvtool_cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"id": "r0", "prefix": "doc", "prefix_tokens": 64}) + "\n")
    result = kvtool_cli("simulate", "--trace", str(trace), "--prefix-len", "1024")
    assert result.exit_code == 2
    assert "--prefix-len" in result.stderr and "--trace" in result.stderr


def test_text_output_is_a_table(kvtool_cli: Any) -> None:
    result = kvtool_cli("simulate", "--num-requests", "20", "--policy", "fifo")
    assert result.exit_code == 0
    assert "fifo" in result.stdout and "eviction" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "lru"], "--policy"),
        (["--set", "kvtool.fifo.threshhold=3"], "kvtool.fifo.threshold"),
        (["--set", "kvtool.fifo.threshold=0"], ">= 1"),
        (["--set", "threshold=3"], "--set"),
        (["--num-gpu-blocks", "4"], "raise --num-gpu-blocks"),
        (["--num-gpu-blocks", "0"], "--num-gpu-blocks"),
        (["--trace", "/nonexistent/trace.jsonl"], "no such file"),
        (["--model", "no-such-model"], "--model"),
        (["--output-format", "csv"], "--output-format"),
    ],
)
def test_bad_input_exits_2(kvtool_cli: Any, args: list[str], message: str) -> None:
    result = kvtool_cli("simulate", "--num-requests", "5", *args)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_trace_line_names_file_and_line(kvtool_cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "prefix": "p", "prefix_tokens": 16}\n'
                     '{"id": "b", "prefix": "p", "prefix_tokens": -1}\n')
    result = kvtool_cli("simulate", "--trace", str(trace))
    assert result.exit_code == 2
    assert f"{trace}:2: prefix_tokens" in result.stderr
