"""The runtime check for real: the docker SDK against Debian's podman service (runc).

The suite builds a tiny image offline (the test Python plus fake packages: lmcache
fine, nixl_ep failing with the libcudart error of vllm #39923, no mooncake), pushes
it to the token-auth registry fixture, and lets ``kvtool inspect-image`` pull and
probe it through ``DOCKER_HOST``. Skipped only where podman cannot run containers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.image.conftest import PRIVATE_REPOSITORY, Pushed
from tests.image.rootfs import STUBS_DIR, build_rootfs
from tests.image.servers import PUSH_PASSWORD, PUSH_USER, podman_missing_reason, stop
from tests.image.stubs import LIBCUDART, write_stubs

pytestmark = [pytest.mark.podman, pytest.mark.registry]

LOCAL_IMAGE = "localhost/kvtool/fake-vllm:probe"
REMOTE_REPOSITORY = "fake/vllm-openai"
# Hosts without CAP_SYS_RESOURCE reject podman's default rlimits; crun cannot run on
# cgroup-v1-hybrid hosts, runc can (shared/reference/image-inspection-and-audit-ux.md §D).
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
events_logger = "file"
cgroup_manager = "cgroupfs"
"""
SERVICE_START_TIMEOUT_S = 30.0


@dataclass
class Engine:
    docker_host: str
    remote_image: str


def _podman(
    env: dict[str, str], storage: list[str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *storage, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="session")
def engine(token_registry: Pushed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    reason = podman_missing_reason()
    if reason:
        pytest.skip(reason)
    scratch = tmp_path_factory.mktemp("podman")
    (scratch / "containers.conf").write_text(CONTAINERS_CONF)
    (scratch / "registries.conf").write_text(
        f'[[registry]]\nlocation = "{token_registry.registry.host}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(scratch / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(scratch / "registries.conf"),
    }
    # vfs: no overlay mount is left behind for pytest to trip over when it cleans tmp.
    storage = [
        "--root", str(scratch / "root"), "--runroot", str(scratch / "runroot"),
        "--storage-driver", "vfs",
    ]  # fmt: skip
    # A CUDA 13 image carrying a cu12 nixl wheel: the dual-wheel bug of vllm #39923.
    stubs = write_stubs(
        scratch / "stubs",
        packages=("lmcache", "nixl", "vllm"),
        failures={"nixl_ep.py": LIBCUDART},
        distributions={"nixl-cu12": "1.4.1"},
    )
    build_rootfs(scratch / "rootfs.tar", stubs)
    imported = _podman(
        env,
        storage,
        "import",
        "--quiet",
        "--change",
        "ENV=PATH=/usr/bin:/bin",
        "--change",
        f"ENV=PYTHONPATH={STUBS_DIR}",
        "--change",
        "ENV=CUDA_VERSION=13.0.1",
        str(scratch / "rootfs.tar"),
        LOCAL_IMAGE,
    )
    if imported.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {imported.stderr.strip()}")
    smoke = _podman(
        env, storage, "run", "--rm", "--network=none", LOCAL_IMAGE, "python3", "-c", "print(1)"
    )
    if smoke.returncode != 0:
        pytest.skip(f"podman cannot run containers here: {smoke.stderr.strip()}")
    remote = f"{token_registry.registry.host}/{REMOTE_REPOSITORY}:v0.32.0-fake"
    pushed = _podman(
        env,
        storage,
        "push",
        "--quiet",
        "--creds",
        f"{PUSH_USER}:{PUSH_PASSWORD}",
        LOCAL_IMAGE,
        remote,
    )
    assert pushed.returncode == 0, pushed.stderr
    # A stale local copy under the pushed tag, whose probe would find no package at all:
    # --check all must probe the digest the registry step read, not this.
    stale = _podman(
        env, storage, "import", "--quiet", "--change", "ENV=PATH=/usr/bin:/bin",
        str(scratch / "rootfs.tar"), remote,
    )  # fmt: skip
    assert stale.returncode == 0, stale.stderr
    socket = scratch / "podman.sock"
    service = subprocess.Popen(
        ["podman", *storage, "system", "service", "--time=0", f"unix://{socket}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(scratch / "service.log", "wb"),  # noqa: SIM115 -- the child owns it
    )
    try:
        deadline = time.monotonic() + SERVICE_START_TIMEOUT_S
        while not socket.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                pytest.skip(
                    f"podman system service did not start: {(scratch / 'service.log').read_text()}"
                )
            time.sleep(0.05)
        yield Engine(f"unix://{socket}", remote)
    finally:
        stop(service)


def _verdicts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["connector"]: v for v in report["verdicts"]}


def _assert_fake_image_verdicts(report: dict[str, Any]) -> None:
    verdicts = _verdicts(report)
    assert verdicts["lmcache"]["verdict"] == "bundled"
    assert "vLLM loads LMCacheConnectorV1, LMCacheMPConnector" in verdicts["lmcache"]["reason"]
    assert verdicts["nixl"]["verdict"] == "broken"
    assert verdicts["nixl"]["error"] == f"ImportError: {LIBCUDART}"
    assert verdicts["mooncake"]["verdict"] == "not-bundled"


def _probe_containers(engine: Engine) -> list[Any]:
    import docker

    client = docker.DockerClient(base_url=engine.docker_host)
    try:
        return list(client.containers.list(all=True, filters={"label": "io.kvtool.probe"}))
    finally:
        client.close()


def test_both_steps_pull_from_the_token_registry_and_probe_in_podman(
    engine: Engine, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine.docker_host)
    result = kvtool_cli(
        "inspect-image", engine.remote_image, "--check", "all", "--output-format", "json",
        "--probe-timeout", "60", "--probe-memory", "512m",
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["runtime_step"]["status"] == "ran", report["runtime_step"]
    assert report["image"]["build_flag"]["value"] == "unknown"  # podman import records no RUN
    assert report["probe"]["vllm"]["version"] == "0.32.0"
    assert report["image"]["env"]["CUDA_VERSION"] == "13.0.1"
    assert report["warnings"] == ["nixl-cu12 1.4.1 targets CUDA 12, the image has CUDA 13.0.1"]
    _assert_fake_image_verdicts(report)
    assert result.exit_code == 1
    assert _probe_containers(engine) == []  # removed after the run


def test_stale_local_copy_of_the_tag_is_not_what_gets_probed(
    engine: Engine, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine.docker_host)
    result = kvtool_cli(
        "inspect-image", engine.remote_image, "--check", "all", "--output-format", "json"
    )
    _assert_fake_image_verdicts(json.loads(result.stdout))


def test_runtime_only_on_a_local_image(
    engine: Engine, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine.docker_host)
    result = kvtool_cli(
        "inspect-image", LOCAL_IMAGE, "--check", "runtime", "--output-format", "json"
    )
    report = json.loads(result.stdout)
    assert report["build_flag_step"]["status"] == "skipped"
    _assert_fake_image_verdicts(report)
    assert "broken" in json.dumps(report["verdicts"])


def test_pull_failure_is_reported_from_the_stream(
    engine: Engine, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine.docker_host)
    missing = engine.remote_image.replace("v0.32.0-fake", "no-such-tag")
    result = kvtool_cli("inspect-image", missing, "--check", "runtime", "--output-format", "json")
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert report["runtime_step"]["kind"] == "engine"
    assert {v["verdict"] for v in report["verdicts"]} == {"unknown"}


def test_pull_refused_for_want_of_credentials_is_an_auth_failure(
    engine: Engine, token_registry: Pushed, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", engine.docker_host)
    private = token_registry.ref("v0.32.0", PRIVATE_REPOSITORY)
    result = kvtool_cli("inspect-image", private, "--check", "runtime", "--output-format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 2
    assert report["runtime_step"]["kind"] == "auth"
    assert {v["verdict"] for v in report["verdicts"]} == {"unknown"}  # never "not bundled"
