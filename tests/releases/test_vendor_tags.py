"""Which image references name a vLLM release, and which leave it unknown.

A tag names a vLLM release only when it parses as one (``v0.6.3-cu124``) or a row of
rules/images/entrypoints.toml maps it. Vendor builds of vLLM tag their own way; shapes
seen in public deployment files:
quay.io/modh/vllm:rhoai-2.13-cuda (Open Data Hub's vLLM builds,
https://github.com/opendatahub-io/vllm, tagged by OpenShift AI release),
nvcr.io/nvidia/vllm:25.01-py3
(https://docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/running.html),
rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521 (https://hub.docker.com/r/rocm/vllm/tags),
and digest-pinned references as Kubernetes manifests write them.
"""

from __future__ import annotations

import pytest

from kvtool.releases.images import names_other_release, vllm_version_of_image
from kvtool.releases.loader import available_versions
from kvtool.releases.target import resolve_target

_UNKNOWN_RELEASE = [
    "quay.io/modh/vllm:rhoai-2.13-cuda",
    "quay.io/modh/vllm@sha256:" + "a1" * 32,
    "vllm/vllm-openai@sha256:" + "b2" * 32,
    "nvcr.io/nvidia/vllm:25.01-py3",
    "rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521",
    "ghcr.io/example/vllm-build:2025-01-15",
    "registry.example.com/team/vllm:sha-3f9c2ab",
    "llm-d/llm-d-cuda:v0.2.0",
]


@pytest.mark.parametrize("image", _UNKNOWN_RELEASE)
def test_a_vendor_tag_that_is_no_vllm_release_leaves_the_release_unknown(image: str) -> None:
    assert vllm_version_of_image(image) is None
    assert names_other_release(image)
    target = resolve_target(None, image)
    assert target.version == available_versions()[-1]
    assert not target.exact  # checked at the newest for what holds in every release only
    assert target.warning is not None and "not a vLLM release" in target.warning


@pytest.mark.parametrize(
    "image",
    ["vllm/vllm-openai:latest", "vllm/vllm-openai", "vllm/vllm-openai:nightly"],
)
def test_vllms_own_moving_tags_are_checked_at_the_newest_table(image: str) -> None:
    assert not names_other_release(image)
    target = resolve_target(None, image)
    assert target.exact and target.version == available_versions()[-1]


def test_a_tag_that_parses_as_a_release_names_it() -> None:
    oldest = available_versions()[0]
    image = f"vllm/vllm-openai:v{oldest}-cu124"
    assert vllm_version_of_image(image) == oldest
    target = resolve_target(None, image)
    assert target.exact and target.version == oldest and target.source == "image"


def test_an_image_neither_listed_nor_named_for_vllm_says_nothing_either_way() -> None:
    assert not names_other_release("python:3.11-slim")
