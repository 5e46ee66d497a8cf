"""inspect-image against a real docker-registry on 127.0.0.1 (plain HTTP, as Docker does)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvtool.image.auth import Credentials
from kvtool.image.inspect import InspectRequest, ReadOptions, inspect
from tests.image.conftest import PRIVATE_REPOSITORY, Pushed
from tests.image.servers import PUSH_PASSWORD, PUSH_USER

pytestmark = pytest.mark.registry


def inspect_json(kvtool_cli: Any, *args: str) -> tuple[int, dict[str, Any], str]:
    result = kvtool_cli("inspect-image", *args, "--output-format", "json")
    return result.exit_code, json.loads(result.stdout), result.stderr


def inspect_with_password(
    kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch, ref: str, password: str
) -> tuple[int, dict[str, Any], str]:
    """inspect-image as PUSH_USER, the password given on stdin."""
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{password}\n"))
    return inspect_json(kvtool_cli, ref, "--username", PUSH_USER, "--password-stdin")


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {v["connector"]: v["verdict"] for v in report["verdicts"]}


def test_oci_index_defaults_to_amd64_and_skips_the_attestation(
    registry: Pushed, kvtool_cli: Any
) -> None:
    code, report, _ = inspect_json(kvtool_cli, registry.ref("v0.32.0"))
    assert code == 0
    image = report["image"]
    assert image["platform"] == image["config_platform"] == "linux/amd64"
    assert image["available_platforms"] == ["linux/amd64", "linux/arm64/v8"]
    assert image["index_digest"] == registry.digests["v0.32.0"]
    assert image["build_flag"]["value"] == "true"
    assert image["build_flag"]["decided_by"] == "run-prefix"
    assert image["build_flag"]["strong"] is True
    assert image["vllm_version"] == "0.32.0" and image["vllm_version_source"] == "tag"
    assert image["env"]["CUDA_VERSION"] == "12.9.1"
    assert verdicts(report) == {"lmcache": "bundled", "nixl": "bundled", "mooncake": "bundled"}


def test_platform_option_picks_the_arm64_child(registry: Pushed, kvtool_cli: Any) -> None:
    code, report, _ = inspect_json(kvtool_cli, registry.ref("v0.32.0"), "--platform", "linux/arm64")
    assert code == 1
    assert report["image"]["config_platform"] == "linux/arm64/v8"
    assert report["image"]["build_flag"]["value"] == "false"
    assert set(verdicts(report).values()) == {"not-bundled"}


def test_missing_platform_lists_what_is_available(registry: Pushed, kvtool_cli: Any) -> None:
    result = kvtool_cli("inspect-image", registry.ref("v0.32.0"), "--platform", "linux/s390x")
    assert result.exit_code == 2
    assert "no image for platform linux/s390x" in result.stderr
    assert "linux/amd64, linux/arm64/v8" in result.stderr
    assert "Traceback" not in result.stderr


def test_single_manifest_tag_is_read_whatever_the_platform_with_a_warning(
    registry: Pushed, kvtool_cli: Any
) -> None:
    _, report, _ = inspect_json(
        kvtool_cli, registry.ref("v0.32.0-single"), "--platform", "linux/arm64"
    )
    assert report["image"]["config_platform"] == "linux/amd64"
    assert report["image"]["warnings"] == [
        "single-platform input: the config is for linux/amd64, not the requested linux/arm64"
    ]


@pytest.mark.parametrize(
    ("tag", "platform", "flag", "decided_by"),
    [
        ("v0.32.0-single", "linux/amd64", "true", "run-prefix"),  # docker schema2
        ("v0.10.2-legacy", "linux/amd64", "true", "run-prefix"),  # old BuildKit: ARG says false
        ("v0.10.2-legacy", "linux/arm64", "true", "run-prefix"),  # classic builder
        ("buildah-kv", "linux/amd64", "true", "run-prefix"),  # valueless ARG, |8 counts words
        ("buildah-default", "linux/amd64", "false", "run-prefix"),
        ("v0.9.0-nokv", "linux/amd64", "unknown", "none"),
    ],
)
def test_build_flag_per_builder(
    registry: Pushed, kvtool_cli: Any, tag: str, platform: str, flag: str, decided_by: str
) -> None:
    code, report, _ = inspect_json(kvtool_cli, registry.ref(tag), "--platform", platform)
    assert report["image"]["build_flag"]["value"] == flag
    assert report["image"]["build_flag"]["decided_by"] == decided_by
    expected = {"true": "bundled", "false": "not-bundled", "unknown": "unknown"}[flag]
    assert set(verdicts(report).values()) == {expected}
    assert code == (0 if flag == "true" else 1)


def test_old_buildkit_evidence_keeps_the_misleading_arg_line(
    registry: Pushed, kvtool_cli: Any
) -> None:
    _, report, _ = inspect_json(kvtool_cli, registry.ref("v0.10.2-legacy"))
    evidence = report["image"]["build_flag"]["evidence"]
    assert [(e["kind"], e["value"]) for e in evidence] == [("arg", "false"), ("run", "true")]


def test_version_from_labels_beats_the_tag(registry: Pushed, kvtool_cli: Any) -> None:
    _, report, _ = inspect_json(kvtool_cli, registry.ref("labelled"))
    assert report["image"]["vllm_version"] == "0.31.1"
    assert report["image"]["vllm_version_source"] == "label org.opencontainers.image.version"


def test_second_run_is_served_from_the_digest_cache(
    registry: Pushed, kvtool_cli: Any, tmp_path: Path
) -> None:
    _, first, _ = inspect_json(kvtool_cli, registry.ref("v0.32.0"))
    _, second, _ = inspect_json(kvtool_cli, registry.ref("v0.32.0"))
    assert first["image"]["from_cache"] is False
    assert second["image"]["from_cache"] is True
    assert second["image"]["config_digest"] == first["image"]["config_digest"]
    assert list((tmp_path / "cache" / "kvtool" / "configs" / "sha256").iterdir())
    _, third, _ = inspect_json(kvtool_cli, registry.ref("v0.32.0"), "--no-cache")
    assert third["image"]["from_cache"] is False


def test_pinned_digest_reference(registry: Pushed, kvtool_cli: Any) -> None:
    digest = registry.digests["v0.32.0-single"]
    code, report, _ = inspect_json(
        kvtool_cli, f"{registry.registry.host}/vllm/vllm-openai@{digest}"
    )
    assert code == 0
    assert report["image"]["manifest_digest"] == digest


def test_unknown_tag_is_could_not_run_not_unbundled(registry: Pushed, kvtool_cli: Any) -> None:
    code, report, stderr = inspect_json(kvtool_cli, registry.ref("no-such-tag"))
    assert code == 2
    assert report["build_flag_step"]["kind"] == "not-found"
    assert set(verdicts(report).values()) == {"unknown"}
    assert "MANIFEST_UNKNOWN" in stderr


def test_text_output_names_verdicts_on_stdout(registry: Pushed, kvtool_cli: Any) -> None:
    result = kvtool_cli("inspect-image", registry.ref("v0.32.0"), "--platform", "linux/arm64")
    assert result.exit_code == 1
    assert "not-bundled" in result.stdout
    assert "INSTALL_KV_CONNECTORS=false" in result.stdout
    assert "not-bundled" not in result.stderr


# -- Bearer token flow -------------------------------------------------------------------


def test_anonymous_bearer_flow(token_registry: Pushed, kvtool_cli: Any) -> None:
    code, report, _ = inspect_json(kvtool_cli, token_registry.ref("v0.32.0"))
    assert code == 0
    assert report["image"]["build_flag"]["value"] == "true"


def test_anonymous_pull_of_a_private_repository_is_an_auth_failure(
    token_registry: Pushed, kvtool_cli: Any
) -> None:
    code, report, stderr = inspect_json(
        kvtool_cli, token_registry.ref("v0.32.0", PRIVATE_REPOSITORY)
    )
    assert code == 2
    assert report["build_flag_step"]["kind"] == "auth"
    assert "insufficient_scope" in stderr
    assert set(verdicts(report).values()) == {"unknown"}  # never "not bundled"


def test_credentials_from_password_stdin(
    token_registry: Pushed, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report, _ = inspect_with_password(
        kvtool_cli, monkeypatch, token_registry.ref("v0.32.0", PRIVATE_REPOSITORY), PUSH_PASSWORD
    )
    assert code == 0
    assert report["image"]["manifest_digest"] == token_registry.digests["private"]


def test_wrong_password_is_an_auth_failure(
    token_registry: Pushed, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report, stderr = inspect_with_password(
        kvtool_cli, monkeypatch, token_registry.ref("v0.32.0", PRIVATE_REPOSITORY), "wrong"
    )
    assert code == 2
    assert report["build_flag_step"]["kind"] == "auth"
    assert "rejected the credentials" in stderr


def test_credentials_from_the_docker_config_file(token_registry: Pushed, kvtool_cli: Any) -> None:
    import os

    config = Path(os.environ["DOCKER_CONFIG"]) / "config.json"
    auth = base64.b64encode(f"{PUSH_USER}:{PUSH_PASSWORD}".encode()).decode()
    config.write_text(json.dumps({"auths": {token_registry.registry.host: {"auth": auth}}}))
    code, _, _ = inspect_json(kvtool_cli, token_registry.ref("v0.32.0", PRIVATE_REPOSITORY))
    assert code == 0


# -- Basic auth (htpasswd) -----------------------------------------------------------------


def test_basic_auth_with_credentials_from_password_stdin(
    basic_registry: Pushed, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report, _ = inspect_with_password(
        kvtool_cli, monkeypatch, basic_registry.ref("v0.32.0", PRIVATE_REPOSITORY), PUSH_PASSWORD
    )
    assert code == 0
    assert report["image"]["manifest_digest"] == basic_registry.digests["v0.32.0"]


def test_basic_auth_without_credentials_is_an_auth_failure(
    basic_registry: Pushed, kvtool_cli: Any
) -> None:
    code, report, stderr = inspect_json(
        kvtool_cli, basic_registry.ref("v0.32.0", PRIVATE_REPOSITORY)
    )
    assert code == 2
    assert report["build_flag_step"]["kind"] == "auth"
    assert "requires credentials (Basic)" in stderr
    assert set(verdicts(report).values()) == {"unknown"}  # never "not bundled"


def test_basic_auth_with_a_wrong_password_is_an_auth_failure(
    basic_registry: Pushed, kvtool_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report, stderr = inspect_with_password(
        kvtool_cli, monkeypatch, basic_registry.ref("v0.32.0", PRIVATE_REPOSITORY), "wrong"
    )
    assert code == 2
    assert report["build_flag_step"]["kind"] == "auth"
    assert "refused the credentials (401" in stderr
    assert set(verdicts(report).values()) == {"unknown"}


class _Recording(httpx.BaseTransport):
    """The real HTTP transport, noting each request's Authorization header."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.authorization: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.authorization.append(request.headers.get("authorization"))
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_basic_credentials_are_sent_only_after_the_challenge(basic_registry: Pushed) -> None:
    recording = _Recording()
    options = ReadOptions(
        credentials=Credentials(PUSH_USER, PUSH_PASSWORD), use_cache=False, transport=recording
    )
    report = inspect(
        InspectRequest(image=basic_registry.ref("v0.32.0", PRIVATE_REPOSITORY), read=options)
    )
    assert report.exit_code == 0
    basic = "Basic " + base64.b64encode(f"{PUSH_USER}:{PUSH_PASSWORD}".encode()).decode()
    assert recording.authorization[0] is None
    assert recording.authorization[1:] == [basic] * (len(recording.authorization) - 1)
