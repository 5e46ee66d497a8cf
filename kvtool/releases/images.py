"""Container images that run vLLM (``rules/images/entrypoints.toml``): entrypoint and release.

Two questions, one table: does a container that gives only ``args`` start a vLLM
server (its image's entrypoint), and which vLLM release does an image tag name? A
downstream image's own version (``llm-d-cuda:v0.9.0``, ``lmcache/vllm-openai:v0.3.1``)
is never read as vLLM's; only a cited bundle row maps it to the vLLM release inside
(``nvcr.io/nvidia/vllm:26.01-py3`` bundles vLLM 0.11.1, per NVIDIA's release notes).
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Annotated, Literal

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir
from kvtool.versions import InvalidVersion, Version

VLLM_SERVE = ("vllm", "serve")
_VERSION = r"(\d+\.\d+\.\d+(?:(?:\.post|rc|\.dev)\d+)?)(?![\d])"
_LEADING = re.compile(r"^v?" + _VERSION)
_ANYWHERE = re.compile(r"(?:^|[^\d.])v?" + _VERSION)
# A downstream product's own version at the head of its tag: 0.4.2, v1.2, 26.01-py3.
_PRODUCT = re.compile(r"^v?(\d+(?:\.\d+)+)(?![\d])")
# Tags of vLLM's own images that follow its newest code rather than a release.
_MOVING = re.compile(r"^(latest|nightly|main)([-_.].*)?$", re.IGNORECASE)


def _check_versions(*values: str | None) -> None:
    for value in values:
        if value is not None:
            try:
                Version(value)
            except InvalidVersion as exc:
                raise ValueError(f"not a release version: {value!r}") from exc


class Bundle(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Downstream tags (by the product's own version) that bundle one vLLM release.

    ``products``: exact product versions; or ``since``/``until``: a half-open range of
    them. ``source``: a public page that states the bundled release.
    """

    vllm: str
    products: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    source: Annotated[str, msgspec.Meta(min_length=3)]

    def __post_init__(self) -> None:
        _check_versions(self.vllm, self.since, self.until, *self.products)
        if bool(self.products) == (self.since is not None):
            raise ValueError(f"bundle of vLLM {self.vllm}: give products or since, not both")

    def holds_for(self, product: Version) -> bool:
        if self.products:
            return any(product == Version(p) for p in self.products)
        assert self.since is not None
        return product >= Version(self.since) and (
            self.until is None or product < Version(self.until)
        )


class ImageRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    repository: str  # "owner/name", or "*/name" for that name under any owner
    tag: Literal["vllm", "anywhere", "product"]
    entrypoint: tuple[str, ...] | None = None
    since: str | None = None
    until: str | None = None
    source: Annotated[str, msgspec.Meta(min_length=3)]
    bundles: tuple[Bundle, ...] = ()  # only for tag = "product"

    def __post_init__(self) -> None:
        _check_versions(self.since, self.until)

    def bundled_vllm(self, tag: str) -> str | None:
        """The vLLM release a product tag bundles, when a cited bundle row says so."""
        match = _PRODUCT.match(tag)
        if match is None:
            return None
        try:
            product = Version(match.group(1))
        except InvalidVersion:
            return None
        return next((b.vllm for b in self.bundles if b.holds_for(product)), None)

    def matches(self, repository: str) -> bool:
        if self.repository.startswith("*/"):
            return repository.rsplit("/", 1)[-1] == self.repository[2:]
        return repository == self.repository or repository.endswith("/" + self.repository)

    def holds_for(self, version: str | None) -> bool:
        if version is None:
            return True
        v = Version(version)
        if self.since is not None and v < Version(self.since):
            return False
        return self.until is None or v < Version(self.until)


class ImageRef(msgspec.Struct, frozen=True):
    repository: str  # without registry host
    tag: str | None


def parse_image(image: str) -> ImageRef:
    """``host:5000/owner/name:tag@sha256:...`` -> ``owner/name``, ``tag``."""
    ref = image.strip().split("@", 1)[0]
    slash, colon = ref.rfind("/"), ref.rfind(":")
    tag = ref[colon + 1 :] if colon > slash else None
    name = ref[:colon] if colon > slash else ref
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # a registry host
    return ImageRef("/".join(parts), tag)


@cache
def image_rows() -> tuple[ImageRow, ...]:
    path = rules_dir() / "images" / "entrypoints.toml"
    try:
        return msgspec.convert(read_table(path).get("rows", []), type=tuple[ImageRow, ...])
    except msgspec.ValidationError as exc:
        raise KvtoolError(f"image table {path}: {exc}") from exc


@cache
def image_names() -> tuple[str, ...]:
    """The last path component of every listed repository, lower-cased (``llm-d-cuda``)."""
    return tuple(sorted({r.repository.rsplit("/", 1)[-1].lower() for r in image_rows()}))


@lru_cache(maxsize=1024)  # pure in the image; each container's image is asked several times
def image_row(image: str) -> ImageRow | None:
    """The most specific row for ``image`` (an exact repository before a ``*/name``)."""
    repository = parse_image(image).repository
    rows = [r for r in image_rows() if r.matches(repository)]
    rows.sort(key=lambda r: r.repository.startswith("*/"))
    return rows[0] if rows else None


@lru_cache(maxsize=1024)
def vllm_version_of_image(image: str) -> str | None:
    """The vLLM release an image's tag names, or None when the tag names none.

    Listed images are read as their row says. An unlisted image whose name says vLLM (a
    mirror, a local build of vLLM's Dockerfile) is read like vLLM's own only when its
    leading version could be a vLLM release (:func:`could_be_vllm_release`): a derived
    project's own numbering (``opea/vllm-gaudi:1.22.0``) is not. Other unlisted images
    name no vLLM release.
    """
    ref = parse_image(image)
    if ref.tag is None:
        return None
    row = image_row(image)
    if row is None:
        if "vllm" not in ref.repository.rsplit("/", 1)[-1].lower():
            return None
        match = _LEADING.search(ref.tag)
        return match.group(1) if match and could_be_vllm_release(match.group(1)) else None
    if row.tag == "product":
        return row.bundled_vllm(ref.tag)
    match = (_LEADING if row.tag == "vllm" else _ANYWHERE).search(ref.tag)
    return match.group(1) if match else None


def could_be_vllm_release(version: str) -> bool:
    """Whether ``version`` is in a release series kvtool has tables for, or newer than the
    newest table within its major version (a release published after these tables)."""
    from kvtool.releases.loader import available_versions

    try:
        wanted = Version(version)
    except InvalidVersion:
        return False
    tabled = [Version(v) for v in available_versions()]
    if any(v.release[:2] == wanted.release[:2] for v in tabled):
        return True
    return bool(tabled) and wanted > tabled[-1] and wanted.major == tabled[-1].major


def names_other_release(image: str) -> bool:
    """Whether a vLLM image's reference leaves its vLLM release unknown: the tag does not
    parse as a vLLM release and no row maps it (``quay.io/modh/vllm:rhoai-2.13-cuda``,
    ``llm-d/llm-d-cuda:v0.2.0``, ``opea/vllm-gaudi:1.22.0``, a dated vendor nightly, a
    build pinned by digest alone). vLLM's own images at a tag that follows vLLM's newest
    code (``latest``, ``nightly``, no tag) are the one place the newest table stands in.
    Images neither listed nor named for vLLM say nothing either way (False)."""
    if vllm_version_of_image(image) is not None:
        return False
    ref = parse_image(image)
    row = image_row(image)
    named_for_vllm = "vllm" in ref.repository.rsplit("/", 1)[-1].lower()
    if row is None and not named_for_vllm:
        return False
    follows_vllm = row is None or row.tag == "vllm"
    if ref.tag is None:
        # no tag is `latest`; a digest alone pins a build whose release it does not say
        return "@" in image or not follows_vllm
    return not (follows_vllm and _MOVING.match(ref.tag) is not None)


def serve_entrypoint(image: str) -> tuple[str, ...] | None:
    """The entrypoint of ``image`` when it starts a vLLM server, else None (unknown too)."""
    row = image_row(image)
    if row is None:
        # An unlisted image named for vLLM (a mirror or a local build of vLLM's
        # Dockerfile) is taken to keep vLLM's entrypoint, as `docker run IMAGE ARGS` expects.
        name = parse_image(image).repository.rsplit("/", 1)[-1].lower()
        return VLLM_SERVE if "vllm" in name else None
    if row.entrypoint is None:
        return None
    return row.entrypoint if row.holds_for(_table_version(image)) else None


def _table_version(image: str) -> str | None:
    version = vllm_version_of_image(image)
    if version is None:
        return None
    try:
        return Version(version).base_version
    except InvalidVersion:
        return None
