"""Hostile servers, second round: the deadline covers the header bytes, content codings
cannot inflate a small answer into gigabytes, and a password in a URL is never shown.

Each server here is a raw loopback socket server written for the test, so it can do
what no well-behaved HTTP library would (trickle a status line, stack gzip layers).
"""

from __future__ import annotations

import functools
import gzip
import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

Handler = Callable[[socket.socket], None]


@pytest.fixture
def raw_server() -> Iterator[Callable[[Handler], str]]:
    """``start(handler)`` -> base URL of a loopback server calling ``handler(conn)`` per
    connection after reading the request head."""
    sockets: list[socket.socket] = []

    def start(handler: Handler) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        sockets.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                threading.Thread(target=_answer, args=(conn, handler), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in sockets:
        listener.close()


def _answer(conn: socket.socket, handler: Handler) -> None:
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        try:
            handler(conn)
        except OSError:
            return


def _header_trickle(conn: socket.socket) -> None:
    """A status line and headers one byte every half second: each read succeeds, so a
    per-read timeout never fires."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"a" * 200:
        conn.sendall(bytes([byte]))
        time.sleep(0.5)


@functools.cache
def _bomb() -> bytes:
    """1 GiB of zeros gzipped twice, a few KiB on the wire; built a MiB at a time so the
    test process itself never holds the zeros."""
    inner = io.BytesIO()
    with gzip.GzipFile(fileobj=inner, mode="wb") as layer:
        zeros = b"\0" * (1 << 20)
        for _ in range(1024):
            layer.write(zeros)
    return gzip.compress(inner.getvalue())


def _double_gzip(conn: socket.socket) -> None:
    body = _bomb()
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip, gzip\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _many_codings(conn: socket.socket) -> None:
    body = b"x"
    for _ in range(3):
        body = gzip.compress(body)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip, gzip, gzip\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


@pytest.mark.parametrize(
    "command",
    [["audit", "--url", "{url}"], ["verify", "--metrics-url", "{url}/metrics", "--interval", "1"]],
    ids=["audit-url", "verify"],
)
def test_a_server_trickling_its_headers_ends_at_the_deadline(
    kvtool_cli: Any,
    raw_server: Callable[[Handler], str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_HTTP_DEADLINE_S", "2")
    url = raw_server(_header_trickle)
    started = time.monotonic()
    result = kvtool_cli(*(word.format(url=url) for word in command))
    assert time.monotonic() - started < 8, "the deadline did not cover the header bytes"
    assert result.exit_code == 2 and "http_deadline_s" in result.stderr, result.stderr


def test_a_registry_trickling_its_headers_ends_at_the_deadline(
    kvtool_cli: Any, raw_server: Callable[[Handler], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVTOOL_LIMIT_HTTP_DEADLINE_S", "2")
    host = raw_server(_header_trickle).removeprefix("http://")  # loopback: plain HTTP
    started = time.monotonic()
    result = kvtool_cli("inspect-image", f"{host}/vllm/vllm-openai:v0.32.0", "--no-cache")
    assert time.monotonic() - started < 8, "the deadline did not cover the header bytes"
    assert result.exit_code == 2 and "http_deadline_s" in result.stdout + result.stderr


def test_stacked_gzip_is_decoded_within_the_body_cap(
    kvtool_cli: Any, raw_server: Callable[[Handler], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import resource

    monkeypatch.setenv("KVTOOL_LIMIT_HTTP_BODY_BYTES", "1000000")
    url = raw_server(_double_gzip)
    _bomb()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = kvtool_cli("verify", "--metrics-url", f"{url}/metrics", "--interval", "1")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.exit_code == 2 and "http_body_bytes" in result.stderr, result.stderr
    assert grown_kib < 32 * 1024, f"decoding grew the process by {grown_kib} KiB"


def test_more_content_codings_than_a_proxy_makes_are_refused(
    kvtool_cli: Any, raw_server: Callable[[Handler], str]
) -> None:
    url = raw_server(_many_codings)
    result = kvtool_cli("audit", "--url", url)
    assert result.exit_code == 2 and "content codings" in result.stderr, result.stderr


def test_a_url_password_is_never_shown(
    kvtool_cli: Any, raw_server: Callable[[Handler], str]
) -> None:
    def refuse(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")

    url = raw_server(refuse).replace("http://", "http://operator:hunter2-secret@")
    audited = kvtool_cli("audit", "--url", url)
    verified = kvtool_cli("verify", "--metrics-url", f"{url}/metrics", "--interval", "1")
    closed = kvtool_cli("verify", "--metrics-url", "http://u:hunter2-secret@127.0.0.1:9/m")
    for result in (audited, verified, closed):
        assert result.exit_code == 2, result.stderr
        assert "hunter2" not in result.stdout + result.stderr
        assert "operator:***@" in result.stderr or "u:***@" in result.stderr
    # A token in the query (presigned URLs, ?access_token=) is a secret too.
    queried = kvtool_cli("verify", "--metrics-url", "http://127.0.0.1:9/m?access_token=hunter2")
    assert queried.exit_code == 2 and "hunter2" not in queried.stderr, queried.stderr


def test_a_malformed_auth_header_is_not_echoed(kvtool_cli: Any) -> None:
    result = kvtool_cli("audit", "--url", "http://127.0.0.1:9", "--header", "Bearer sk-live-TOKEN")
    assert result.exit_code == 2 and "--header" in result.stderr
    assert "sk-live-TOKEN" not in result.stderr


def test_every_request_goes_through_the_one_client() -> None:
    # Live audit, verify and the registry client each had their own bounded GET; a new
    # caller of httpx directly would bring back a request without the header deadline.
    import kvtool

    package = Path(kvtool.__file__).parent
    calls = ("httpx.Client(", "httpx.stream(", "httpx.get(")
    direct = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "http.py" and any(call in path.read_text() for call in calls)
    ]
    assert direct == []


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate", "gzip, gzip"])
def test_an_encoded_metrics_page_is_still_read(
    kvtool_cli: Any, raw_server: Callable[[Handler], str], coding: str
) -> None:
    import zlib

    # vLLM's counter names (vllm/v1/metrics/loggers.py at v0.32.0), values rising.
    pages = iter([b"vllm:prefix_cache_queries_total 10\n", b"vllm:prefix_cache_queries_total 90\n"])

    def encoded(conn: socket.socket) -> None:
        body = next(pages)
        if coding == "raw-deflate":
            packer = zlib.compressobj(wbits=-15)
            body = packer.compress(body) + packer.flush()
        else:
            for layer in coding.split(", "):
                body = gzip.compress(body) if layer == "gzip" else zlib.compress(body)
        name = "deflate" if coding == "raw-deflate" else coding
        conn.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Encoding: {name}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )

    url = raw_server(encoded)
    result = kvtool_cli("verify", "--metrics-url", f"{url}/metrics", "--interval", "0.1",
                        "--output-format", "json")  # fmt: skip
    assert result.exit_code in (0, 1), result.stderr
    assert '"prefix_queries": 80' in result.stdout.replace(".0", ""), result.stdout
