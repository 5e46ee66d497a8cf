"""Text, GitHub and SARIF findings name the object they are about, as kube-linter does
(``Kind/name container c`` for a manifest, the service for compose), and the summary counts
what ``--fix`` can edit away, as ruff does.

The removed flag is looked up in the release index, never typed in. The manifest is the
shape of vLLM's own Kubernetes example (https://docs.vllm.ai/en/latest/deployment/k8s.html:
a Deployment whose container runs ``vllm serve`` through ``command``/``args``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kvtool.releases import available_versions
from tests.conftest import CliResult
from tests.release_facts import removed_value_flags

Cli = Callable[..., CliResult]


def _removed_flag() -> tuple[str, str]:
    """A value-taking flag gone by the newest release, and the newest release."""
    return removed_value_flags()[0], available_versions()[-1]


def _manifest(tmp_path: Path, flag: str) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: qwen-server\nspec:\n"
        "  template:\n    spec:\n      containers:\n        - name: engine\n"
        "          image: vllm/vllm-openai:latest\n"
        '          command: ["vllm", "serve"]\n'
        f'          args: ["Qwen/Qwen3-8B", "{flag}", "4"]\n',
        encoding="utf-8",
    )
    return path


def test_each_format_names_the_manifest_object(kvtool_cli: Cli, tmp_path: Path) -> None:
    flag, newest = _removed_flag()
    path = _manifest(tmp_path, flag)
    text = kvtool_cli("audit", str(path), "--vllm-version", newest)
    (line,) = [row for row in text.stdout.splitlines() if flag in row and " error " in row]
    assert line.startswith(f"{path}:12:")
    assert ": Deployment/qwen-server container engine: " in line
    github = kvtool_cli("audit", str(path), "--vllm-version", newest, "--output-format", "github")
    assert "::Deployment/qwen-server container engine: " in github.stdout
    sarif = json.loads(
        kvtool_cli("audit", str(path), "--vllm-version", newest, "--output-format", "sarif").stdout
    )
    names = {
        logical["fullyQualifiedName"]
        for result in sarif["runs"][0]["results"]
        for location in result.get("locations", [])
        for logical in location.get("logicalLocations", [])
    }
    assert names == {"Deployment/qwen-server container engine"}


def test_a_script_finding_names_no_object(kvtool_cli: Cli, tmp_path: Path) -> None:
    flag, newest = _removed_flag()
    script = tmp_path / "serve.sh"
    script.write_text(f"vllm serve Qwen/Qwen3-8B {flag} 4\n", encoding="utf-8")
    text = kvtool_cli("audit", str(script), "--vllm-version", newest)
    (line,) = [row for row in text.stdout.splitlines() if flag in row and " error " in row]
    assert line.startswith(f"{script}:1:") and f"{script}:1:" + line.split(":")[2] + ": VG" in line


def test_summary_counts_what_fix_can_edit(kvtool_cli: Cli, tmp_path: Path) -> None:
    flag, newest = _removed_flag()
    script = tmp_path / "serve.sh"
    script.write_text(f"vllm serve Qwen/Qwen3-8B {flag} 4\n", encoding="utf-8")
    before = kvtool_cli("audit", str(script), "--vllm-version", newest)
    assert "; 1 fixable with --fix" in before.stderr
    kvtool_cli("audit", str(script), "--vllm-version", newest, "--fix")
    after = kvtool_cli("audit", str(script), "--vllm-version", newest)
    assert "fixable" not in after.stderr and after.exit_code == 0
