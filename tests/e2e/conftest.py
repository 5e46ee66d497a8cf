"""Fixtures for the end-to-end tests: the vLLM environment, the tiny model and the
vLLM API servers the tests share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.engine_checks import BLOCK_SIZE
from tests.vllm_env import REPO_ROOT, vllm_python, vllm_subprocess_env


@pytest.fixture(scope="session")
def vllm_py() -> Path:
    """The vLLM environment's python (the test is skipped when it is missing)."""
    return vllm_python()


@pytest.fixture(scope="session")
def vllm_scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's model-info cache for this session, out of the user's home."""
    return tmp_path_factory.mktemp("vllm-scratch")


@pytest.fixture(scope="session")
def tiny_model(vllm_py: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline tiny Llama of scripts/build_tiny_model.py, built once per session."""
    out = tmp_path_factory.mktemp("tiny-model")
    subprocess.run(
        [str(vllm_py), str(REPO_ROOT / "scripts" / "build_tiny_model.py"), str(out)],
        check=True, capture_output=True, text=True, timeout=300, env=vllm_subprocess_env(),
    )
    return out


READY_TIMEOUT_S = 240.0
# 64 MiB host store: 4096 blocks of the tiny model's 16 KiB.
CPU_TIER_GIB = "0.0625"
MAX_MODEL_LEN = 512
# The serve flags every server of this suite runs the tiny model with.
SERVE_ARGS = (
    "--dtype", "bfloat16", "--block-size", str(BLOCK_SIZE), "--enforce-eager",
    "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "8", "--served-model-name", "tiny",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def launch_script(tiny_model: Path, vllm_py: Path, port: int, *serve_args: str) -> str:
    """The shell script `kvtool launch kvtool-connector-eviction-aware --target shell` emits
    for the tiny model (run in a subprocess: session fixtures have no capsys)."""
    emitted = subprocess.run(
        [sys.executable, "-c", "from kvtool.cli import main; main()",
         "launch", "kvtool-connector-eviction-aware",
         "--model", str(tiny_model), "--vllm-version", "0.32.0",
         "--cpu-tier-gib", CPU_TIER_GIB, "--entrypoint", "module", "--python", str(vllm_py),
         "--port", str(port), "--target", "shell", "--", *serve_args],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )
    assert emitted.returncode == 0, emitted.stderr
    return emitted.stdout


@contextmanager
def running_server(script: Path, port: int, env: dict[str, str]) -> Iterator[str]:
    """Run ``script`` (which execs a vLLM API server on ``port``) until it is healthy;
    yield its base URL and stop it afterwards."""
    log_path = script.with_suffix(".log")
    with log_path.open("w") as log:
        proc = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n"
                            f"{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready in {READY_TIMEOUT_S:.0f} s:\n"
                            f"{log_path.read_text()[-4000:]}")
            time.sleep(1)
        yield base
    finally:
        # The script execs python in a session of its own: signal that group only.
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


@pytest.fixture(scope="session")
def kvtool_connector_server(
    tiny_model: Path, vllm_py: Path, vllm_scratch: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """One server from `kvtool launch kvtool-connector-*` for the whole session (starting
    one takes minutes): test_api_server.py and the audit --url tests share it.

    Development mode enables POST /reset_prefix_cache and /server_info; the audit tests
    hide /server_info behind a proxy where they need a production-like server.
    """
    port = free_port()
    script = tmp_path_factory.mktemp("kvtool-connector-server") / "serve.sh"
    script.write_text(launch_script(tiny_model, vllm_py, port, *SERVE_ARGS,
                                    "--enable-prompt-tokens-details"))
    env = vllm_subprocess_env(vllm_scratch)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    with running_server(script, port, env) as base:
        yield base
