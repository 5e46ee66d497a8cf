"""The container engine's socket dies mid-run: a one-line engine error, not a traceback.

The "engine" is a real Unix-socket HTTP peer that answers the SDK's version and ping
requests and then hangs up on the next one, as a crashing podman or dockerd service does.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from kvtool.image.errors import EngineError
from kvtool.image.runtime import ContainerLimits, probe_container

VERSION_BODY = b'{"ApiVersion": "1.41", "Version": "4.3.1"}'
REPLIES = {
    b"/_ping": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nOK",
    b"/version": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(VERSION_BODY)).encode()
    + b"\r\n\r\n"
    + VERSION_BODY,
}


def _engine_that_dies_after_ping(listener: socket.socket) -> None:
    with listener:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                request_line = conn.recv(65536).split(b"\r\n", 1)[0]
                for endpoint, reply in REPLIES.items():
                    if endpoint in request_line:
                        conn.sendall(reply)
                # Anything else (the image lookup): close without a reply.


def test_engine_lost_mid_probe_is_an_engine_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "engine.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    thread = threading.Thread(target=_engine_that_dies_after_ping, args=(listener,), daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        with pytest.raises(EngineError, match="lost the container engine"):
            probe_container("example.invalid/vllm:latest", ContainerLimits(), lambda _: None)
    finally:
        listener.close()
