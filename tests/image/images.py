"""Synthetic vLLM-like images: configs with builder-specific histories, pushed over HTTP
or written as docker save / OCI layout / OCI archive inputs.

History lines follow the formats each builder records (shared/reference/
image-inspection-and-audit-ux.md §A.4); the RUN body is shaped like vLLM's
vllm-openai-base stage so the "strong evidence" path is exercised.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from kvtool.image.manifest import DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST

Style = Literal["buildkit-new", "buildkit-old", "classic", "buildah", "none"]
LAYER_MEDIA = {
    OCI_MANIFEST: "application/vnd.oci.image.layer.v1.tar+gzip",
    DOCKER_MANIFEST: "application/vnd.docker.image.rootfs.diff.tar.gzip",
}
CONFIG_MEDIA = {
    OCI_MANIFEST: "application/vnd.oci.image.config.v1+json",
    DOCKER_MANIFEST: "application/vnd.docker.container.image.v1+json",
}
ARCH_LIST = "torch_cuda_arch_list=7.0 7.5 8.0 8.9 9.0 10.0 12.0"
BODY = (
    'if [ "$INSTALL_KV_CONNECTORS" = "true" ]; then uv pip install --system -r '
    "requirements/kv_connectors.txt; fi; uv pip install --system accelerate hf_transfer"
)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def history(style: Style, kv: bool, arch: str = "amd64") -> list[dict[str, Any]]:
    """The history[] a builder records for ``--build-arg INSTALL_KV_CONNECTORS=<kv>``."""
    value = "true" if kv else "false"
    base = [{"created_by": "/bin/sh -c #(nop) ADD file:abc in / ", "empty_layer": False}]
    if style == "none":
        return [*base, {"created_by": "RUN /bin/sh -c pip install vllm # buildkit"}]
    if style == "buildkit-new":
        lines = [
            f"ARG INSTALL_KV_CONNECTORS={value}",
            f"RUN |3 TARGETPLATFORM=linux/{arch} INSTALL_KV_CONNECTORS={value} {ARCH_LIST} "
            f"/bin/bash -c {BODY} # buildkit",
        ]
    elif style == "buildkit-old":  # the ARG line shows the Dockerfile default
        lines = [
            "ARG INSTALL_KV_CONNECTORS=false",
            f"RUN |2 TARGETPLATFORM=linux/{arch} INSTALL_KV_CONNECTORS={value} "
            f"/bin/bash -c {BODY} # buildkit",
        ]
    elif style == "classic":
        lines = [
            "/bin/sh -c #(nop)  ARG INSTALL_KV_CONNECTORS=false",
            f"|1 INSTALL_KV_CONNECTORS={value} /bin/sh -c {BODY}",
        ]
    else:  # buildah: no value on the ARG line; |N counts words
        lines = [
            "/bin/sh -c #(nop) ARG INSTALL_KV_CONNECTORS",
            f"|8 INSTALL_KV_CONNECTORS={value} {ARCH_LIST} /bin/sh -c {BODY}",
        ]
    return base + [
        {"created_by": line, "empty_layer": line.startswith(("ARG", "/bin/sh -c #(nop)"))}
        for line in lines
    ]


@dataclass
class Image:
    """One platform's image: a gzipped layer plus its config."""

    arch: str = "amd64"
    variant: str | None = None
    style: Style = "buildkit-new"
    kv: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    env: list[str] = field(default_factory=lambda: ["CUDA_VERSION=12.9.1"])
    media_type: str = OCI_MANIFEST
    config_padding: int = 0  # extra bytes in the config, for size-cap tests

    def layer(self) -> tuple[bytes, str]:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            data = f"{self.arch} {self.style} {self.kv}\n".encode()
            info = tarfile.TarInfo("etc/kvtool-synthetic")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
        uncompressed = raw.getvalue()
        return gzip.compress(uncompressed, mtime=0), digest_of(uncompressed)

    def config(self) -> bytes:
        _, diff_id = self.layer()
        doc: dict[str, Any] = {
            "architecture": self.arch,
            "os": "linux",
            "config": {
                "Env": self.env,
                "Labels": self.labels,
                "Entrypoint": ["vllm", "serve"],
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": history(self.style, self.kv, self.arch),
        }
        if self.variant:
            doc["variant"] = self.variant
        if self.config_padding:
            doc["padding"] = "x" * self.config_padding
        return json.dumps(doc).encode()

    def manifest(self) -> bytes:
        layer, _ = self.layer()
        config = self.config()
        return json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": self.media_type,
                "config": {
                    "mediaType": CONFIG_MEDIA[self.media_type],
                    "digest": digest_of(config),
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": LAYER_MEDIA[self.media_type],
                        "digest": digest_of(layer),
                        "size": len(layer),
                    }
                ],
            }
        ).encode()

    def blobs(self) -> list[bytes]:
        return [self.layer()[0], self.config()]

    def platform(self) -> dict[str, str]:
        found = {"os": "linux", "architecture": self.arch}
        if self.variant:
            found["variant"] = self.variant
        return found


def attestation(subject: bytes) -> tuple[bytes, list[bytes], dict[str, Any]]:
    """A BuildKit-style attestation manifest, its blob, and its index entry."""
    statement = json.dumps({"_type": "https://in-toto.io/Statement/v0.1"}).encode()
    empty_config = b"{}"
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest_of(empty_config),
                "size": 2,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.in-toto+json",
                    "digest": digest_of(statement),
                    "size": len(statement),
                }
            ],
        }
    ).encode()
    entry = {
        "mediaType": OCI_MANIFEST,
        "digest": digest_of(manifest),
        "size": len(manifest),
        "platform": {"os": "unknown", "architecture": "unknown"},
        "annotations": {
            "vnd.docker.reference.type": "attestation-manifest",
            "vnd.docker.reference.digest": digest_of(subject),
        },
    }
    return manifest, [statement, empty_config], entry


def index(
    images: list[Image], media_type: str = OCI_INDEX, with_attestation: bool = True
) -> tuple[bytes, list[tuple[bytes, str]]]:
    """The index bytes plus the (manifest, media type) documents it lists."""
    entries, documents = [], []
    for image in images:
        manifest = image.manifest()
        documents.append((manifest, image.media_type))
        entries.append(
            {
                "mediaType": image.media_type,
                "digest": digest_of(manifest),
                "size": len(manifest),
                "platform": image.platform(),
            }
        )
    if with_attestation and media_type == OCI_INDEX:
        manifest, _, entry = attestation(images[0].manifest())
        documents.append((manifest, OCI_MANIFEST))
        entries.append(entry)
    return json.dumps(
        {"schemaVersion": 2, "mediaType": media_type, "manifests": entries}
    ).encode(), documents


class Pusher:
    """Pushes blobs and manifests with the distribution upload protocol (POST then PUT)."""

    def __init__(
        self,
        base_url: str,
        repository: str,
        token_url: str | None = None,
        user: tuple[str, str] | None = None,
    ) -> None:
        self.base = f"{base_url}/v2/{repository}"
        """Bearer auth when ``token_url`` is given (``user`` asks the token server),
        else Basic auth when ``user`` is, else anonymous."""
        headers = {}
        if token_url is not None:
            assert user is not None
            answer = httpx.get(
                token_url,
                params={
                    "service": "kvtool-test-registry",
                    "scope": f"repository:{repository}:pull,push",
                },
                auth=user,
            )
            answer.raise_for_status()
            headers["Authorization"] = f"Bearer {answer.json()['token']}"
        basic = user if token_url is None else None
        self.http = httpx.Client(headers=headers, auth=basic, timeout=30)

    def blob(self, data: bytes) -> str:
        digest = digest_of(data)
        if self.http.head(f"{self.base}/blobs/{digest}").status_code == 200:
            return digest
        started = self.http.post(f"{self.base}/blobs/uploads/")
        assert started.status_code == 202, started.text
        location = httpx.URL(self.base).join(started.headers["location"])
        done = self.http.put(location.copy_add_param("digest", digest), content=data)
        assert done.status_code == 201, done.text
        return digest

    def manifest(self, reference: str, body: bytes, media_type: str) -> str:
        put = self.http.put(
            f"{self.base}/manifests/{reference}", content=body, headers={"Content-Type": media_type}
        )
        assert put.status_code == 201, put.text
        return digest_of(body)

    def image(self, tag: str, image: Image) -> str:
        for blob in image.blobs():
            self.blob(blob)
        return self.manifest(tag, image.manifest(), image.media_type)

    def multi(self, tag: str, images: list[Image], media_type: str = OCI_INDEX) -> str:
        for image in images:
            for blob in image.blobs():
                self.blob(blob)
        body, documents = index(images, media_type)
        if media_type == OCI_INDEX:
            for blob in attestation(images[0].manifest())[1]:
                self.blob(blob)
        for manifest, manifest_type in documents:
            self.manifest(digest_of(manifest), manifest, manifest_type)
        return self.manifest(tag, body, media_type)


# -- offline inputs ---------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    tar.addfile(info, io.BytesIO(data))


def docker_save(path: Path, image: Image, repo_tag: str, layout: Literal["legacy", "25+"]) -> None:
    """A ``docker save`` tar: legacy (<hex>.json at the root) or Docker 25+ (blobs/sha256)."""
    layer, _ = image.layer()
    config = image.config()
    config_hex = digest_of(config).split(":")[1]
    layer_hex = digest_of(layer).split(":")[1]
    with tarfile.open(path, "w") as tar:
        if layout == "legacy":
            config_name, layer_name = f"{config_hex}.json", f"{layer_hex}/layer.tar"
            _add(tar, f"{layer_hex}/VERSION", b"1.0")
            _add(
                tar,
                "repositories",
                json.dumps(
                    {repo_tag.rsplit(":", 1)[0]: {repo_tag.rsplit(":", 1)[1]: layer_hex}}
                ).encode(),
            )
        else:
            config_name, layer_name = f"blobs/sha256/{config_hex}", f"blobs/sha256/{layer_hex}"
            _add(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
            manifest = image.manifest()
            _add(tar, f"blobs/sha256/{digest_of(manifest).split(':')[1]}", manifest)
            _add(
                tar,
                "index.json",
                json.dumps(
                    {
                        "schemaVersion": 2,
                        "manifests": [
                            {
                                "mediaType": image.media_type,
                                "digest": digest_of(manifest),
                                "size": len(manifest),
                                "annotations": {"io.containerd.image.name": repo_tag},
                            }
                        ],
                    }
                ).encode(),
            )
        _add(tar, config_name, config)
        _add(tar, layer_name, layer)
        _add(
            tar,
            "manifest.json",
            json.dumps(
                [{"Config": config_name, "RepoTags": [repo_tag], "Layers": [layer_name]}]
            ).encode(),
        )


def oci_layout(root: Path, images: list[Image], ref_name: str, nested: bool = True) -> None:
    """An OCI layout; with ``nested``, index.json points at an index (as skopeo --all writes)."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = digest_of(data)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return digest

    for image in images:
        for blob in image.blobs():
            put(blob)
    if nested:
        body, documents = index(images, OCI_INDEX, with_attestation=False)
        for manifest, _ in documents:
            put(manifest)
        top = {"mediaType": OCI_INDEX, "digest": put(body), "size": len(body)}
    else:
        manifest = images[0].manifest()
        top = {"mediaType": images[0].media_type, "digest": put(manifest), "size": len(manifest)}
    top["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))


def tar_directory(root: Path, path: Path) -> None:
    """An OCI archive: the layout directory's files in a tar, paths relative to it."""
    with tarfile.open(path, "w") as tar:
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            _add(tar, str(file.relative_to(root)), file.read_bytes())
