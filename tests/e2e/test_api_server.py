"""The OpenAI-compatible server started from `kvtool launch kvtool-connector-* --target shell`.

The server runs in vLLM's default multiprocess layout (API process, EngineCore
with the scheduler-side connector, a worker with the worker-side connector),
so this also checks the production topology that engine_checks.py does not.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.e2e.engine_checks import BLOCK_SIZE, shared_prefix_prompts

pytestmark = pytest.mark.vllm


def metric_total(metrics_text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets) in a Prometheus text page."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.MULTILINE)
    return sum(float(value) for value in pattern.findall(metrics_text))


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


def test_launched_server_serves_repeated_prompts_from_the_host_store(
    kvtool_connector_server: str,
) -> None:
    server = kvtool_connector_server
    prompt = shared_prefix_prompts()[2]
    # The server is shared with other tests: count from what it had served before.
    start = httpx.get(f"{server}/metrics", timeout=10).text
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
    for name, expected in (("vllm:external_prefix_cache_hits_total", cached),
                           ("kvtool:loaded_total", cached // BLOCK_SIZE)):
        assert metric_total(page, name) - metric_total(start, name) == expected, name
