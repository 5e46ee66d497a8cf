"""The output contract of every command (kvtool.output): JSON documents with
schema_version that validate against the schemas published under docs/schemas/, text
reports on stdout, nothing cut when piped, and no escape code under NO_COLOR on a
terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from kvtool.output.kinds import REPORT_KINDS, document_schema, report_kind
from kvtool.releases import available_versions
from tests.conftest import REPO_ROOT, CliResult
from tests.image.images import Image, docker_save

Cli = Callable[..., CliResult]

SCHEMAS = REPO_ROOT / "docs" / "schemas"
VERIFY_DATA = REPO_ROOT / "tests" / "verify" / "data"
LAUNCH_MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # an alias of llama-3.1-8b in the catalog
SERVE_SCRIPT = "#!/bin/sh\nvllm serve m --kv-offloading-size 100 --calculate-kv-scales\n"


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """One invocation per report kind (the arguments after ``kvtool``)."""
    monkeypatch.chdir(tmp_path)  # no settings file above the working directory
    (tmp_path / "serve.sh").write_text(SERVE_SCRIPT)
    archive = tmp_path / "image.tar"
    docker_save(archive, Image(style="classic", kv=True), "docker.io/vllm/vllm-openai:v0.32.0",
                "legacy")
    newest = available_versions()[-1]
    return {
        "audit": ["audit", "serve.sh", "--exit-zero", "--vllm-version", newest],
        "rule": ["rule", "CN010"],
        "size": ["size", "--model", "llama-3.1-8b", "--sessions", "4"],
        "verify": ["verify", "--before", str(VERIFY_DATA / "vllm-0.32.0-cpu-before.prom"),
                   "--after", str(VERIFY_DATA / "vllm-0.32.0-cpu-after.prom")],
        "simulate": ["simulate", "--num-requests", "20", "--policy", "fifo"],
        "inspect-image": ["inspect-image", str(archive)],
        "launch": ["launch", "native-cpu-offload", "--model", LAUNCH_MODEL,
                   "--host-ram-gib", "64", "--vllm-version", newest],
        "launch-list": ["launch", "--list"],
        "flag": ["flag", "--kv-offloading-size"],
        "upgrade": ["upgrade", "serve.sh", "--from", available_versions()[0], "--to", newest,
                    "--exit-zero"],
    }


def test_every_report_kind_has_an_invocation_here(inputs: dict[str, list[str]]) -> None:
    assert set(inputs) == set(REPORT_KINDS)


@pytest.mark.parametrize("kind", sorted(REPORT_KINDS))
def test_committed_schema_is_generated_from_the_code(kind: str) -> None:
    committed = json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))
    assert committed == document_schema(report_kind(kind)), (
        f"docs/schemas/{kind}.schema.json is stale: run python scripts/gen_schemas.py"
    )
    jsonschema.Draft202012Validator.check_schema(committed)


@pytest.mark.parametrize("kind", sorted(REPORT_KINDS))
def test_json_document_validates_against_its_published_schema(
    kind: str, inputs: dict[str, list[str]], kvtool_cli: Cli
) -> None:
    result = kvtool_cli(*inputs[kind], "--output-format", "json", "-q")
    assert result.exit_code in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert next(iter(document)) == "schema_version"
    schema = json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(document)


@pytest.mark.parametrize("kind", sorted(REPORT_KINDS))
def test_text_report_goes_to_stdout_and_quiet_leaves_stderr_empty(
    kind: str, inputs: dict[str, list[str]], kvtool_cli: Cli
) -> None:
    result = kvtool_cli(*inputs[kind], "-q")
    assert result.exit_code in (0, 1), result.stderr
    assert result.stdout.strip()
    assert result.stderr == ""


@pytest.mark.parametrize("kind", sorted(REPORT_KINDS))
def test_output_file_holds_what_stdout_would(
    kind: str, inputs: dict[str, list[str]], kvtool_cli: Cli, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    to_stdout = kvtool_cli(*inputs[kind], "--output-format", "json", "-q")
    to_file = kvtool_cli(*inputs[kind], "--output-format", "json", "-q", "-o", str(report))
    assert to_file.exit_code == to_stdout.exit_code
    assert to_file.stdout == ""
    assert json.loads(report.read_text()) == json.loads(to_stdout.stdout)


def test_piped_text_keeps_long_paths_whole(kvtool_cli: Cli, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path.joinpath(*[f"folder-{i:02d}-with-a-long-name" for i in range(6)])
    deep.mkdir(parents=True)
    (deep / "serve.sh").write_text(SERVE_SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "40")
    result = kvtool_cli("audit", str(deep / "serve.sh"), "--exit-zero")
    assert len(str(deep)) > 200
    assert any(line.startswith(f"{deep / 'serve.sh'}:2:") for line in result.stdout.splitlines())


def _on_a_terminal(args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT) -> bytes:
    """What ``kvtool ARGS`` writes to stdout when stdout is a pseudo-terminal."""
    leader, follower = pty.openpty()
    child_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    child_env.update({"TERM": "xterm-256color", "COLUMNS": "120", **env})
    process = subprocess.Popen(
        [sys.executable, "-c", "from kvtool.cli import main; main()", *args],
        stdout=follower, stderr=subprocess.DEVNULL, env=child_env, cwd=cwd,
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=30)
    os.close(leader)
    return b"".join(chunks)


SIZE_ARGS = ["size", "--model", "llama-3.1-8b", "--sessions", "4"]


def test_a_terminal_gets_colour_by_default() -> None:
    """The control for the NO_COLOR checks: without it a terminal gets escape codes."""
    assert b"\x1b[" in _on_a_terminal(SIZE_ARGS, {})


@pytest.mark.parametrize("kind", sorted(REPORT_KINDS))
def test_no_color_on_a_terminal_emits_no_escape_codes(
    kind: str, inputs: dict[str, list[str]], tmp_path: Path
) -> None:
    plain = _on_a_terminal(inputs[kind], {"NO_COLOR": "1"}, cwd=tmp_path)
    assert plain.strip()
    assert b"\x1b" not in plain
    assert b"\x1b" not in _on_a_terminal([*inputs[kind], "--color", "never"], {}, cwd=tmp_path)


def test_force_color_and_color_always_colour_a_pipe(kvtool_cli: Cli,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert "\x1b[" not in kvtool_cli(*SIZE_ARGS).stdout
    assert "\x1b[" in kvtool_cli(*SIZE_ARGS, "--color", "always").stdout
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert "\x1b[" in kvtool_cli(*SIZE_ARGS).stdout
    assert "\x1b[" not in kvtool_cli(*SIZE_ARGS, "--color", "never").stdout


@pytest.mark.parametrize(
    "args",
    [
        ["size", "--model", "llama-3.1-8b", "--output-format", "xml"],
        ["verify", "--color", "sometimes"],
        ["launch", "--list", "--target", "helm"],
        ["simulate", "--policy", "lru"],
        ["audit", "--no-such-option"],
        ["flag", "--kv-offloading-size", "--output-format", "sarif"],
        ["flag", "--kv-offloading-size", "--color", "sometimes"],
        ["upgrade", "serve.sh", "--to", "0.32.0", "--output-format", "xml"],
        ["upgrade", "serve.sh", "--no-such-option"],
    ],
)
def test_bad_option_values_are_one_line_and_exit_2(kvtool_cli: Cli, args: list[str]) -> None:
    result = kvtool_cli(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith("kvtool: error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_launch_text_is_the_config_byte_for_byte(kvtool_cli: Cli, tmp_path: Path) -> None:
    args = ["launch", "native-cpu-offload", "--model", LAUNCH_MODEL, "--host-ram-gib", "64",
            "--vllm-version", available_versions()[-1], "--env", "NOTE=a\tb", "-q"]
    printed = kvtool_cli(*args)
    assert kvtool_cli(*args, "-d", str(tmp_path / "out")).exit_code == 0
    written = "".join(p.read_text() for p in sorted((tmp_path / "out").iterdir()))
    assert "\t" in printed.stdout  # a tab stays a tab (rich would expand it)
    assert printed.stdout == written
