"""Step 2: run :mod:`kvtool.image.probe` in the image (docker SDK) or in a local Python.

The container is locked down: entrypoint replaced by ``python3 -c <probe>``, no
network, read-only root with a small ``/tmp`` tmpfs, memory, pid and open-file limits
(explicit ulimits, because hosts without CAP_SYS_RESOURCE reject podman's defaults),
a wall-clock limit, and it is removed whatever happens. The engine is whatever
``DOCKER_HOST`` names (Docker, or podman's Docker-compatible socket).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kvtool.errors import KvtoolError
from kvtool.image.auth import Credentials
from kvtool.image.errors import (
    AuthError,
    EngineError,
    InspectError,
    ProbeError,
    RateLimitedError,
)
from kvtool.image.model import ProbeReport
from kvtool.image.registry import Progress

MARKER = "KVTOOL-PROBE-JSON:"
STDERR_TAIL_CHARS = 2000
PROBE_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}  # the root filesystem is read-only
ENGINE_API_TIMEOUT_S = 60
# Distribution error codes as engines print them: "toomanyrequests: You have reached your
# pull rate limit", "unauthorized: authentication required", "denied: requested access ...".
_RATE_LIMITED_RE = re.compile(r"\btoomanyrequests\b", re.IGNORECASE)
_REFUSED_RE = re.compile(r"\b(?:unauthorized|denied)\b", re.IGNORECASE)
# What the docker SDK's parse_bytes accepts: bytes, or a b/k/m/g unit with an optional "b".
_MEMORY_RE = re.compile(r"(?i)^(\d+(?:\.\d+)?)(?:[kmg]b?|b)?$")


@dataclass(frozen=True)
class ContainerLimits:
    """The probe container's limits, checked at construction so that a typo is reported
    before an image is pulled."""

    memory: str = "4g"  # vLLM + torch imports peak around 1.5 GB on CPU
    timeout_s: float = 300.0  # a cold vLLM import in a fresh container takes ~30 s
    pids: int = 512
    nofile: int = 1024
    nproc: int = 1000
    gpus: bool = False  # pass every GPU so imports that dlopen libcuda.so.1 can succeed
    python: str = "python3"

    def __post_init__(self) -> None:
        size = _MEMORY_RE.match(self.memory)
        if size is None or float(size.group(1)) == 0:
            raise KvtoolError(f"--probe-memory {self.memory!r}: expected a size such as 512m or 4g")


def probe_source() -> str:
    return resources.files("kvtool.image").joinpath("probe.py").read_text(encoding="utf-8")


def parse_probe_output(stdout: str, stderr: str, where: str) -> ProbeReport:
    """The report on the probe's last marker line; ProbeError when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                return ProbeReport.model_validate_json(line[len(MARKER) :])
            except ValidationError as exc:
                raise ProbeError(
                    f"{where}: the probe printed an unreadable report: {exc}"
                ) from None
    tail = stderr.strip()[-STDERR_TAIL_CHARS:] or "(no output)"
    raise ProbeError(f"{where}: the probe printed no report; its stderr ends: {tail}")


def probe_local(python: Path, timeout_s: float = 300.0) -> ProbeReport:
    """Run the probe with ``python`` (a venv's or a pod's interpreter)."""
    where = f"--python {python}"
    try:
        done = subprocess.run(
            [str(python), "-"],
            input=probe_source(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **PROBE_ENV},
            check=False,
        )
    except FileNotFoundError:
        raise KvtoolError(f"{where}: no such interpreter") from None
    except PermissionError:
        raise KvtoolError(f"{where}: not executable") from None
    except subprocess.TimeoutExpired:
        raise ProbeError(f"{where}: the probe did not finish within {timeout_s:g} s") from None
    return parse_probe_output(done.stdout, done.stderr, where)


def probe_container(
    image: str,
    limits: ContainerLimits,
    progress: Progress,
    pull: bool = True,
    credentials: Credentials | None = None,
) -> ProbeReport:
    """Run the probe inside ``image`` through the engine at ``DOCKER_HOST``.

    ``credentials`` (from ``--username``) go with the pull; without them the engine
    uses its own stored logins.
    """
    import docker
    from docker.errors import DockerException, ImageNotFound
    from requests.exceptions import RequestException

    host = os.environ.get("DOCKER_HOST", "the default socket")
    progress(f"connecting to the container engine at {host}")
    try:
        client = docker.from_env(timeout=ENGINE_API_TIMEOUT_S)
        client.ping()
    except DockerException as exc:
        raise EngineError(f"no container engine answered at {host}: {exc}") from None
    try:
        try:
            client.images.get(image)
        except ImageNotFound:
            if not pull:
                raise EngineError(
                    f"{image}: not present in the engine and pulling is off"
                ) from None
            _pull(client, image, progress, credentials)
        return _run_probe(client, image, limits, progress)
    except DockerException as exc:
        raise EngineError(f"{image}: the engine failed: {exc}") from None
    except RequestException as exc:  # the engine's socket went away mid-run
        raise EngineError(f"{image}: lost the container engine at {host}: {exc}") from None
    finally:
        client.close()


def pull_failure(image: str, detail: str) -> InspectError:
    """A failed pull, classified by the registry error code the engine passes on, so that a
    rate limit or a refused login reads as such (never as a missing package)."""
    if _RATE_LIMITED_RE.search(detail):
        return RateLimitedError(f"{image}: pull rate-limited: {detail}", None)
    if _REFUSED_RE.search(detail):
        return AuthError(f"{image}: pull refused by the registry: {detail}")
    return EngineError(f"{image}: pull failed: {detail}")


def _pull(client: Any, image: str, progress: Progress, credentials: Credentials | None) -> None:
    """Pull ``image``, reading the whole stream: errors arrive inside it, not as a status."""
    from docker.errors import APIError
    from docker.utils import parse_repository_tag

    repository, tag = parse_repository_tag(image)
    auth = (
        {"username": credentials.username, "password": credentials.password}
        if credentials is not None
        else None
    )
    progress(f"pulling {image}")
    try:
        stream = client.api.pull(repository, tag=tag, stream=True, decode=True, auth_config=auth)
        for event in stream:
            if isinstance(event, dict) and (event.get("error") or event.get("errorDetail")):
                raise pull_failure(image, str(event.get("error") or event.get("errorDetail")))
    except APIError as exc:  # some engines answer a refused pull with an HTTP status
        raise pull_failure(image, str(exc.explanation or exc)) from None


def _run_probe(client: Any, image: str, limits: ContainerLimits, progress: Progress) -> ProbeReport:
    from docker.types import DeviceRequest, Ulimit
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import ReadTimeout

    progress(f"running the import probe in {image}")
    container = client.containers.create(
        image,
        entrypoint=[limits.python, "-c", probe_source()],
        command=[],
        environment=PROBE_ENV,
        network_disabled=True,
        network_mode="none",
        read_only=True,
        tmpfs={"/tmp": "rw,size=64m"},
        mem_limit=limits.memory,
        pids_limit=limits.pids,
        ulimits=[
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="nproc", soft=limits.nproc, hard=limits.nproc),
        ],
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if limits.gpus else None,
        labels={"io.kvtool.probe": "1"},
    )
    try:
        container.start()
        try:
            status = container.wait(timeout=limits.timeout_s)
        except (ReadTimeout, RequestsConnectionError):
            raise ProbeError(
                f"{image}: the probe did not finish within {limits.timeout_s:g} s"
            ) from None
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        if MARKER not in stdout and status.get("StatusCode") not in (0, None):
            raise ProbeError(
                f"{image}: the probe exited {status.get('StatusCode')}: "
                + (stderr.strip()[-STDERR_TAIL_CHARS:] or "(no output)")
            )
        return parse_probe_output(stdout, stderr, image)
    finally:
        container.remove(force=True)
