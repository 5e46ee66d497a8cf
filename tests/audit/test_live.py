"""``kvtool audit --url`` against a stand-in server on 127.0.0.1 (the real vLLM server is in
tests/e2e/test_audit_url.py).

The stand-in answers in the shapes vLLM 0.32.0's API server does:
``/version`` -> ``{"version": ...}`` (vllm/entrypoints/serve/... ``show_version``),
``/v1/models`` -> a ``ModelList`` of ``ModelCard``s with ``id``, ``root`` and
``max_model_len`` (vllm/entrypoints/openai/engine/protocol.py), and ``/metrics`` with
``vllm:cache_config_info``, whose labels are ``CacheConfig.metrics_info()``: every field as
``str(value)`` plus ``engine`` (vllm/v1/metrics/loggers.py ``log_metrics_info``), all at
https://github.com/vllm-project/vllm/tree/v0.32.0.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kvtool.audit.live import MAX_BODY_BYTES, read_live
from kvtool.errors import KvtoolError
from kvtool.http import request_headers
from kvtool.releases import load_release
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
VERSION = "0.32.0"


def cache_info(**overrides: str) -> str:
    """A ``vllm:cache_config_info`` sample with the release table's defaults, overridden."""
    facts = load_release(VERSION)
    labels = {
        "block_size": "16",
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": str(
            next(f.default for f in facts.flags if f.name == "--gpu-memory-utilization")
        ),
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
        "num_gpu_blocks": "1024",
        "kv_cache_dtype_skip_layers": "[]",
        **overrides,
        "engine": "0",
    }
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f"vllm:cache_config_info{{{body}}} 1.0\n"
    )


class Stub:
    """What the stand-in serves, and the requests it saw."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, bytes]] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []

    def serve(self, path: str, body: Any, status: int = 200) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.pages[path] = (status, data)


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    state = Stub()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append((self.path, dict(self.headers)))
            status, body = state.pages.get(self.path, (404, b"{}"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.serve("/version", {"version": f"{VERSION}+cpu"})
    state.serve(
        "/v1/models",
        {
            "object": "list",
            "data": [
                {"id": "tiny", "object": "model", "root": "/models/tiny", "max_model_len": 512}
            ],
        },
    )
    state.serve("/metrics", cache_info())
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def words(live: Any) -> list[str]:
    return [t.text for t in live.invocation.tokens]


def test_defaults_are_left_out_and_changed_values_become_flags(stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.serve("/metrics", cache_info(block_size="32", enable_prefix_caching="False"))
    live = read_live(url, {})
    assert live.version == VERSION  # the build label (+cpu) names no other release
    argv = words(live)
    assert argv[0] == "/models/tiny"
    assert argv[argv.index("--max-model-len") + 1] == "512"
    assert argv[argv.index("--served-model-name") + 1] == "tiny"
    assert argv[argv.index("--block-size") + 1] == "32"
    assert "--no-enable-prefix-caching" in argv
    assert "--gpu-memory-utilization" not in argv and "--kv-offloading-backend" not in argv
    assert "--kv-transfer-config" not in argv
    # Only the three API endpoints, plus the optional development-mode one.
    assert [p for p, _ in state.seen] == [
        "/version",
        "/v1/models",
        "/metrics",
        "/server_info?config_format=json",
    ]


def test_kvtool_metrics_name_the_connector(stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.serve("/metrics", cache_info() + 'kvtool:stored_total{engine="0"} 0.0\n')
    argv = words(read_live(url, {}))
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config["kv_connector"] == "KvtoolConnector"


def test_server_info_supplies_the_transfer_config(stub: tuple[Stub, str]) -> None:
    state, url = stub
    transfer = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "engine_id": "x"}
    state.serve(
        "/server_info?config_format=json",
        {
            "vllm_config": {
                "kv_transfer_config": transfer,
                "parallel_config": {"tensor_parallel_size": 2},
            }
        },
    )
    live = read_live(url, {})
    argv = words(live)
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert "/server_info" in live.endpoints


def test_auth_header_is_sent_and_401_is_explained(stub: tuple[Stub, str]) -> None:
    state, url = stub
    read_live(url, request_headers(["Authorization: Bearer k1"], {}))
    assert all(h.get("Authorization") == "Bearer k1" for _, h in state.seen)
    assert request_headers([], {"VLLM_API_KEY": "k2"}) == {"Authorization": "Bearer k2"}
    env = {"KVTOOL_AUDIT_HEADER": "X-Key: k3", "VLLM_API_KEY": "k2"}
    assert request_headers([], env) == {"X-Key": "k3"}
    state.serve("/version", {"error": "Unauthorized"}, status=401)
    with pytest.raises(KvtoolError, match="HTTP 401"):
        read_live(url, {})


def test_redirects_are_not_followed_and_bodies_are_capped(stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.serve("/v1/models", "", status=302)
    with pytest.raises(KvtoolError, match="HTTP 302"):
        read_live(url, {})
    state.serve("/v1/models", "x" * (MAX_BODY_BYTES + 1))
    with pytest.raises(KvtoolError, match="byte cap"):
        read_live(url, {})


def test_cli_audits_the_server_at_its_own_release(kvtool_cli: Cli, stub: tuple[Stub, str]) -> None:
    state, url = stub
    state.serve("/metrics", cache_info(enable_prefix_caching="False", kv_offloading_size="8.0"))
    result = kvtool_cli("audit", "--url", url, "--output-format", "json")
    assert result.exit_code in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["target"]["vllm_version"] == VERSION
    # Offload without prefix caching, as the server reports it, is what the rules see.
    assert "CN030" in {f["code"] for f in report["findings"]}


@pytest.mark.parametrize(
    "args",
    [
        ("--url", "ftp://host"),
        ("--url", "http://127.0.0.1:1"),  # nothing listens on port 1
        ("--url", "http://127.0.0.1:1", "--fix"),
        ("--url", "http://127.0.0.1:1", "--header", "no colon"),
    ],
)
def test_bad_url_input_exits_2(kvtool_cli: Cli, args: tuple[str, ...]) -> None:
    result = kvtool_cli("audit", *args)
    assert result.exit_code == 2 and result.stderr.startswith("kvtool: error:")
