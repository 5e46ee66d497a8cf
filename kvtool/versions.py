"""Release versions and version ranges, ordered as PEP 440 orders them.

kvtool compares vLLM, LMCache and image release numbers (``0.32.0``, ``0.9.2.post1``,
``0.11.0rc2``, ``0.10.1.dev3+gabc``) and checks them against the ranges bug records
carry (``>=0.26.0``). The ``packaging`` library does this too, but importing its
specifier module costs an audit's cold start more than all the version checks it makes
(issue 26), so this module holds the part of PEP 440 kvtool needs: the whole version
grammar (https://peps.python.org/pep-0440/#appendix-b-parsing-version-strings-with-regular-expressions
describes it) and the ordered-comparison, equality and compatible-release clauses,
without wildcards or arbitrary equality. A property test checks both against
``packaging`` on generated versions.
"""

from __future__ import annotations

import re
from functools import cache, total_ordering
from typing import Final

__all__ = ["InvalidSpecifier", "InvalidVersion", "Version", "VersionRange"]


class InvalidVersion(ValueError):
    """Text that is not a PEP 440 version."""


class InvalidSpecifier(ValueError):
    """Text that is not a version range kvtool understands."""


_VERSION_TEXT: Final = r"""
    v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_letter>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_number>[0-9]+)?)?
    (?:-(?P<post_bare>[0-9]+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post_number>[0-9]+)?(?P<post_word>))?
    (?:[-_.]?(?P<dev_word>dev)[-_.]?(?P<dev_number>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
"""


@cache
def _grammar() -> re.Pattern[str]:
    """The whole grammar, over lower-cased text (compiled on the first version that is not
    plain ``N.N.N``: compiling it case-insensitively at import cost a cold start more than
    packaging's import saved)."""
    return re.compile(rf"\s*{_VERSION_TEXT}\s*", re.VERBOSE)
# A post-release spelled with a word ("post", "rev", "r") and no number is post 0; the
# empty group above only records that the word was there.
_PRE_SPELLING: Final = {
    "a": "a",
    "alpha": "a",
    "b": "b",
    "beta": "b",
    "c": "rc",
    "rc": "rc",
    "pre": "rc",
    "preview": "rc",
}
_PRE_RANK: Final = {"a": 0, "b": 1, "rc": 2}

LocalPart = int | str


@total_ordering
class Version:
    """One PEP 440 version; ``InvalidVersion`` for text that is not one.

    Equal versions compare and hash alike whatever their spelling (``1.0`` and
    ``1.0.0``, ``1.0-1`` and ``1.0.post1``).
    """

    __slots__ = ("_key", "dev", "epoch", "local", "post", "pre", "release")

    epoch: int
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: str | None

    def __init__(self, text: str) -> None:
        parts = text.split(".")
        if all(part.isascii() and part.isdigit() for part in parts):  # plain N.N.N
            self.epoch, self.release = 0, tuple(int(part) for part in parts)
            self.pre = self.post = self.dev = self.local = None
            self._key = _sort_key(self)
            return
        match = _grammar().fullmatch(text.lower())
        if match is None:
            raise InvalidVersion(f"Invalid version: {text!r}")
        self.epoch = int(match["epoch"] or 0)
        self.release = tuple(int(part) for part in match["release"].split("."))
        letter = match["pre_letter"]
        self.pre = (
            (_PRE_SPELLING[letter.lower()], int(match["pre_number"] or 0)) if letter else None
        )
        if match["post_bare"] is not None:
            self.post = int(match["post_bare"])
        elif match["post_word"] is not None:
            self.post = int(match["post_number"] or 0)
        else:
            self.post = None
        self.dev = int(match["dev_number"] or 0) if match["dev_word"] else None
        local = match["local"]
        self.local = local.replace("-", ".").replace("_", ".") if local else None
        self._key = _sort_key(self)

    @property
    def public(self) -> str:
        """The version without its local part (``1.0+abc`` -> ``1.0``)."""
        return str(self).split("+", 1)[0]

    @property
    def base_version(self) -> str:
        """Epoch and release only (``1.0rc1.post2`` -> ``1.0``)."""
        release = ".".join(str(part) for part in self.release)
        return f"{self.epoch}!{release}" if self.epoch else release

    @property
    def major(self) -> int:
        return self.release[0]

    @property
    def minor(self) -> int:
        return self.release[1] if len(self.release) > 1 else 0

    @property
    def micro(self) -> int:
        return self.release[2] if len(self.release) > 2 else 0

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    @property
    def is_postrelease(self) -> bool:
        return self.post is not None

    @property
    def is_devrelease(self) -> bool:
        return self.dev is not None

    def __str__(self) -> str:
        text = self.base_version
        if self.pre is not None:
            text += f"{self.pre[0]}{self.pre[1]}"
        if self.post is not None:
            text += f".post{self.post}"
        if self.dev is not None:
            text += f".dev{self.dev}"
        if self.local is not None:
            text += f"+{self.local}"
        return text

    def __repr__(self) -> str:
        return f"<Version({str(self)!r})>"

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key == other._key

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key < other._key


_SortKey = tuple[object, ...]


def _sort_key(version: Version) -> _SortKey:
    """A tuple ordering versions as PEP 440 does: trailing zeros of the release do not
    count; a dev release of a final comes before its pre-releases; a final comes after
    its pre-releases and before its post-releases; a local version after its public one,
    numeric local parts after alphanumeric ones."""
    release = list(version.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    if version.pre is not None:
        pre: tuple[int, ...] = (1, _PRE_RANK[version.pre[0]], version.pre[1])
    elif version.post is None and version.dev is not None:
        pre = (0,)
    else:
        pre = (2,)
    post = (0,) if version.post is None else (1, version.post)
    dev = (1,) if version.dev is None else (0, version.dev)
    if version.local is None:
        local: tuple[object, ...] = (0,)
    else:
        local = (1, tuple(_local_part(part) for part in version.local.split(".")))
    return (version.epoch, tuple(release), pre, post, dev, local)


def _local_part(part: str) -> tuple[int, int, str]:
    return (1, int(part), "") if part.isdigit() else (0, 0, part)


_CLAUSE: Final = re.compile(r"\s*(?P<operator>~=|==|!=|<=|>=|<|>)(?P<version>.*)", re.DOTALL)


class VersionRange:
    """A comma-separated list of clauses (``>=0.26.0``, ``>=0.9,<0.11``, ``~=0.10.1``,
    ``!=0.10.2``), every one of which a version in the range meets.

    As PEP 440 has it, ``<V`` leaves out V's pre-releases, ``>V`` V's post-releases and
    local versions, and a version's local part is ignored except by ``==``/``!=`` clauses
    that give one. Other pre-releases are in a range they meet, as ``packaging`` 26 holds
    them by default.
    """

    __slots__ = ("_clauses",)

    def __init__(self, text: str) -> None:
        clauses: list[tuple[str, Version]] = []
        for piece in text.split(","):
            if not piece.strip():
                continue
            match = _CLAUSE.fullmatch(piece)
            if match is None:
                raise InvalidSpecifier(f"Invalid specifier: {piece.strip()!r}")
            try:
                operator, version = match["operator"], Version(match["version"])
            except InvalidVersion:
                raise InvalidSpecifier(f"Invalid specifier: {piece.strip()!r}") from None
            if version.local is not None and operator not in ("==", "!="):
                raise InvalidSpecifier(f"Invalid specifier: {piece.strip()!r}")
            if operator == "~=" and len(version.release) < 2:
                raise InvalidSpecifier(f"Invalid specifier: {piece.strip()!r}")
            clauses.append((operator, version))
        self._clauses = tuple(clauses)

    def contains(self, item: str | Version) -> bool:
        version = item if isinstance(item, Version) else Version(item)
        return all(_holds(operator, version, bound) for operator, bound in self._clauses)


def _holds(operator: str, version: Version, bound: Version) -> bool:
    if operator in ("==", "!="):
        candidate = version if bound.local is not None else Version(version.public)
        return (candidate == bound) == (operator == "==")
    public = Version(version.public)
    if operator == ">=":
        return public >= bound
    if operator == "<=":
        return public <= bound
    same_base = Version(version.base_version) == Version(bound.base_version)
    if operator == "<":
        return version < bound and not (
            not bound.is_prerelease and version.is_prerelease and same_base
        )
    if operator == ">":
        return (
            version > bound
            and not (not bound.is_postrelease and version.is_postrelease and same_base)
            and not (version.local is not None and same_base)
        )
    # "~=": at or above the bound, within the series its release names but for the last part
    prefix = bound.release[:-1]
    padded = version.release + (0,) * max(0, len(prefix) - len(version.release))
    return public >= bound and version.epoch == bound.epoch and padded[: len(prefix)] == prefix
