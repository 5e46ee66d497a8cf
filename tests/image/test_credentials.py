"""Credentials from the Docker config file: auths, Docker Hub's key, credential helpers."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from kvtool.errors import KvtoolError
from kvtool.image.auth import Credentials, credentials_from_docker_config


def write_config(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def encoded(pair: str) -> str:
    return base64.b64encode(pair.encode()).decode()


def test_docker_hub_credentials_live_under_the_v1_index_url(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, {"auths": {"https://index.docker.io/v1/": {"auth": encoded("me:hub-pat")}}}
    )
    assert credentials_from_docker_config("docker.io", path) == Credentials("me", "hub-pat")
    assert credentials_from_docker_config("ghcr.io", path) is None


def test_host_with_scheme_prefix_matches(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, {"auths": {"https://nvcr.io": {"auth": encoded("$oauthtoken:k")}}}
    )
    assert credentials_from_docker_config("nvcr.io", path) == Credentials("$oauthtoken", "k")


def test_credential_helper_is_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "bin" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text(
        "#!/bin/sh\nread server\n"
        'printf \'{"ServerURL":"%s","Username":"robot","Secret":"s3cret"}\' "$server"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}{os.pathsep}{os.environ['PATH']}")
    path = write_config(tmp_path, {"credHelpers": {"ghcr.io": "fake"}})
    assert credentials_from_docker_config("ghcr.io", path) == Credentials("robot", "s3cret")


def test_missing_helper_and_bad_auth_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(KvtoolError, match="docker-credential-absent is not on PATH"):
        credentials_from_docker_config("ghcr.io", write_config(tmp_path, {"credsStore": "absent"}))
    with pytest.raises(KvtoolError, match=r"auths\['ghcr.io'\].auth is not base64"):
        credentials_from_docker_config(
            "ghcr.io", write_config(tmp_path, {"auths": {"ghcr.io": {"auth": "!!"}}})
        )


def test_podman_auth_file_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtool.image.auth import credentials_for

    podman = tmp_path / "auth.json"
    podman.write_text(json.dumps({"auths": {"quay.io": {"auth": encoded("bot:tok")}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty"))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(podman))
    assert credentials_for("quay.io") == Credentials("bot", "tok")
    assert credentials_for("ghcr.io") is None
