"""The shipped examples/ through the real CLI: what an operator sees on the README demo."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtool.releases import available_versions
from tests.conftest import REPO_ROOT, CliResult

EXAMPLES = REPO_ROOT / "examples"
Cli = Callable[..., CliResult]


def codes(result: CliResult) -> set[str]:
    return {f["code"] for f in json.loads(result.stdout)["findings"]}


@pytest.mark.parametrize("path", sorted(EXAMPLES.iterdir()), ids=lambda p: p.name)
def test_every_example_audits_without_a_usage_error(kvtool_cli: Cli, path: Path) -> None:
    result = kvtool_cli("audit", str(path), "--vllm-version", "0.32.0", "--output-format", "json")
    assert result.exit_code in (0, 1), result.stderr
    assert json.loads(result.stdout)["invocations"]


def test_clean_example_has_no_findings(kvtool_cli: Cli) -> None:
    # On the newest release: 0.26.0-0.32.0 carry a known OffloadingConnector crash after
    # preemption (rules/bugs/vllm.toml, KB-VLLM-52211), which SC002 rightly reports there.
    path = EXAMPLES / "native-offload-clean.sh"
    newest = available_versions()[-1]
    result = kvtool_cli("audit", str(path), "--vllm-version", newest, "--output-format", "json")
    assert result.exit_code == 0 and codes(result) == set()


def test_lmcache_tp4_example_on_0_32_0(kvtool_cli: Cli) -> None:
    # The example's own comments name its problems: a removed flag (vg §4 row 3), a size the
    # lmcache backend ignores from 0.23.0 (row 27), a per-GPU LMCache env var the MP server
    # never reads (sizing.md §4.4 item 1), and no PYTHONHASHSEED with TP 4.
    path = EXAMPLES / "lmcache-tp4.sh"
    result = kvtool_cli("audit", str(path), "--vllm-version", "0.32.0", "--output-format", "json")
    assert result.exit_code == 1
    assert {"VG002", "CN005", "SZ005", "CN020", "CN010"} <= codes(result)


def test_lmcache_tp4_example_on_0_22_0_is_the_in_process_connector(kvtool_cli: Cli) -> None:
    # On 0.22.x the lmcache backend is LMCacheConnectorV1 and vLLM passes size/TP per rank
    # (vg §4 row 27), so the same script reads differently.
    path = EXAMPLES / "lmcache-tp4.sh"
    result = kvtool_cli("audit", str(path), "--vllm-version", "0.22.0", "--output-format", "json")
    found = codes(result)
    assert "SZ003" in found and "SZ001" in found
    assert "CN005" not in found and "VG002" not in found
