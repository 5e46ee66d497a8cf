"""Numbers parsed once, with limits: a 401-digit value, ``10**400``, ``1e400``, NaN or a
list where a mapping belongs is one clear line (a finding, or exit 2), never a
traceback, wherever it enters: the connector's own config, ``kvtool audit`` through
``--kv-transfer-config``, a Pod, a ``--config`` YAML, ``/server_info`` or Helm values,
and ``verify --interval``."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtool.connector.config import ConnectorConfig, ConnectorConfigError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
HUGE_TEXT = "9" * 401
HUGE_INT = 10**400
KVTOOL = {"kv_connector": "KvtoolConnector", "kv_connector_module_path": "kvtool.connector.vllm"}
KEYS = ("kvtool.host_capacity_bytes", "kvtool.fifo.threshold",
        "kvtool.eviction_aware.horizon_steps")  # fmt: skip


def _no_traceback(result: CliResult) -> None:
    # A traceback would escape ``run`` (the test fails there) or fill stderr.
    assert "Traceback" not in result.stderr
    assert result.exit_code in (0, 1, 2), result.stderr
    assert len(result.stderr.strip().splitlines()) <= 3, result.stderr


@pytest.mark.parametrize("value", [HUGE_TEXT, HUGE_INT, "1e400", "nan", float("inf")],
                         ids=["401-digits", "10**400", "1e400", "nan", "inf"])  # fmt: skip
@pytest.mark.parametrize("key", KEYS)
def test_connector_config_refuses_huge_numbers_with_one_message(key: str, value: Any) -> None:
    with pytest.raises(ConnectorConfigError) as refused:
        ConnectorConfig.from_extra_config({key: value})
    message = str(refused.value)
    assert key in message and len(message) < 300 and "\n" not in message


@pytest.mark.parametrize("extra", [[1, 2], "kvtool.policy=fifo", 5])
def test_connector_config_refuses_a_non_mapping(extra: Any) -> None:
    with pytest.raises(ConnectorConfigError, match="mapping"):
        ConnectorConfig.from_extra_config(extra)


def _transfer(key: str, raw: str) -> str:
    """A --kv-transfer-config JSON text with ``key`` set to the JSON number text ``raw``."""
    return json.dumps({**KVTOOL, "kv_connector_extra_config": {key: "@"}}).replace('"@"', raw)


@pytest.mark.parametrize("key", KEYS)
def test_audit_reports_a_huge_connector_value_as_a_finding(kvtool_cli: Cli, key: str) -> None:
    config = _transfer(key, HUGE_TEXT)
    result = kvtool_cli(
        "audit", "--vllm-version", "0.32.0", "--", "vllm", "serve", "m",
        "--kv-transfer-config", config,
    )  # fmt: skip
    _no_traceback(result)
    assert result.exit_code == 1 and key in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("memory", ["1e400", f"{HUGE_TEXT}Gi", "1e-400"])
def test_a_pod_memory_check_with_huge_numbers(kvtool_cli: Cli, tmp_path: Path, memory: str) -> None:
    # A Pod in the shape of Kubernetes' own examples (kubernetes.io/docs/concepts/workloads/
    # pods/), the container on vLLM's image with kvtool's connector.
    config = _transfer("kvtool.host_capacity_bytes", json.dumps(HUGE_TEXT))
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: vllm}\nspec:\n  containers:\n"
        "  - name: vllm\n    image: vllm/vllm-openai:v0.32.0\n"
        f"    args: [\"m\", \"--kv-transfer-config\", {json.dumps(config)}]\n"
        f"    resources:\n      limits: {{memory: \"{memory}\"}}\n"
    )
    _no_traceback(kvtool_cli("audit", str(pod)))


def test_a_config_yaml_with_a_huge_connector_value(kvtool_cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    extra = {"kvtool.eviction_aware.horizon_steps": "@"}
    config.write_text(
        "kv-transfer-config: "
        + json.dumps({**KVTOOL, "kv_connector_extra_config": extra}).replace('"@"', HUGE_TEXT)
        + "\n"
    )
    result = kvtool_cli(
        "audit", "--vllm-version", "0.32.0", "--", "vllm", "serve", "m", "--config", str(config)
    )
    _no_traceback(result)


def test_helm_values_with_1e400(kvtool_cli: Cli, tmp_path: Path) -> None:
    # production-stack's values.yaml shape (vllm-project/production-stack, helm/values.yaml).
    values = tmp_path / "values.yaml"
    values.write_text(
        "servingEngineSpec:\n  modelSpec:\n  - name: m\n    repository: vllm/vllm-openai\n"
        "    tag: v0.32.0\n    modelURL: m\n    requestMemory: \"1e400\"\n"
        "    replicaCount: 1e400\n    vllmConfig:\n      maxModelLen: 1e400\n"
        "      gpuMemoryUtilization: 1e400\n    lmcacheConfig:\n      enabled: true\n"
        "      cpuOffloadingBufferSize: \"1e400\"\n"
    )
    _no_traceback(kvtool_cli("audit", str(values)))


class _DevServer(http.server.BaseHTTPRequestHandler):
    """A vLLM API server in development mode, as far as ``audit --url`` reads one (routes
    of vllm/entrypoints/openai/api_server.py at v0.32.0), its transfer config hostile."""

    def do_GET(self) -> None:
        transfer = _transfer("kvtool.fifo.threshold", str(HUGE_INT)[:401])
        answers = {
            "/version": '{"version": "0.32.0"}',
            "/v1/models": '{"data": [{"id": "m", "root": "m", "max_model_len": 1e400}]}',
            "/metrics": "",
            "/server_info": '{"vllm_config": {"kv_transfer_config": ' + transfer + ","
            ' "cache_config": {"gpu_memory_utilization": 1e400, "block_size": '
            + HUGE_TEXT + "}}}",
        }
        body = answers.get(self.path.split("?")[0], "").encode()
        self.send_response(200 if self.path.split("?")[0] in answers else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def dev_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DevServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_server_info_with_huge_numbers(kvtool_cli: Cli, dev_server: str) -> None:
    _no_traceback(kvtool_cli("audit", "--url", dev_server))


@pytest.mark.parametrize("interval", ["1e20", "nan", "inf", HUGE_TEXT, "-1"])
def test_verify_interval_is_bounded(kvtool_cli: Cli, interval: str) -> None:
    result = kvtool_cli("verify", "--metrics-url", "http://127.0.0.1:9/m", "--interval", interval)
    assert result.exit_code == 2 and "--interval" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
