"""``kvtool size --vllm-python PATH`` shows the figures that vLLM's own code computes.

Run with the suite's newest vLLM environment: asked for the release it runs, kvtool's
arithmetic and vLLM's agree and nothing is flagged; asked about 0.32.0 while the python
runs a newer release, the block size (``CacheConfig.DEFAULT_BLOCK_SIZE`` 16 at 0.32.0, a
different default later, read from the wheels) differs and the report says so, figure by
figure, showing vLLM's.
"""

from __future__ import annotations

import json

import pytest

from tests.vllm_env import harness_environments, vllm_subprocess_env

pytestmark = pytest.mark.vllm


def _size(kvtool_cli, monkeypatch, python: str, *extra: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    for key, value in vllm_subprocess_env().items():
        monkeypatch.setenv(key, value)
    result = kvtool_cli(
        "size", "--model", "gpt-oss-120b", "--gpu-kv-gib", "10", "--context-len", "8192",
        "--cpu-tier-gib", "50", "--vllm-python", python, "--output-format", "json", *extra,
    )
    assert result.exit_code == 0, result.stderr
    report: dict = json.loads(result.stdout)  # type: ignore[type-arg]
    return report


def test_vllm_python_figures_are_vllms_and_differences_are_named(kvtool_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    newest = harness_environments()[1]
    python = str(newest.usable_python())
    same = _size(kvtool_cli, monkeypatch, python)
    assert same["vllm_release"] == newest.release
    assert [w for w in same["warnings"] if w["code"] == "differs-from-vllm"] == []
    older = _size(kvtool_cli, monkeypatch, python, "--vllm-version", "0.32.0")
    named = {w["message"].split(":")[0] for w in older["warnings"]
             if w["code"] == "differs-from-vllm"}
    assert "block_size" in named
    assert older["block_size"] == same["block_size"]  # vLLM's, not kvtool's 0.32 figure
