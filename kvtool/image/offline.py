"""Read an image config from ``docker save`` tars, OCI layout directories and OCI archives.

Nothing is extracted to disk: members are read from the tar in memory, capped in
size. An archive with a member whose name escapes it (absolute, or ``..``) is refused
whole, and only regular files are read (a symlinked config is refused).
"""

from __future__ import annotations

import json
import tarfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from kvtool import limits
from kvtool.errors import KvtoolError
from kvtool.fsio import note_input
from kvtool.image.errors import RefusedError
from kvtool.image.manifest import (
    MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES,
    OCI_INDEX,
    Document,
    Platform,
    ResolvedConfig,
    load_json_object,
    resolve_config,
    sha256_digest,
    verify_digest,
)
from kvtool.image.model import ImageSource
from kvtool.image.reference import DIGEST_RE
from kvtool.limits import LimitExceeded
from kvtool.nesting import loads_json

TOP_INDEX = "index.json"  # the reference resolve_config starts from in an OCI layout
REF_NAME_ANNOTATIONS = ("org.opencontainers.image.ref.name", "io.containerd.image.name")
MAX_DOCKER_MANIFEST_BYTES = MAX_MANIFEST_BYTES


@dataclass
class OfflineImage:
    kind: ImageSource
    resolved: ResolvedConfig
    name: str | None  # the repo tag or ref name the image was chosen by


def read_offline(
    path: Path, wanted: Platform, name: str | None, max_config_bytes: int = MAX_CONFIG_BYTES
) -> OfflineImage:
    """The config of the image named ``name`` (or the only one) in ``path``."""
    note_input(path)  # read through tarfile: no report of this run may replace it
    if path.is_dir():
        return _read_layout(_LayoutDir(path, name), "oci-layout", wanted, max_config_bytes)
    if not path.is_file():
        raise KvtoolError(f"{path}: no such file or directory")
    try:
        archive = tarfile.open(path, "r:*")  # noqa: SIM115 -- closed by the with below
    except tarfile.TarError:
        # tarfile's own message lists every compression it tried, one per line.
        raise KvtoolError(
            f"{path}: not a tar archive (plain, gzip, bzip2 or xz), so neither a docker save "
            "nor an OCI archive"
        ) from None
    except OSError as exc:
        raise KvtoolError(f"{path}: cannot read: {exc.strerror}") from None
    with archive:
        members = _safe_members(archive, path)
        if "manifest.json" in members:
            return _read_docker_archive(archive, members, path, name, max_config_bytes)
        if TOP_INDEX in members:
            source = _TarLayout(archive, members, path, name)
            return _read_layout(source, "oci-archive", wanted, max_config_bytes)
    raise KvtoolError(
        f"{path}: neither a docker save archive (manifest.json) nor an OCI archive (index.json)"
    )


def _safe_members(archive: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    """The archive's members by normalised name, refusing names outside the archive.

    Listing a compressed archive decompresses it, so members are counted and their sizes
    summed while listing: past ``archive_members`` members, or past ``archive_ratio``
    times the file's own size (a gzip bomb), the listing stops before decompressing more.
    """
    members: dict[str, tarfile.TarInfo] = {}
    compressed = path.stat().st_size
    budget = limits.ARCHIVE_RATIO.value * max(compressed, 1 << 20)
    infos: list[tarfile.TarInfo] = []
    unpacked = 0
    try:
        while (info := archive.next()) is not None:
            infos.append(info)
            limits.ARCHIVE_MEMBERS.check(len(infos), f"{path}: members")
            unpacked += info.size
            if unpacked > budget:
                raise limits.LimitExceeded(
                    limits.ARCHIVE_RATIO.message(f"{path}: {unpacked} bytes unpacked so far")
                )
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise KvtoolError(f"{path}: damaged tar archive: {exc}") from None
    for info in infos:
        pure = PurePosixPath(info.name)
        if pure.is_absolute() or ".." in pure.parts:
            raise RefusedError(f"{path}: refused: member {info.name!r} points outside the archive")
        members[str(PurePosixPath(*[p for p in pure.parts if p != "."]))] = info
    return members


def _read_member(
    archive: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    name: str,
    max_bytes: int,
    where: Path,
) -> bytes:
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts:
        raise RefusedError(f"{where}: refused: {name!r} points outside the archive")
    info = members.get(str(pure))
    if info is None:
        raise RefusedError(f"{where}: {name!r} is referenced but not in the archive")
    if not info.isreg():
        raise RefusedError(f"{where}: refused: {name!r} is not a regular file (link or device)")
    if info.size > max_bytes:
        raise RefusedError(f"{where}: {name!r} is {info.size} bytes, over the {max_bytes}-byte cap")
    handle = archive.extractfile(info)
    if handle is None:
        raise RefusedError(f"{where}: cannot read {name!r}")
    with handle:
        return handle.read(max_bytes + 1)


def _read_docker_archive(
    archive: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    path: Path,
    name: str | None,
    max_config_bytes: int,
) -> OfflineImage:
    """The config a ``docker save`` tar holds; single-platform, so ``--platform`` is not
    applied here (the report warns when the config is for another platform)."""
    raw = _read_member(archive, members, "manifest.json", MAX_DOCKER_MANIFEST_BYTES, path)
    try:
        entries = loads_json(raw, f"{path}: manifest.json")
    except LimitExceeded as exc:
        raise RefusedError(str(exc)) from None
    except ValueError as exc:  # not UTF-8 or JSON, or an integer past Python's digit limit
        raise RefusedError(f"{path}: manifest.json is not valid JSON: {exc}") from None
    if (
        not isinstance(entries, list)
        or not entries
        or not all(isinstance(e, dict) for e in entries)
    ):
        raise RefusedError(f"{path}: manifest.json is not a non-empty list of image entries")
    entry, chosen_name = _choose_entry(entries, name, path)
    config_path = entry.get("Config")
    if not isinstance(config_path, str):
        raise RefusedError(f"{path}: manifest.json entry has no Config path")
    body = _read_member(archive, members, config_path, max_config_bytes, path)
    # Legacy saves name the config <hex>.json, Docker 25+ saves blobs/sha256/<hex>.
    hex_digest = PurePosixPath(config_path).name.removesuffix(".json")
    config_digest = f"sha256:{hex_digest}"
    if DIGEST_RE.match(config_digest):
        verify_digest(config_digest, body, f"{path}: {config_path}")
    else:
        config_digest = sha256_digest(body)
    config = load_json_object(body, f"{path}: {config_path}")
    resolved = ResolvedConfig(config, config_digest, config_digest, None, [])
    return OfflineImage("docker-archive", resolved, chosen_name)


def _choose_entry(
    entries: list[dict[str, Any]], name: str | None, path: Path
) -> tuple[dict[str, Any], str | None]:
    def tags(entry: dict[str, Any]) -> list[str]:
        found = entry.get("RepoTags")
        return [str(t) for t in found] if isinstance(found, list) else []

    if name is None:
        if len(entries) > 1:
            offered = ", ".join(t for e in entries for t in tags(e)) or "untagged images"
            raise KvtoolError(
                f"{path}: holds {len(entries)} images; pick one with --ref ({offered})"
            )
        return entries[0], next(iter(tags(entries[0])), None)
    for entry in entries:
        for tag in tags(entry):
            if _name_matches(tag, name):
                return entry, tag
    offered = ", ".join(t for e in entries for t in tags(e)) or "none"
    raise KvtoolError(f"{path}: no image tagged {name!r}; tags: {offered}")


def _name_matches(candidate: str, wanted: str) -> bool:
    """Full names match exactly; a bare tag matches the tag part of a full name."""
    if candidate == wanted:
        return True
    tail = candidate.rsplit("/", 1)[-1]
    return tail == wanted or tail.rsplit(":", 1)[-1] == wanted


class _LayoutBase:
    """An OCI image layout (``oci-layout`` + ``index.json`` + ``blobs/``), dir or tar;
    ``name`` narrows index.json to the image of that ref name (all when None)."""

    def __init__(self, where: str, name: str | None) -> None:
        self.where, self.name = where, name

    def read(self, relative: str, max_bytes: int) -> bytes:
        raise NotImplementedError

    def fetch_manifest(self, reference: str) -> Document:
        if reference == TOP_INDEX:
            body = self.read(TOP_INDEX, MAX_MANIFEST_BYTES)
            return Document(OCI_INDEX, sha256_digest(body), self._filtered(body))
        body = self.fetch_blob(reference, MAX_MANIFEST_BYTES)
        return Document("", reference, body)

    def fetch_blob(self, digest: str, max_bytes: int) -> bytes:
        if not DIGEST_RE.match(digest):
            raise RefusedError(f"{self.where}: refused: {digest!r} is not a sha256/sha512 digest")
        algorithm, _, hex_digest = digest.partition(":")
        body = self.read(f"blobs/{algorithm}/{hex_digest}", max_bytes)
        verify_digest(digest, body, f"{self.where}: blob {digest}")
        return body

    def _filtered(self, body: bytes) -> bytes:
        """index.json narrowed to the entries named ``self.name`` (all when no name)."""
        if self.name is None:
            return body
        data = load_json_object(body, f"{self.where}: index.json")
        entries = data.get("manifests")
        if not isinstance(entries, list):
            return body
        kept = [e for e in entries if isinstance(e, dict) and self._named(e)]
        if not kept:
            names = sorted({n for e in entries if isinstance(e, dict) for n in _ref_names(e)})
            raise KvtoolError(
                f"{self.where}: no image named {self.name!r}; names: {', '.join(names) or 'none'}"
            )
        return json.dumps({**data, "manifests": kept}).encode()

    def _named(self, entry: dict[str, Any]) -> bool:
        assert self.name is not None
        return any(_name_matches(n, self.name) for n in _ref_names(entry))


def _ref_names(entry: dict[str, Any]) -> list[str]:
    annotations = entry.get("annotations")
    if not isinstance(annotations, dict):
        return []
    return [str(annotations[k]) for k in REF_NAME_ANNOTATIONS if k in annotations]


class _LayoutDir(_LayoutBase):
    def __init__(self, root: Path, name: str | None) -> None:
        super().__init__(str(root), name)
        self.root = root.resolve()
        if not (root / TOP_INDEX).is_file():
            raise KvtoolError(f"{root}: not an OCI layout directory (no index.json)")

    def read(self, relative: str, max_bytes: int) -> bytes:
        try:
            target = (self.root / relative).resolve()
        except (OSError, RuntimeError):  # pathlib raises RuntimeError for a symlink loop
            raise RefusedError(f"{self.where}: refused: {relative} is a symlink loop") from None
        if not target.is_relative_to(self.root):
            raise RefusedError(f"{self.where}: refused: {relative} resolves outside the layout")
        if not target.is_file():
            raise RefusedError(f"{self.where}: {relative} is referenced but missing")
        size = target.stat().st_size
        if size > max_bytes:
            raise RefusedError(
                f"{self.where}: {relative} is {size} bytes, over the {max_bytes}-byte cap"
            )
        return target.read_bytes()


class _TarLayout(_LayoutBase):
    def __init__(
        self,
        archive: tarfile.TarFile,
        members: dict[str, tarfile.TarInfo],
        path: Path,
        name: str | None,
    ) -> None:
        super().__init__(str(path), name)
        self.archive, self.members, self.path = archive, members, path

    def read(self, relative: str, max_bytes: int) -> bytes:
        return _read_member(self.archive, self.members, relative, max_bytes, self.path)


def _read_layout(
    source: _LayoutBase, kind: ImageSource, wanted: Platform, max_config_bytes: int
) -> OfflineImage:
    resolved = resolve_config(source, TOP_INDEX, wanted, source.where, max_config_bytes)
    # The top index.json is the layout's table of contents, not an image index.
    return OfflineImage(kind, replace(resolved, index_digest=None), source.name)
