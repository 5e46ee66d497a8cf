"""Start Debian's docker-registry (and the token server) on 127.0.0.1; stop them by PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REGISTRY_BINARY = "/usr/bin/docker-registry"
TOKEN_SERVER = Path(__file__).with_name("token_server.py")
SERVICE = "kvtool-test-registry"
ISSUER = "kvtool-test-issuer"
PUSH_USER, PUSH_PASSWORD = "ci", "secret"
# bcrypt of PUSH_PASSWORD at cost 4 (the minimum: the registry checks it on every request),
# made with Python 3.11's crypt.crypt(PUSH_PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, 16)).
PUSH_PASSWORD_BCRYPT = "$2b$04$1boB4vbu.rTCo2L3NW970eVP0IhkejOqcUb9wXq7tJVK7H3E831ay"
START_TIMEOUT_S = 20.0


@dataclass
class Registry:
    host: str  # 127.0.0.1:<port>
    token_url: str | None  # the token server's /token when the registry uses Bearer auth

    @property
    def url(self) -> str:
        return f"http://{self.host}"


def registry_missing_reason() -> str | None:
    if not Path(REGISTRY_BINARY).exists():
        return f"{REGISTRY_BINARY} is not installed (scripts/setup_system.sh installs it)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process we started, then SIGKILL if it lingers."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def start_token_server(scratch: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    cert = scratch / "token.crt"
    process = subprocess.Popen(
        [
            sys.executable,
            str(TOKEN_SERVER),
            str(cert),
            SERVICE,
            ISSUER,
            f"{PUSH_USER}:{PUSH_PASSWORD}",
        ],
        stdout=subprocess.PIPE,
        stderr=open(scratch / "token.log", "wb"),  # noqa: SIM115 -- the child owns it
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode().strip()
    if not line.startswith("PORT "):
        stop(process)
        raise RuntimeError(f"token server did not start: {line!r}; see {scratch / 'token.log'}")
    return process, f"http://127.0.0.1:{line.split()[1]}/token", cert


def start_registry(
    scratch: Path, token: tuple[str, Path] | None, basic: bool = False
) -> tuple[subprocess.Popen[bytes], Registry]:
    """docker-registry on a free port: no auth, Bearer tokens from ``token`` (the token
    server's URL and certificate), or with ``basic`` Basic auth for PUSH_USER."""
    port = free_port()
    config = [
        "version: 0.1",
        "log: {level: warn}",
        f"storage: {{filesystem: {{rootdirectory: {scratch / 'data'}}}, "
        "delete: {enabled: true}}",
        f"http: {{addr: 127.0.0.1:{port}, secret: kvtool-test-only}}",
    ]
    if token is not None:
        url, cert = token
        config.append(
            f"auth: {{token: {{realm: {url}, service: {SERVICE}, issuer: {ISSUER}, "
            f"rootcertbundle: {cert}}}}}"
        )
    elif basic:
        htpasswd = scratch / "htpasswd"
        htpasswd.write_text(f"{PUSH_USER}:{PUSH_PASSWORD_BCRYPT}\n")
        config.append(f"auth: {{htpasswd: {{realm: {SERVICE}, path: {htpasswd}}}}}")
    config_path = scratch / "config.yml"
    config_path.write_text("\n".join(config) + "\n")
    process = subprocess.Popen(
        [REGISTRY_BINARY, "serve", str(config_path)],
        stdout=subprocess.DEVNULL,
        stderr=open(scratch / "registry.log", "wb"),  # noqa: SIM115 -- the child owns it
    )
    registry = Registry(f"127.0.0.1:{port}", token[0] if token else None)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {(scratch / 'registry.log').read_text()}")
        try:
            if httpx.get(f"{registry.url}/v2/", timeout=1).status_code in (200, 401):
                return process, registry
        except httpx.TransportError:
            time.sleep(0.05)
    stop(process)
    raise RuntimeError(f"docker-registry did not answer within {START_TIMEOUT_S} s")


def podman_missing_reason() -> str | None:
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup_system.sh installs it)"
    return None
