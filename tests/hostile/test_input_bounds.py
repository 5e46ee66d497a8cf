"""Bounds where input chooses the work, second round: a ``.gitignore`` is read like any
input, YAML embedded in a file draws on the file's one node budget, and a valid
Dockerfile using the ``# escape=`` parser directive is read, not refused."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]
SCRIPT = "vllm serve m --calculate-kv-scales\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.sh").write_text(SCRIPT)
    return tmp_path


def _run_bounded(kvtool_cli: Cli, *args: str, seconds: float = 20) -> CliResult:
    """The CLI in a thread, failing the test (not hanging it) past ``seconds``."""
    results: list[CliResult] = []
    worker = threading.Thread(target=lambda: results.append(kvtool_cli(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert results, f"kvtool {' '.join(args)} still running after {seconds} s"
    return results[0]


def test_a_fifo_gitignore_does_not_hang_the_walk(kvtool_cli: Cli, repo: Path) -> None:
    os.mkfifo(repo / ".gitignore")
    result = _run_bounded(kvtool_cli, "audit", ".", "--vllm-version", "0.32.0")
    assert result.exit_code == 2 and ".gitignore" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_gitignore_linked_to_dev_zero_is_refused(kvtool_cli: Cli, repo: Path) -> None:
    (repo / ".gitignore").symlink_to("/dev/zero")
    result = _run_bounded(kvtool_cli, "audit", ".", "--vllm-version", "0.32.0")
    assert result.exit_code == 2 and "not a regular file" in result.stderr, result.stderr


def test_a_gitignore_over_the_size_limit_is_refused(
    kvtool_cli: Cli, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_INPUT_BYTES", "1000")
    (repo / ".gitignore").write_text("# padding\n" * 200)
    result = kvtool_cli("audit", ".", "--vllm-version", "0.32.0")
    assert result.exit_code == 2 and "input_bytes" in result.stderr, result.stderr


def test_sixty_thousand_gitignore_patterns_end_quickly(kvtool_cli: Cli, repo: Path) -> None:
    (repo / ".gitignore").write_text("".join(f"build{n}/out{n}.log\n" for n in range(60_000)))
    started = time.monotonic()
    result = kvtool_cli("audit", ".", "--vllm-version", "0.32.0")
    assert time.monotonic() - started < 5
    assert result.exit_code == 2 and "gitignore_patterns" in result.stderr, result.stderr


def test_a_gitignore_within_the_limits_still_ignores(kvtool_cli: Cli, repo: Path) -> None:
    (repo / "vendor").mkdir()
    (repo / "vendor" / "other.sh").write_text(SCRIPT)
    (repo / ".gitignore").write_text("# generated\nvendor/\n")
    result = kvtool_cli("audit", ".", "--vllm-version", "0.32.0", "--output-format", "json")
    assert result.exit_code == 1, result.stderr
    assert "vendor" not in result.stdout


def _kaito_configmap(name: str, entries: int) -> str:
    """A KAITO inference-config ConfigMap (kaito-project/kaito, examples/inference/
    kaito_workspace_llama3.1_8b_instruct_with_params.yaml) whose embedded YAML holds a
    list of ``entries`` nodes."""
    inner = "vllm:\n  max-model-len: 4096\npadding: [" + ", ".join(["1"] * entries) + "]\n"
    body = "".join(f"    {line}\n" for line in inner.splitlines())
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"
        f"data:\n  inference_config.yaml: |\n{body}"
    )


def test_embedded_yaml_shares_the_files_node_budget(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_YAML_NODES", "1000")
    one = tmp_path / "one.yaml"
    one.write_text(_kaito_configmap("a", 600))
    assert kvtool_cli("audit", str(one), "--vllm-version", "0.32.0").exit_code in (0, 1)
    many = tmp_path / "many.yaml"
    # Each embedded document is under the limit; together they are not.
    many.write_text(_kaito_configmap("a", 600) + "---\n" + _kaito_configmap("b", 600))
    result = kvtool_cli("audit", str(many), "--vllm-version", "0.32.0")
    assert result.exit_code == 2 and "yaml_nodes" in result.stderr, result.stderr


@pytest.mark.parametrize("form", ["exec", "shell"])
def test_a_dockerfile_with_the_backtick_escape_directive_is_read(
    kvtool_cli: Cli, tmp_path: Path, form: str
) -> None:
    # The directive as Docker documents it for Windows images
    # (https://docs.docker.com/reference/dockerfile/#escape): backtick continuations,
    # a backslash as a plain character in a path.
    dockerfile = tmp_path / "Dockerfile"
    command = (
        'CMD ["m", `\n     "--calculate-kv-scales"]\n'
        if form == "exec"
        else "ENTRYPOINT vllm serve m `\n    --calculate-kv-scales\n"
    )
    dockerfile.write_text(
        "# escape=`\n\nFROM vllm/vllm-openai:v0.32.0\nENV HF_HOME=C:\\hf\n" + command
    )
    result = kvtool_cli("audit", str(dockerfile), "--vllm-version", "0.32.0",
                        "--output-format", "json")  # fmt: skip
    assert result.exit_code == 1, result.stderr
    assert "--calculate-kv-scales" in result.stdout
