"""One rule for output: a value from input, a file name, a server or a log reaches no
stream raw. Control sequences are shown escaped, nothing from input starts a line with
``::`` (a GitHub Actions workflow command) on stdout or stderr, a non-UTF-8 file name
is a SARIF URI, and escaping stays linear on long backslash runs."""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtool.releases import available_versions
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
ESC = "\x1b[2J\x1b[H"
WORKFLOW = "::add-mask::x"  # a line starting like this is a command to the Actions runner
SCRIPT = "vllm serve m --calculate-kv-scales --kv-offloading-size 10\n"


def _clean(*streams: str) -> None:
    for stream in streams:
        assert "\x1b" not in stream and "\x9b" not in stream, stream
        for line in stream.splitlines():
            assert not line.lstrip().startswith("::") or line.startswith(
                ("::error ", "::warning ", "::notice ")
            ), line


def test_skipped_file_names_are_escaped(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.sh").write_text(SCRIPT)
    (tmp_path / f"notes{ESC}\n{WORKFLOW}.yaml").write_text("just: data\n")
    result = kvtool_cli("audit", ".", "--vllm-version", "0.32.0", "-v")
    assert result.exit_code == 1, result.stderr
    _clean(result.stdout, result.stderr)
    assert "\\x1b[2J" in result.stderr  # still visible


@pytest.mark.parametrize("command", ["audit-diff", "audit-fix", "upgrade-diff", "upgrade-fix"])
def test_diffs_escape_file_content_and_names(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.chdir(tmp_path)
    older, newest = available_versions()[-2], available_versions()[-1]
    name = f"run\n{WORKFLOW}\n+++ other.sh{ESC}.sh"
    (tmp_path / name).write_text(
        f"#!/bin/sh\n# {ESC}All checks passed\n{WORKFLOW}\n"
        f"docker run vllm/vllm-openai:v{older} m --calculate-kv-scales "
        "--disable-hybrid-kv-cache-manager\n"
    )
    tool, mode = command.split("-")
    if tool == "audit":
        result = kvtool_cli("audit", name, "--vllm-version", newest, f"--{mode}")
    else:
        result = kvtool_cli("upgrade", name, "--to", newest, f"--{mode}")
    assert result.exit_code in (0, 1), result.stderr
    _clean(result.stdout, result.stderr)
    assert not any(
        line.startswith("+++ other.sh") for line in (result.stdout + result.stderr).splitlines()
    )


def test_github_output_keeps_input_inside_its_annotation(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    name = f"{WORKFLOW}.sh"
    (tmp_path / name).write_text(
        f"vllm serve m --no-such-flag-\u2028{WORKFLOW} --served-model-name '\n{WORKFLOW}'\n"
    )
    result = kvtool_cli(
        "audit", name, "--vllm-version", "0.32.0", "--output-format", "github", "-v"
    )
    assert result.exit_code == 1, result.stderr
    _clean(result.stdout, result.stderr)
    assert all(line.startswith("::") for line in result.stdout.splitlines())


class _HostileServer(http.server.BaseHTTPRequestHandler):
    """vLLM's OpenAI-compatible routes (vllm/entrypoints/openai/api_server.py at v0.32.0)
    answering with a model id that tries to drive the terminal and the CI runner."""

    def do_GET(self) -> None:
        model = f"{ESC}\n{WORKFLOW}"
        answers = {
            "/version": {"version": "0.32.0"},
            "/v1/models": {"data": [{"id": model, "root": model, "max_model_len": 4096}]},
        }
        path = self.path.split("?")[0]
        body = json.dumps(answers[path]).encode() if path in answers else b""
        self.send_response(200 if path in answers or path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hostile_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("output_format", ["text", "github", "json"])
def test_a_live_servers_model_id_is_escaped(
    kvtool_cli: Cli, hostile_server: str, output_format: str
) -> None:
    result = kvtool_cli("audit", "--url", hostile_server, "-v", "--output-format", output_format)
    assert result.exit_code in (0, 1), result.stderr
    _clean(result.stdout, result.stderr)


def test_a_connector_name_from_the_log_is_escaped(kvtool_cli: Cli, tmp_path: Path) -> None:
    # The line vLLM's KVConnectorFactory logs (vllm/distributed/kv_transfer/kv_connector/
    # factory.py at v0.32.0), the name carrying a control sequence.
    log = tmp_path / "engine.log"
    log.write_text(f"INFO Creating v1 connector with name: Evil{ESC}::error::x and role\n")
    metrics = tmp_path / "m.prom"
    metrics.write_text("vllm:prefix_cache_queries_total 1\n")
    result = kvtool_cli("verify", "--before", str(metrics), "--after", str(metrics),
                        "--log", str(log))  # fmt: skip
    assert result.exit_code in (0, 1), result.stderr
    _clean(result.stdout, result.stderr)


def test_a_non_utf8_file_name_does_not_abort_sarif(
    kvtool_cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.sh").write_text(SCRIPT)
    with open(os.fsencode(tmp_path) + b"/serve\xff.sh", "wb") as handle:
        handle.write(SCRIPT.encode())
    result = kvtool_cli("audit", ".", "--vllm-version", "0.32.0", "--output-format", "sarif",
                        "-o", "out.sarif")  # fmt: skip
    assert result.exit_code == 1, result.stderr
    sarif = json.loads((tmp_path / "out.sarif").read_text())
    uris = {
        loc["physicalLocation"]["artifactLocation"]["uri"]
        for run in sarif["runs"] for r in run["results"] for loc in r.get("locations", [])
    }  # fmt: skip
    assert {"ok.sh", "serve%FF.sh"} <= uris


def test_text_report_escaping_is_linear_on_backslash_runs(kvtool_cli: Cli, tmp_path: Path) -> None:
    # 100 KB of backslashes in a flag's name, single-quoted so the shell keeps them all,
    # followed by no markup tag (the regex then fails at every position of the run):
    # rich's markup escaping took ~15 s on this before (quadratic); linear escaping takes
    # well under a second.
    script = tmp_path / "run.sh"
    run = "\\" * 100_000
    script.write_text(f"vllm serve m --calculate-kv-scales '--bogus{run}=1' '--x[bold]'\n")
    started = time.monotonic()
    result = kvtool_cli("audit", str(script), "--vllm-version", "0.32.0")
    assert time.monotonic() - started < 5
    assert result.exit_code == 1, result.stderr
    assert "[bold]" in result.stdout  # brackets from input shown as written
