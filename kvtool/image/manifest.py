"""Manifests, indexes and platform choice, shared by the registry and offline readers.

A source only fetches bytes (:class:`ManifestSource`); :func:`resolve_config` walks
index -> (nested index ->) manifest -> config for one platform, refusing deep nesting,
oversize documents and digests that do not match their bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvtool.errors import KvtoolError
from kvtool.image.errors import RefusedError
from kvtool.limits import LimitExceeded
from kvtool.nesting import loads_json

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
# All four, always: distribution answers 404 for an OCI-index tag when its type is missing.
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))

MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # containerd's limit for manifests and indexes
MAX_CONFIG_BYTES = 8 * 1024 * 1024  # vLLM configs are ~30 KB; anything near this is hostile
MAX_INDEX_DEPTH = 4  # skopeo --all nests one index; more than a few levels is a loop in disguise

ATTESTATION_ANNOTATION = "vnd.docker.reference.type"


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str | None = None

    @classmethod
    def parse(cls, text: str) -> Platform:
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise KvtoolError(f"--platform {text!r}: expected os/arch or os/arch/variant")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    @classmethod
    def from_json(cls, data: Any) -> Platform | None:
        if not isinstance(data, dict):
            return None
        os_, arch = data.get("os"), data.get("architecture")
        if not isinstance(os_, str) or not isinstance(arch, str):
            return None
        variant = data.get("variant")
        return cls(os_, arch, variant if isinstance(variant, str) and variant else None)

    def matches(self, other: Platform) -> bool:
        """Whether ``other`` (from an index) satisfies this request; arm64 means v8."""
        if (self.os, self.architecture) != (other.os, other.architecture):
            return False
        if self.variant is None:
            return True
        return _normal_variant(self.architecture, self.variant) == _normal_variant(
            other.architecture, other.variant
        )

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


def _normal_variant(architecture: str, variant: str | None) -> str | None:
    return variant or ("v8" if architecture == "arm64" else None)


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int | None
    platform: Platform | None
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def is_attestation(self) -> bool:
        return ATTESTATION_ANNOTATION in self.annotations or (
            self.platform is not None and self.platform.os == "unknown"
        )


@dataclass(frozen=True)
class Document:
    """A fetched manifest or index: its media type, digest and raw bytes."""

    media_type: str
    digest: str
    body: bytes


class ManifestSource(Protocol):
    """Where manifests and blobs come from: a registry, a tar, a layout directory."""

    def fetch_manifest(self, reference: str) -> Document:
        """The manifest or index for a tag or digest; its digest verified when by digest."""

    def fetch_blob(self, digest: str, max_bytes: int) -> bytes:
        """The blob's bytes, at most ``max_bytes``, verified against ``digest``."""


def sha256_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def verify_digest(digest: str, body: bytes, what: str) -> None:
    algorithm, _, expected = digest.partition(":")
    if algorithm not in ("sha256", "sha512"):
        raise RefusedError(f"{what}: unsupported digest algorithm {algorithm!r}")
    actual = hashlib.new(algorithm, body).hexdigest()
    if actual != expected:
        raise RefusedError(
            f"{what}: content does not match its digest {digest} (got {algorithm}:{actual})"
        )


def load_json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        data = loads_json(body, what)
    except LimitExceeded as exc:  # a registry's garbage: a refusal, so the verdict says why
        raise RefusedError(str(exc)) from None
    except ValueError as exc:  # bad UTF-8 or JSON, or an integer over Python's digit limit
        raise RefusedError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RefusedError(f"{what} is JSON but not an object")
    return data


def media_type_of(document: Document, data: dict[str, Any]) -> str:
    """The body's mediaType when present (optional in OCI), else the transport's type."""
    declared = data.get("mediaType")
    if isinstance(declared, str) and declared:
        return declared
    if document.media_type in INDEX_TYPES | MANIFEST_TYPES:
        return document.media_type
    # OCI layouts carry no Content-Type: an object with manifests[] is an index.
    return OCI_INDEX if "manifests" in data else OCI_MANIFEST


def parse_descriptor(raw: Any, where: str) -> Descriptor:
    if not isinstance(raw, dict) or not isinstance(raw.get("digest"), str):
        raise RefusedError(f"{where}: descriptor without a digest")
    annotations = raw.get("annotations") or {}
    size = raw.get("size")
    return Descriptor(
        media_type=str(raw.get("mediaType", "")),
        digest=raw["digest"],
        size=size if isinstance(size, int) else None,
        platform=Platform.from_json(raw.get("platform")),
        annotations={str(k): str(v) for k, v in annotations.items()}
        if isinstance(annotations, dict)
        else {},
    )


def select_platform(
    descriptors: list[Descriptor], wanted: Platform, where: str
) -> tuple[Descriptor, list[str]]:
    """The first entry for ``wanted``, attestations skipped; also the platforms on offer.

    Raises a :class:`KvtoolError` listing the available platforms when none matches.
    """
    images = [d for d in descriptors if not d.is_attestation]
    available = [str(d.platform) for d in images if d.platform is not None]
    for descriptor in images:
        if descriptor.platform is not None and wanted.matches(descriptor.platform):
            return descriptor, available
    unlabelled = [d for d in images if d.platform is None]
    if unlabelled:
        # An OCI layout's index.json names a nested index or a single-platform manifest
        # without a platform; the config's own os/architecture is checked afterwards.
        return unlabelled[0], available
    raise KvtoolError(
        f"{where}: no image for platform {wanted}; available: "
        + (", ".join(available) if available else "none")
    )


@dataclass(frozen=True)
class ResolvedConfig:
    config: dict[str, Any]
    config_digest: str
    manifest_digest: str
    index_digest: str | None
    available_platforms: list[str]


def resolve_config(
    source: ManifestSource,
    reference: str,
    wanted: Platform,
    where: str,
    max_config_bytes: int = MAX_CONFIG_BYTES,
) -> ResolvedConfig:
    """Follow ``reference`` down to the config for ``wanted``.

    Invariant: at most :data:`MAX_INDEX_DEPTH` nested indexes are followed; deeper is
    refused as a loop in disguise. A true cycle cannot occur: every source verifies a
    document against the digest it was fetched by, and no document can name its own
    digest (or that of a document naming it).
    """
    document = source.fetch_manifest(reference)
    index_digest: str | None = None
    available: list[str] = []
    for _depth in range(MAX_INDEX_DEPTH + 1):
        data = load_json_object(document.body, f"{where}: manifest {document.digest}")
        media_type = media_type_of(document, data)
        if media_type in INDEX_TYPES:
            if index_digest is None:
                index_digest = document.digest
            raw = data.get("manifests")
            if not isinstance(raw, list):
                raise RefusedError(f"{where}: index {document.digest} has no manifests[] list")
            descriptors = [parse_descriptor(d, f"{where}: index {document.digest}") for d in raw]
            chosen, offered = select_platform(descriptors, wanted, where)
            available = available or offered
            document = source.fetch_manifest(chosen.digest)
            continue
        if media_type not in MANIFEST_TYPES:
            raise RefusedError(
                f"{where}: unsupported manifest media type {media_type!r} "
                "(schema1 and other legacy formats are not read)"
            )
        config = parse_descriptor(data.get("config"), f"{where}: manifest {document.digest}")
        if config.size is not None and config.size > max_config_bytes:
            raise RefusedError(
                f"{where}: config blob {config.digest} declares {config.size} bytes, over the "
                f"{max_config_bytes}-byte cap"
            )
        body = source.fetch_blob(config.digest, max_config_bytes)
        parsed = load_json_object(body, f"{where}: config blob {config.digest}")
        return ResolvedConfig(parsed, config.digest, document.digest, index_digest, available)
    raise RefusedError(f"{where}: indexes nested deeper than {MAX_INDEX_DEPTH} levels (loop?)")
