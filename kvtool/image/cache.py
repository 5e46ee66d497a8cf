"""A local cache of resolved configs, keyed by the tag's manifest digest and platform.

Digests are immutable, so an entry never goes stale: a HEAD of the tag (which Docker
Hub does not count as a pull) finds the digest, and a hit skips every GET. Entries
live under ``$XDG_CACHE_HOME/kvtool/configs`` (``~/.cache`` when unset); a corrupt or
unreadable entry counts as a miss, and failing to write one never fails a command.
Entries are written atomically (:func:`kvtool.fsio.atomic_write_text`), never through
a symlink planted in the cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kvtool.errors import KvtoolError
from kvtool.fsio import atomic_write_text, read_input_text
from kvtool.image.manifest import Platform, ResolvedConfig, sha256_digest
from kvtool.image.reference import DIGEST_RE
from kvtool.nesting import loads_json

ENTRY_VERSION = 1


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvtool" / "configs"


def _entry_path(root: Path, digest: str, platform: Platform) -> Path | None:
    if not DIGEST_RE.match(digest):
        return None
    algorithm, _, hex_digest = digest.partition(":")
    return root / algorithm / hex_digest / (str(platform).replace("/", "_") + ".json")


def load(digest: str, platform: Platform, root: Path | None = None) -> ResolvedConfig | None:
    """The cached resolution of ``digest`` for ``platform``, or None on a miss."""
    path = _entry_path(root or cache_root(), digest, platform)
    if path is None or not path.is_file():
        return None
    try:
        entry = loads_json(read_input_text(path), str(path))
        config_text = entry["config"]
        if entry.get("version") != ENTRY_VERSION:
            return None
        if sha256_digest(config_text.encode("utf-8")) != entry["config_text_digest"]:
            return None
        return ResolvedConfig(
            config=loads_json(config_text, str(path)),
            config_digest=str(entry["config_digest"]),
            manifest_digest=str(entry["manifest_digest"]),
            index_digest=entry.get("index_digest"),
            available_platforms=[str(p) for p in entry.get("available_platforms", [])],
        )
    except (KvtoolError, ValueError, KeyError, TypeError):
        return None  # a damaged entry is a miss: the registry is asked again


def store(
    digest: str, platform: Platform, resolved: ResolvedConfig, root: Path | None = None
) -> None:
    """Remember ``resolved`` under ``digest``; silently skipped when the disk refuses."""
    path = _entry_path(root or cache_root(), digest, platform)
    if path is None:
        return
    config_text = json.dumps(resolved.config, sort_keys=True)
    entry = {
        "version": ENTRY_VERSION,
        "manifest_digest": resolved.manifest_digest,
        "config_digest": resolved.config_digest,
        "index_digest": resolved.index_digest,
        "available_platforms": resolved.available_platforms,
        "config": config_text,
        "config_text_digest": sha256_digest(config_text.encode("utf-8")),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(entry), follow_symlinks=False, own_file=True)
    except (OSError, KvtoolError):
        return
