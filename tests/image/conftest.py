"""Fixtures for the inspect-image tests: registries on 127.0.0.1 and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtool.image.manifest import DOCKER_LIST, DOCKER_MANIFEST
from tests.image.images import Image, Pusher
from tests.image.servers import (
    PUSH_PASSWORD,
    PUSH_USER,
    Registry,
    registry_missing_reason,
    start_registry,
    start_token_server,
    stop,
)

REPOSITORY = "vllm/vllm-openai"
PRIVATE_REPOSITORY = "private/vllm"


@dataclass
class Pushed:
    registry: Registry
    digests: dict[str, str]  # tag -> manifest or index digest

    def ref(self, tag: str, repository: str = REPOSITORY) -> str:
        return f"{self.registry.host}/{repository}:{tag}"


def push_catalogue(pusher: Pusher) -> dict[str, str]:
    """The synthetic vLLM tags every registry test reads back (§C.2 of the reference)."""
    return {
        # OCI index: amd64 built with the flag, arm64 without, plus an attestation entry.
        "v0.32.0": pusher.multi(
            "v0.32.0",
            [Image(arch="amd64", kv=True), Image(arch="arm64", variant="v8", kv=False)],
        ),
        "v0.32.0-single": pusher.image(
            "v0.32.0-single", Image(media_type=DOCKER_MANIFEST, style="buildkit-new")
        ),
        # Docker manifest list: old BuildKit on amd64, the classic builder on arm64.
        "v0.10.2-legacy": pusher.multi(
            "v0.10.2-legacy",
            [
                Image(arch="amd64", style="buildkit-old", media_type=DOCKER_MANIFEST),
                Image(arch="arm64", variant="v8", style="classic", media_type=DOCKER_MANIFEST),
            ],
            media_type=DOCKER_LIST,
        ),
        "v0.9.0-nokv": pusher.image("v0.9.0-nokv", Image(style="none")),
        "buildah-default": pusher.image("buildah-default", Image(style="buildah", kv=False)),
        "buildah-kv": pusher.image("buildah-kv", Image(style="buildah", kv=True)),
        "labelled": pusher.image(
            "labelled",
            Image(labels={"org.opencontainers.image.version": "0.31.1", "ai.vllm.image.tag": "x"}),
        ),
    }


def registry_scratch(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh folder for one registry's files; skips where docker-registry is missing."""
    reason = registry_missing_reason()
    if reason:
        pytest.skip(reason)
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    """Debian's docker-registry without auth, holding the catalogue."""
    scratch = registry_scratch(tmp_path_factory, "registry")
    process, found = start_registry(scratch, None)
    try:
        yield Pushed(found, push_catalogue(Pusher(found.url, REPOSITORY)))
    finally:
        stop(process)


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    """docker-registry behind the Bearer token flow; anonymous pull except under private/."""
    scratch = registry_scratch(tmp_path_factory, "token-registry")
    token_process, token_url, cert = start_token_server(scratch)
    try:
        process, found = start_registry(scratch, (token_url, cert))
        try:
            user = (PUSH_USER, PUSH_PASSWORD)
            digests = push_catalogue(Pusher(found.url, REPOSITORY, token_url, user))
            private = Pusher(found.url, PRIVATE_REPOSITORY, token_url, user)
            digests["private"] = private.image("v0.32.0", Image())
            yield Pushed(found, digests)
        finally:
            stop(process)
    finally:
        stop(token_process)


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    """docker-registry behind Basic auth (htpasswd): every request needs the credentials."""
    scratch = registry_scratch(tmp_path_factory, "basic-registry")
    process, found = start_registry(scratch, None, basic=True)
    try:
        pusher = Pusher(found.url, PRIVATE_REPOSITORY, user=(PUSH_USER, PUSH_PASSWORD))
        yield Pushed(found, {"v0.32.0": pusher.image("v0.32.0", Image())})
    finally:
        stop(process)


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private cache and empty registry auth files, so nothing of the host's leaks in."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    docker_config = tmp_path / "docker-config"
    docker_config.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "runtime"))
