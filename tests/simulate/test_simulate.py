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
    assert result.lost_to_recycling == 0
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
    # Threshold 100 (LMCache 0.5.6's default) never triggers on 120 requests; what the
    # engine recycles is rescued before the forward overwrites it (issue 25), so FIFO
    # loses nothing and keeps eager's hits.
    fifo = _run({"kvtool.policy": "fifo"})
    eager = _run({"kvtool.policy": "eager"})
    assert fifo.stats.get("released_by_threshold", 0) == 0
    assert fifo.external_hit_tokens == eager.external_hit_tokens
    assert fifo.stats["rescued"] > 0
    assert fifo.lost_to_recycling == fifo.stats["lost_to_recycling"] == 0


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
    assert "fifo" in result.stdout and "lost to recycling" in result.stdout


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


# --------------------------------------------------------------------------- the user's question


def _json(kvtool_cli: Any, *args: str) -> dict[str, Any]:
    result = kvtool_cli("simulate", *args, "--block-bytes", "65536", "--output-format", "json")
    assert result.exit_code == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_a_setting_without_host_hits_always_says_why(kvtool_cli: Any) -> None:
    # Issue 26: the default fifo showed 0.0% host hits with no explanation. Two ways to
    # get none: everything stays in the GPU cache (one prefix), or nothing is stored.
    for args in (["--num-prefixes", "1"], ["--prefix-len", "8", "--suffix-len", "4"]):
        result = kvtool_cli("simulate", "--num-requests", "60", "--policy", "fifo",
                            "--block-bytes", "65536", *args)
        assert result.exit_code == 0, result.stderr
        assert "0.0%" in result.stdout
        assert "fifo: stores nothing" in result.stdout or "no request read one back" in (
            result.stdout)
    for run in _json(kvtool_cli, "--num-requests", "60", "--num-prefixes", "1")["runs"]:
        assert run["external_hit_rate"] == 0 and run["notes"]


def test_fifo_that_never_reaches_its_threshold_says_so(kvtool_cli: Any) -> None:
    run = _json(kvtool_cli, "--num-requests", "120", "--policy", "fifo")["runs"][0]
    assert run["stats"].get("released_by_threshold", 0) == 0
    assert any("threshold (100 finished requests" in note for note in run["notes"])


def test_recommendation_keeps_eagers_hits_and_names_the_saving(kvtool_cli: Any) -> None:
    report = _json(kvtool_cli, "--num-requests", "150", "--num-gpu-blocks", "128",
                   "--set", "kvtool.eviction_aware.horizon_steps=1,2.5,8",
                   "--set", "kvtool.fifo.threshold=1,100")
    chosen = report["recommendation"]
    runs = {run["setting"]: run for run in report["runs"]}
    eager = runs["eager"]
    # Second derivation from the runs themselves: among the settings within 0.2 points
    # of eager's host hits, none writes fewer bytes than the one recommended.
    keeping = [r for r in runs.values()
               if r["external_hit_rate"] >= eager["external_hit_rate"] - 0.002 - 1e-12]
    assert chosen["setting"] in {r["setting"] for r in keeping}
    assert chosen["bytes_stored"] == min(r["bytes_stored"] for r in keeping)
    assert chosen["bytes_saved"] == eager["bytes_stored"] - chosen["bytes_stored"]
    assert chosen["hit_cost_points"] == pytest.approx(
        (eager["external_hit_rate"] - runs[chosen["setting"]]["external_hit_rate"]) * 100)


def test_no_host_hits_anywhere_is_said_plainly(kvtool_cli: Any) -> None:
    # One prefix that always fits the GPU pool: nothing is ever read back from the host.
    report = _json(kvtool_cli, "--num-requests", "30", "--num-prefixes", "1")
    assert report["recommendation"] is None
    assert "GPU cache" in report["recommendation_note"]


def test_plot_svg_has_a_point_per_setting(kvtool_cli: Any, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    picture = tmp_path / "sweep.svg"
    result = kvtool_cli("simulate", "--num-requests", "40", "--block-bytes", "65536",
                        "--set", "kvtool.fifo.threshold=1,4,16", "--plot", str(picture))
    assert result.exit_code == 0, result.stderr
    root = ET.fromstring(picture.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    points = [c for c in root.iter(f"{ns}circle") if c.find(f"{ns}title") is not None]
    assert len(points) == 5  # eager, fifo x 3, eviction_aware
    assert len(list(root.iter(f"{ns}polyline"))) == 1  # the fifo sweep joined


def test_plot_png_without_matplotlib_is_one_line(kvtool_cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("kvtool")  # always there; matplotlib is not in the test env
    import importlib.util

    if importlib.util.find_spec("matplotlib") is not None:
        pytest.skip("matplotlib is installed here")
    result = kvtool_cli("simulate", "--num-requests", "5", "--plot", str(tmp_path / "p.png"))
    assert result.exit_code == 2
    assert "matplotlib" in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "p.png").exists()


def test_plot_and_report_never_overwrite_the_trace(kvtool_cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "segments": [{"key": "s", "tokens": 64}]}\n')
    before = trace.read_text()
    for flag in ("--plot", "-o"):
        result = kvtool_cli("simulate", "--trace", str(trace), flag,
                            str(trace) if flag == "-o" else str(trace.with_suffix(".svg")),
                            "--block-bytes", "4096")
        if flag == "-o":
            assert result.exit_code == 2 and "would be overwritten" in result.stderr
    assert trace.read_text() == before


def test_old_gpu_blocks_spelling_still_works_with_a_warning(kvtool_cli: Any) -> None:
    old = kvtool_cli("simulate", "--num-requests", "20", "--gpu-blocks", "96",
                     "--block-bytes", "4096", "--output-format", "json")
    new = kvtool_cli("simulate", "--num-requests", "20", "--num-gpu-blocks", "96",
                     "--block-bytes", "4096", "--output-format", "json")
    assert old.exit_code == new.exit_code == 0
    assert "--gpu-blocks is deprecated; use --num-gpu-blocks" in old.stderr
    assert json.loads(old.stdout) == json.loads(new.stdout)
    both = kvtool_cli("simulate", "--gpu-blocks", "96", "--num-gpu-blocks", "96")
    assert both.exit_code == 2
    help_text = kvtool_cli("simulate", "--help").stdout
    assert "--num-gpu-blocks" in help_text and "--gpu-blocks " not in help_text


def test_policy_choices_are_the_connectors_registry(kvtool_cli: Any) -> None:
    from kvtool.connector.policies import POLICIES
    from kvtool.simulate.command import POLICY_NAMES

    assert tuple(POLICIES) == POLICY_NAMES
    report = _json(kvtool_cli, "--num-requests", "10")
    assert [run["setting"] for run in report["runs"]] == list(POLICY_NAMES)


@pytest.mark.parametrize("workload", ["chat", "rag", "zipf", "prefix-repetition"])
def test_every_generated_workload_runs_and_balances(kvtool_cli: Any, workload: str) -> None:
    report = _json(kvtool_cli, "--workload", workload, "--num-requests", "60",
                   "--param", "output_tokens=4")
    for run in report["runs"]:
        stats = run["stats"]
        dropped = sum(v for k, v in stats.items() if k.startswith("dropped_"))
        assert stats["admitted"] == stats["stored"] + stats["failed"] + dropped
        assert run["requests"] == 60


def test_requests_arriving_together_are_not_all_held(kvtool_cli: Any) -> None:
    # 20,000 requests at step 0: the waiting queue is pulled from the generator as it
    # drains, so the simulation holds about a batch, not the whole workload.
    report = _json(kvtool_cli, "--num-requests", "20000", "--num-prefixes", "4",
                   "--prefix-len", "32", "--suffix-len", "16", "--output-len", "2",
                   "--policy", "eager", "--max-num-seqs", "16")
    (run,) = report["runs"]
    assert run["requests"] == 20000
    assert run["peak_requests_held"] <= 2 * 16


# --------------------------------------------------------------------------- bounds (issue 27)


@pytest.mark.parametrize(
    "args",
    [
        # 300 x 300 values of two FIFO knobs: 90,000 settings.
        ["--set", "kvtool.fifo.threshold=" + ",".join(map(str, range(1, 301))),
         "--set", "kvtool.fifo.select_count=" + ",".join(map(str, range(1, 301)))],
        # Five million one-token requests under three policies.
        ["--num-requests", "5000000", "--prefix-len", "0", "--suffix-len", "1",
         "--output-len", "1"],
    ],
    ids=["sweep-300x300", "5M-one-token-requests"],
)
def test_runaway_work_is_refused_before_it_starts(kvtool_cli: Any, args: list[str]) -> None:
    import time

    start = time.monotonic()
    result = kvtool_cli("simulate", *args, "--block-bytes", "4096")
    assert time.monotonic() - start < 20
    assert result.exit_code == 2
    assert "simulate_work" in result.stderr and result.stderr.count("\n") == 1


def test_work_that_outgrows_its_estimate_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtool.limits import LimitExceeded
    from kvtool.simulate.budget import WorkMeter

    meter = WorkMeter(5_000, "simulate eager")
    with pytest.raises(LimitExceeded, match="stopped in the"), quiet_connector():
        Simulation(_engine(), {"kvtool.policy": "eager"}, meter).run(TRACE)
    assert meter.used <= 5_000 + 200  # at most one step past the bound


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-requests", "9" * 401], "--workload prefix-repetition: num_requests"),
        (["--workload", "zipf", "--param", "alpha=1e400"], "alpha"),
        (["--workload", "rag", "--param", "hot_fraction=nan"], "hot_fraction"),
        (["--set", "kvtool.eviction_aware.horizon_steps=1e400"], "horizon_steps"),
        (["--set", "kvtool.fifo.threshold=" + "9" * 401], "characters"),
        (["--num-gpu-blocks", "9" * 401], "simulate_work"),
        (["--host-blocks", "9" * 401], "--host-blocks"),
        (["--param", "num_prefixes"], "--param"),
        (["--workload", "chat", "--prefix-len", "5"], "--param with --workload chat"),
    ],
)
def test_huge_or_non_finite_numbers_are_one_line(kvtool_cli: Any, args: list[str],
                                                 message: str) -> None:
    result = kvtool_cli("simulate", *args, "--block-bytes", "4096")
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_results_do_not_depend_on_the_process(kvtool_cli: Any) -> None:
    import os
    import subprocess
    import sys

    kvtool = str(Path(sys.executable).with_name("kvtool"))
    args = [kvtool, "simulate", "--workload", "chat", "--num-requests", "80",
            "--block-bytes", "4096", "--output-format", "json"]
    outputs = {
        subprocess.run(args, capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    outputs.add(kvtool_cli(*args[1:]).stdout)
    assert len(outputs) == 1


def test_idle_stepping_drains_between_arrivals_only_on_a_server() -> None:
    # Two waves 500 steps apart: a server keeps stepping while the connector holds
    # work, so eviction_aware's idle drain runs in the gap and again at the end; an
    # offline driver only steps with requests unfinished, so it drains once, at the end.
    waves = [Request(id=f"r{i}", arrival=(i // 4) * 500,
                     segments=(Segment(f"p{i % 2}", 96), Segment(f"r{i}", 16)), output_tokens=4)
             for i in range(8)]
    server = _run({"kvtool.policy": "eviction_aware"}, waves)
    offline = _run({"kvtool.policy": "eviction_aware"}, waves, idle_stepping=False)
    assert server.stats["idle_drains"] == 2 and server.idle_steps > 0
    assert offline.stats["idle_drains"] == 1
