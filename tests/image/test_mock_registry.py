"""What the local docker-registry cannot produce, through httpx.MockTransport: Docker
Hub's rate-limit headers and 429s, redirects to blob storage, truncated, oversized and
malformed bodies, redirect loops and lying digests. (Basic auth runs against the real
registry: test_registry.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from kvtool.image.inspect import InspectRequest, ReadOptions, inspect
from kvtool.image.manifest import OCI_MANIFEST
from tests.image.images import Image, digest_of, index

Handler = Callable[[httpx.Request], httpx.Response | None]
HUB = "registry-1.docker.io"
REPOSITORY = "vllm/vllm-openai"
LIMIT_HEADERS = {
    "ratelimit-limit": "100;w=21600",
    "ratelimit-remaining": "76;w=21600",
    "docker-ratelimit-source": "203.0.113.7",
}


class FakeHub:
    """Docker Hub's shape: Bearer challenge, token endpoint, rate-limit headers, CDN redirects."""

    def __init__(self, images: list[Image]) -> None:
        body, documents = index(images)
        self.documents = {digest_of(d): (d, t) for d, t in documents}
        self.documents[digest_of(body)] = (body, "application/vnd.oci.image.index.v1+json")
        self.tags = {"v0.32.0": digest_of(body)}
        self.blobs = {digest_of(b): b for image in images for b in image.blobs()}
        self.overrides: list[Handler] = []
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        for override in self.overrides:
            answer = override(request)
            if answer is not None:
                return answer
        url = request.url
        if url.host == "auth.docker.io":
            return httpx.Response(200, json={"token": "hub-token", "expires_in": 300})
        if url.host == "cdn.example":
            assert "authorization" not in request.headers  # httpx drops it across origins
            return httpx.Response(200, content=self.blobs[url.params["digest"]])
        if request.headers.get("authorization") != "Bearer hub-token":
            return httpx.Response(
                401,
                headers={
                    "www-authenticate": 'Bearer realm="https://auth.docker.io/token",'
                    f'service="registry.docker.io",scope="repository:{REPOSITORY}:pull"'
                },
            )
        prefix = f"/v2/{REPOSITORY}/"
        path = url.path.removeprefix(prefix)
        if path.startswith("manifests/"):
            ref = path.removeprefix("manifests/")
            digest = self.tags.get(ref, ref)
            body, media_type = self.documents[digest]
            headers = {"content-type": media_type, "docker-content-digest": digest, **LIMIT_HEADERS}
            return httpx.Response(
                200, content=b"" if request.method == "HEAD" else body, headers=headers
            )
        if path.startswith("blobs/"):
            digest = path.removeprefix("blobs/")
            return httpx.Response(
                307, headers={"location": f"https://cdn.example/blob?digest={digest}&sig=x"}
            )
        return httpx.Response(404)


def run(hub: Any, image: str = "vllm/vllm-openai:v0.32.0", **read: Any) -> Any:
    options = ReadOptions(transport=httpx.MockTransport(hub), use_cache=False, **read)
    return inspect(InspectRequest(image=image, read=options))


def test_hub_flow_follows_the_cdn_redirect_and_surfaces_rate_limits() -> None:
    hub = FakeHub([Image(arch="amd64", kv=True), Image(arch="arm64", kv=False)])
    report = run(hub)
    assert report.exit_code == 0
    assert report.image is not None
    assert report.image.rate_limit is not None
    assert report.image.rate_limit.remaining == "76;w=21600"
    assert report.image.rate_limit.source == "203.0.113.7"
    hosts = [r.url.host for r in hub.seen]
    assert "auth.docker.io" in hosts and "cdn.example" in hosts
    token_request = next(r for r in hub.seen if r.url.host == "auth.docker.io")
    assert token_request.url.params["scope"] == f"repository:{REPOSITORY}:pull"
    accept = next(r for r in hub.seen if "/manifests/" in r.url.path).headers["accept"]
    assert accept.count("application/vnd.") == 4


def test_rate_limited_is_unknown_never_not_bundled() -> None:
    hub = FakeHub([Image()])
    hub.overrides.append(
        lambda r: (
            httpx.Response(
                429,
                headers={"ratelimit-limit": "100;w=21600", "ratelimit-remaining": "0;w=21600"},
                json={
                    "errors": [
                        {
                            "code": "TOOMANYREQUESTS",
                            "message": "You have reached your pull rate limit.",
                        }
                    ]
                },
            )
            if "/manifests/" in r.url.path and r.headers.get("authorization")
            else None
        )
    )
    report = run(hub)
    assert report.exit_code == 2
    assert report.build_flag_step.kind == "rate-limited"
    assert "ratelimit-remaining 0;w=21600" in (report.build_flag_step.reason or "")
    assert "TOOMANYREQUESTS" in (report.build_flag_step.reason or "")
    assert {v.verdict.value for v in report.verdicts} == {"unknown"}


def test_rate_limited_token_server_is_unknown_never_not_bundled() -> None:
    hub = FakeHub([Image()])
    hub.overrides.append(
        lambda r: (
            httpx.Response(429, headers={"ratelimit-remaining": "0;w=21600"})
            if r.url.host == "auth.docker.io"
            else None
        )
    )
    report = run(hub)
    assert report.exit_code == 2
    assert report.build_flag_step.kind == "rate-limited"
    assert "token server https://auth.docker.io/token rate-limited us (429)" in (
        report.build_flag_step.reason or ""
    )
    assert "ratelimit-remaining 0;w=21600" in (report.build_flag_step.reason or "")
    assert {v.verdict.value for v in report.verdicts} == {"unknown"}


def test_truncated_blob_is_refused() -> None:
    hub = FakeHub([Image()])
    config = Image().config()
    hub.overrides.append(
        lambda r: (
            httpx.Response(200, content=config[:50], headers={"content-length": str(len(config))})
            if r.url.host == "cdn.example"
            else None
        )
    )
    report = run(hub)
    assert report.exit_code == 2
    assert report.build_flag_step.kind == "refused"
    assert "truncated" in (report.build_flag_step.reason or "")


def test_oversized_blob_is_refused_before_reading_it() -> None:
    hub = FakeHub([Image()])
    hub.overrides.append(
        lambda r: (
            httpx.Response(200, content=b"{}", headers={"content-length": str(10**10)})
            if r.url.host == "cdn.example"
            else None
        )
    )
    report = run(hub)
    assert report.build_flag_step.kind == "refused"
    assert "10000000000 bytes announced" in (report.build_flag_step.reason or "")


def test_oversized_streamed_blob_is_cut_off_at_the_cap() -> None:
    hub = FakeHub([Image()])

    def endless() -> Any:
        while True:
            yield b"x" * 65536

    hub.overrides.append(
        lambda r: httpx.Response(200, content=endless()) if r.url.host == "cdn.example" else None
    )
    report = run(hub, max_config_bytes=1024 * 1024)
    assert report.build_flag_step.kind == "refused"
    assert "exceeds the 1048576-byte cap" in (report.build_flag_step.reason or "")


def test_malformed_manifest_json_is_refused() -> None:
    hub = FakeHub([Image()])
    hub.overrides.append(
        lambda r: (
            httpx.Response(200, content=b"{oops", headers={"content-type": OCI_MANIFEST})
            if "/manifests/" in r.url.path and r.headers.get("authorization")
            else None
        )
    )
    report = run(hub)
    assert report.build_flag_step.kind == "refused"
    assert "is not valid JSON" in (report.build_flag_step.reason or "")


def test_child_manifest_that_lies_about_its_digest_is_refused() -> None:
    hub = FakeHub([Image(arch="amd64")])
    wrong = Image(arch="amd64", kv=False).manifest()
    hub.overrides.append(
        lambda r: (
            httpx.Response(200, content=wrong, headers={"content-type": OCI_MANIFEST})
            if "/manifests/sha256:" in r.url.path and r.headers.get("authorization")
            else None
        )
    )
    report = run(hub)
    assert report.build_flag_step.kind == "refused"
    assert "does not match its digest" in (report.build_flag_step.reason or "")


def test_redirect_loop_is_refused() -> None:
    hub = FakeHub([Image()])
    hub.overrides.append(
        lambda r: (
            httpx.Response(302, headers={"location": "https://cdn.example/again"})
            if r.url.host == "cdn.example"
            else None
        )
    )
    report = run(hub)
    assert report.build_flag_step.kind == "refused"
    assert "redirects" in (report.build_flag_step.reason or "")


@pytest.mark.parametrize(
    ("text", "host", "repository", "tag"),
    [
        ("ubuntu", "docker.io", "library/ubuntu", "latest"),
        ("vllm/vllm-openai:v0.32.0", "docker.io", "vllm/vllm-openai", "v0.32.0"),
        ("localhost:5000/a/b:t", "localhost:5000", "a/b", "t"),
        ("ghcr.io/org/img", "ghcr.io", "org/img", "latest"),
    ],
)
def test_reference_parsing(text: str, host: str, repository: str, tag: str) -> None:
    from kvtool.image.reference import parse_reference

    parsed = parse_reference(text)
    assert (parsed.host, parsed.repository, parsed.tag) == (host, repository, tag)


def test_bad_reference_is_a_one_line_error(kvtool_cli: Any) -> None:
    result = kvtool_cli("inspect-image", "Vllm/UPPER:tag")
    assert result.exit_code == 2
    assert result.stderr.startswith("kvtool: error: image reference 'Vllm/UPPER:tag'")


def test_challenge_params_keep_commas_inside_quotes() -> None:
    from kvtool.image.auth import parse_challenge

    challenge = parse_challenge(
        'Bearer realm="https://r/token",service="svc",scope="repository:x:pull,push",error="insufficient_scope"'
    )
    assert challenge.scheme == "bearer"
    assert challenge.params["scope"] == "repository:x:pull,push"
    assert challenge.params["error"] == "insufficient_scope"
