"""The image table: which images start vLLM from args alone, and which tags name a release."""

from __future__ import annotations

import pytest

from kvtool.releases import available_versions, resolve_target
from kvtool.releases.images import image_rows, serve_entrypoint, vllm_version_of_image


def test_every_row_cites_a_public_source() -> None:
    for row in image_rows():
        assert row.source.startswith("https://"), row.repository
        for bundle in row.bundles:
            assert bundle.source.startswith("https://"), (row.repository, bundle.vllm)
            assert row.tag == "product", "only a product's own tags need a bundle row"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.32.0", "0.32.0"),
        ("docker.io/vllm/vllm-openai:0.31.1-cuda12", "0.31.1"),
        ("public.ecr.aws/q9t5s3a7/vllm-openai:v0.30.0", "0.30.0"),  # a mirror, by name
        # Downstream products' own versions are never vLLM's.
        ("ghcr.io/llm-d/llm-d-cuda:v0.2.0", None),
        ("lmcache/vllm-openai:v0.3.1", None),
        ("registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.1", None),
        # ... but their release notes say which vLLM a release bundles (the rows' bundles).
        ("ghcr.io/llm-d/llm-d-cuda:v0.9.0", "0.26.0"),
        ("ghcr.io/llm-d/llm-d-cuda:v0.8.1", "0.23.0"),
        ("ghcr.io/llm-d/llm-d-aws:v0.8.0", "0.23.0"),
        ("registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.2.2", "0.10.1"),
        ("registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.3.0", "0.13.0"),
        ("registry.redhat.io/rhaiis/vllm-cuda-rhel9:3.4.0", None),
        # A vLLM version anywhere in an image that says where it carries one.
        ("aibrix/vllm-openai:aibrix-kvcache-v0.8.5-20250520", "0.8.5"),
        ("aibrix/vllm-openai:v0.7.3.self.post1", "0.7.3"),
        ("redis:7.2.4", None),
        # A product tag names vLLM only through a cited bundle row (NVIDIA's release
        # notes, KAITO's kaito-base tag history); a tag no row covers names none.
        ("nvcr.io/nvidia/vllm:26.01-py3", "0.11.1"),
        ("nvcr.io/nvidia/vllm:26.02-py3", None),
        ("mcr.microsoft.com/aks/kaito/kaito-base:0.4.2", "0.22.1"),
        ("mcr.microsoft.com/aks/kaito/kaito-base:0.2.1", "0.12.0"),
        ("mcr.microsoft.com/aks/kaito/kaito-base:0.0.1", None),
    ],
)
def test_version_of_an_image_tag(image: str, version: str | None) -> None:
    assert vllm_version_of_image(image) == version


def test_entrypoints() -> None:
    assert serve_entrypoint("vllm/vllm-openai:v0.32.0") == ("vllm", "serve")
    assert serve_entrypoint("ghcr.io/llm-d/llm-d-cuda:v0.9.0") == (
        "python", "-m", "vllm.entrypoints.openai.api_server",
    )  # fmt: skip
    assert serve_entrypoint("aibrix/vllm-openai:v0.7.3.self.post1") is None  # not known
    assert serve_entrypoint("redis:7") is None
    # NVIDIA's and KAITO's images run the command they are given: args alone start nothing.
    assert serve_entrypoint("nvcr.io/nvidia/vllm:26.01-py3") is None
    assert serve_entrypoint("mcr.microsoft.com/aks/kaito/kaito-base:0.4.2") is None


def test_an_old_downstream_tag_does_not_refuse_the_audit() -> None:
    # llm-d's v0.2.0 is not vLLM 0.2.0: the newest table applies, with the usual warning.
    target = resolve_target(None, "ghcr.io/llm-d/llm-d-cuda:v0.2.0")
    assert target.source == "newest" and target.version == available_versions()[-1]
    # A release its notes map is checked at the vLLM it bundles.
    mapped = resolve_target(None, "ghcr.io/llm-d/llm-d-cuda:v0.9.0")
    assert (mapped.source, mapped.version) == ("image", "0.26.0")
