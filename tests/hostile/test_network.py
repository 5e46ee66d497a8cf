"""Hostile servers: bodies and transfers are bounded, garbage is a verdict of unknown,
and a registry's challenge cannot steer credentials to an arbitrary host."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kvtool.image.auth import Credentials
from kvtool.image.inspect import InspectRequest, ReadOptions, inspect
from tests.image.images import Image
from tests.image.test_mock_registry import REPOSITORY, FakeHub


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers 200 and then one byte a second, forever (or a huge body on /huge)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.end_headers()
        if self.path == "/huge":
            chunk = b"# padding\n" * 10_000
            for _ in range(1000):  # 100 MB, far over the small cap the test sets
                try:
                    self.wfile.write(chunk)
                except OSError:
                    return
            return
        for _ in range(120):
            try:
                self.wfile.write(b"#")
                self.wfile.flush()
            except OSError:
                return
            time.sleep(1)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def trickle_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_one_byte_a_second_metrics_server_ends_at_the_deadline(
    kvtool_cli: Any, trickle_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_HTTP_DEADLINE_S", "2")
    started = time.monotonic()
    result = kvtool_cli("verify", "--metrics-url", f"{trickle_server}/metrics")
    assert time.monotonic() - started < 10
    assert result.exit_code == 2 and "http_deadline_s" in result.stderr


def test_a_huge_metrics_body_is_cut_at_the_cap(
    kvtool_cli: Any, trickle_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_HTTP_BODY_BYTES", "1000000")
    result = kvtool_cli("verify", "--metrics-url", f"{trickle_server}/huge")
    assert result.exit_code == 2 and "http_body_bytes" in result.stderr


@pytest.mark.parametrize("url", ["http://[::1", "ht!tp://x/metrics", "http://:99999/metrics"])
def test_malformed_urls_are_one_line_errors(kvtool_cli: Any, url: str) -> None:
    result = kvtool_cli("verify", "--metrics-url", url)
    assert result.exit_code == 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize("interval", ["nan", "inf", "-1"])
def test_interval_must_be_finite_and_positive(kvtool_cli: Any, interval: str) -> None:
    url = "http://127.0.0.1:9/metrics"
    result = kvtool_cli("verify", "--metrics-url", url, "--interval", interval)
    assert result.exit_code == 2 and "--interval" in result.stderr


def _inspect(hub: Any, **read: Any) -> Any:
    options = ReadOptions(transport=httpx.MockTransport(hub), use_cache=False, **read)
    return inspect(InspectRequest(image="vllm/vllm-openai:v0.32.0", read=options))


@pytest.mark.parametrize(
    "body",
    [b'{"schemaVersion": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe"],
    ids=["huge-integer", "deep", "not-utf8"],
)
def test_garbage_manifests_give_unknown_and_exit_2(body: bytes) -> None:
    hub = FakeHub([Image(arch="amd64", kv=True)])

    def garbage(request: httpx.Request) -> httpx.Response | None:
        if "/manifests/" in request.url.path and request.headers.get("authorization"):
            return httpx.Response(200, content=body, headers={"content-type": "application/json"})
        return None

    hub.overrides.append(garbage)
    report = _inspect(hub)
    assert report.exit_code == 2
    assert {v.verdict for v in report.verdicts} == {"unknown"}


@pytest.mark.parametrize(
    ("realm", "gets_credentials"),
    [
        ("http://evil.example/token", False),
        ("https://auth.docker.io/token", True),
        ("http://registry-1.docker.io:5001/token", True),
    ],
)
def test_credentials_go_only_to_https_or_same_host_realms(
    realm: str, gets_credentials: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = FakeHub([Image(arch="amd64", kv=True)])
    realm_host = httpx.URL(realm).host

    def challenge_with_realm(request: httpx.Request) -> httpx.Response | None:
        if request.url.host == realm_host and request.url.path == "/token":
            return httpx.Response(200, json={"token": "hub-token"})
        if request.headers.get("authorization") != "Bearer hub-token":
            return httpx.Response(
                401,
                headers={
                    "www-authenticate": f'Bearer realm="{realm}",service="s",'
                    f'scope="repository:{REPOSITORY}:pull"'
                },
            )
        return None

    hub.overrides.append(challenge_with_realm)
    _inspect(hub, credentials=Credentials(username="user", password="secret"))
    token_requests = [r for r in hub.seen if r.url.host == realm_host and r.url.path == "/token"]
    assert token_requests
    sent = {"authorization" in r.headers for r in token_requests}
    assert sent == {gets_credentials}
    assert ("not sending credentials" in capsys.readouterr().err) is not gets_credentials


def test_registry_text_is_inert_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from kvtool.image.render import render_text
    from tests.image import test_mock_registry

    hostile = "\x1b[2J[bold]All checks passed"
    monkeypatch.setitem(test_mock_registry.LIMIT_HEADERS, "docker-ratelimit-source", hostile)
    report = _inspect(FakeHub([Image(arch="amd64", kv=True)]))
    out = io.StringIO()
    render_text(report, Console(file=out, force_terminal=True, width=300))
    shown = out.getvalue()
    assert "\x1b[2J" not in shown and "\\x1b[2J[bold]All checks passed" in shown


def test_a_trickling_registry_ends_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_HTTP_DEADLINE_S", "1")
    hub = FakeHub([Image(arch="amd64", kv=True)])

    def trickle() -> Iterator[bytes]:
        for _ in range(60):
            time.sleep(0.2)
            yield b" "

    def slow_manifest(request: httpx.Request) -> httpx.Response | None:
        if "/manifests/" in request.url.path and request.headers.get("authorization"):
            return httpx.Response(200, content=trickle(), headers={"content-type": "x"})
        return None

    hub.overrides.append(slow_manifest)
    started = time.monotonic()
    report = _inspect(hub)
    assert time.monotonic() - started < 8
    assert report.exit_code == 2
    assert {v.verdict for v in report.verdicts} == {"unknown"}


def test_a_trickling_server_ends_audit_url_at_its_timeout(
    kvtool_cli: Any, trickle_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtool.audit import live

    monkeypatch.setattr(live, "TIMEOUT_S", 2.0)
    started = time.monotonic()
    result = kvtool_cli("audit", "--url", trickle_server)
    assert time.monotonic() - started < 10
    assert result.exit_code == 2 and "within 2 s" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://127.0.0.1:99999",
        "http://h:port/",
        "http://999.999.999.999:1/",  # httpx.InvalidURL, which is no httpx.HTTPError
        "http://\x01/",
    ],
)
def test_malformed_audit_urls_name_the_option(kvtool_cli: Any, url: str) -> None:
    result = kvtool_cli("audit", "--url", url)
    assert result.exit_code == 2 and "--url" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("length", [b"9" * 5000, b"\xb2"], ids=["huge", "superscript-two"])
def test_a_garbage_content_length_gives_unknown(length: bytes) -> None:
    # int() refused both (Python's digit guard; "²" passes str.isdigit): a ValueError
    # escaped the inspection instead of a verdict.
    hub = FakeHub([Image(arch="amd64", kv=True)])

    def garbage(request: httpx.Request) -> httpx.Response | None:
        if "/manifests/" in request.url.path and request.headers.get("authorization"):
            headers = [(b"content-type", b"application/json"), (b"content-length", length)]
            return httpx.Response(200, content=b"{}", headers=headers)
        return None

    hub.overrides.append(garbage)
    report = _inspect(hub)
    assert report.exit_code == 2
    assert {v.verdict for v in report.verdicts} == {"unknown"}
