"""The OpenAI-compatible server started from `kvtool launch kvtool-connector-* --target shell`.

The server runs in vLLM's default multiprocess layout (API process, EngineCore
with the scheduler-side connector, a worker with the worker-side connector),
so this also checks the production topology that engine_checks.py does not.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.engine_checks import BLOCK_SIZE, shared_prefix_prompts
from tests.vllm_env import vllm_subprocess_env

pytestmark = pytest.mark.vllm

READY_TIMEOUT_S = 240.0
# 64 MiB host store: 4096 blocks of the tiny model's 16 KiB.
CPU_TIER_GIB = "0.0625"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def metric_total(metrics_text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets) in a Prometheus text page."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(metrics_text))


@pytest.fixture
def server(
    kvtool_cli, tiny_model: Path, vllm_py: Path, vllm_scratch: Path, tmp_path: Path  # type: ignore[no-untyped-def]
) -> Iterator[str]:
    port = free_port()
    emitted = kvtool_cli(
        "launch", "kvtool-connector-eviction-aware",
        "--model", str(tiny_model), "--vllm-version", "0.32.0",
        "--cpu-tier-gib", CPU_TIER_GIB, "--entrypoint", "module", "--python", str(vllm_py),
        "--port", str(port), "--target", "shell",
        "--", "--dtype", "bfloat16", "--block-size", str(BLOCK_SIZE), "--enforce-eager",
        "--max-model-len", "512", "--max-num-seqs", "8", "--served-model-name", "tiny",
        "--enable-prompt-tokens-details",
    )
    assert emitted.exit_code == 0, emitted.stderr
    script = tmp_path / "serve.sh"
    script.write_text(emitted.stdout)
    log_path = tmp_path / "server.log"
    env = vllm_subprocess_env(vllm_scratch)
    env["VLLM_SERVER_DEV_MODE"] = "1"  # enables POST /reset_prefix_cache
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


def complete(base: str, prompt: list[int]) -> tuple[list[int], int]:
    reply = httpx.post(
        f"{base}/v1/completions",
        json={"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0.0,
              "ignore_eos": True, "return_token_ids": True},
        timeout=60,
    )
    reply.raise_for_status()
    body = reply.json()
    details = body["usage"].get("prompt_tokens_details") or {}
    return body["choices"][0]["token_ids"], int(details.get("cached_tokens") or 0)


def wait_until_drained(base: str, timeout_s: float = 60.0) -> str:
    """The connector's gauges on /metrics read zero and something was stored."""
    deadline = time.monotonic() + timeout_s
    while True:
        page = httpx.get(f"{base}/metrics", timeout=10).text
        if (metric_total(page, "kvtool:stored_total") > 0
                and metric_total(page, "kvtool:pending") == 0
                and metric_total(page, "kvtool:in_flight") == 0):
            return page
        if time.monotonic() > deadline:
            pytest.fail("the connector never drained; kvtool metrics:\n" + "\n".join(
                line for line in page.splitlines() if line.startswith("kvtool:")))
        time.sleep(0.5)


def test_launched_server_serves_repeated_prompts_from_the_host_store(server: str) -> None:
    prompt = shared_prefix_prompts()[2]
    first_tokens, first_cached = complete(server, prompt)
    assert first_cached == 0
    # The engine keeps stepping while blocks are buffered (has_pending_push_work),
    # so the idle drain stores them without further traffic.
    wait_until_drained(server)
    assert httpx.post(f"{server}/reset_prefix_cache", timeout=30).status_code == 200

    tokens, cached = complete(server, prompt)
    assert tokens == first_tokens
    assert cached == (len(prompt) - 1) // BLOCK_SIZE * BLOCK_SIZE
    page = httpx.get(f"{server}/metrics", timeout=10).text
    assert metric_total(page, "vllm:external_prefix_cache_hits_total") == cached
    assert metric_total(page, "kvtool:loaded_total") == cached // BLOCK_SIZE
