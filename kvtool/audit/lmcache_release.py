"""Which LMCache release runs next to vLLM, and what in the input says so.

The serve command cannot name the LMCache release, but the input often does. In order:
``--lmcache-version`` / the ``lmcache-version`` setting; a ``pip install lmcache==X``
in the file the engine is read from (a Dockerfile ``RUN``, a script, a container's
``sh -c``), since it replaces whatever the image holds; the engine image's tag, where
``rules/images/lmcache_tags.toml`` cites that the tag is LMCache's release
(``lmcache/vllm-openai:v0.3.9``); then a pin the rest of the input set agrees on (a
``requirements*.txt`` line ``lmcache==X``, a ``pip install`` in another file); and last,
when nothing in the input names one, the LMCache that vLLM's own image
(``vllm/vllm-openai:vY``) bundles where ``rules/curated/bundling.toml`` records it. Each
answer names where it was read, for the findings that rest on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache, lru_cache
from pathlib import PurePath
from typing import Annotated, Literal

import msgspec

from kvtool.errors import KvtoolError
from kvtool.releases import bundling_pins
from kvtool.releases.images import parse_image
from kvtool.resources import read_table, rules_dir

TAGS_FILE = "images/lmcache_tags.toml"
# ASCII digits, at most nine a part: Arabic-Indic digits or a 5,000-digit part is no release.
_RELEASE = r"v?(\d{1,9}\.\d{1,9}\.\d{1,9}(?:(?:\.post|rc|\.dev)\d{1,9})?)"
# The tag's head is the release; a suffix after "-" (cu129, lightweight) is a build flavour.
_LEADING_TAG = re.compile(r"^" + _RELEASE + r"(?:-[\w.]+)?$", re.ASCII)
# `pip install ... lmcache==X` (also `pip3`, `uv pip`, `python -m pip`), within one
# command: words up to a shell separator, after joining backslash-continued lines. The
# command is found first and the pin searched after its `pip install`: one pattern
# spanning both retried the rest of the line at every `pip install` (quadratic).
_COMMAND = re.compile(r"[^;&|\n]+")
_PIP_INSTALL = re.compile(r"\bpip3?[ \t\r\f\v]+install\b", re.IGNORECASE)
_PIN_AFTER_INSTALL = re.compile(
    r"(?<![\w.-])[\"']?lmcache(?:\[[\w,]*\])?\s*==\s*" + _RELEASE + r"(?![\w.])",
    re.IGNORECASE | re.ASCII,
)
# A bundling row about an image's content: ``where = "image vllm/vllm-openai:v0.32.0"``.
_IMAGE_CONTENT = re.compile(r"^image (?P<repository>[\w.-]+/[\w.-]+):v?\d")
# Only a plain release tag: flavours (``-cu129``) are other builds with other pins
# (bundling.toml's kv_connectors_cu12 row).
_PLAIN_RELEASE_TAG = re.compile(r"^v?(\d{1,9}\.\d{1,9}\.\d{1,9})$", re.ASCII)
# `[ \t]*`, not `\s*`: a line start must not scan on through the blank lines after it.
_REQUIREMENT_PIN = re.compile(
    r"^[ \t]*lmcache(?:\[[\w,]*\])?[ \t]*==[ \t]*" + _RELEASE + r"[ \t]*(?:[;#].*)?$",
    re.IGNORECASE | re.MULTILINE | re.ASCII,
)


class LmcacheRelease(msgspec.Struct, frozen=True):
    """An LMCache release and where it was read, e.g. ``image tag lmcache/vllm-openai:v0.3.9``."""

    version: str
    origin: str
    file: str | None = None  # the input file the pin was read from


class TagRow(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    repository: str  # "owner/name" as parse_image gives it
    tag: Literal["leading"]
    source: Annotated[str, msgspec.Meta(min_length=3)]


@cache
def tag_rows() -> tuple[TagRow, ...]:
    path = rules_dir() / TAGS_FILE
    try:
        return msgspec.convert(read_table(path).get("rows", []), type=tuple[TagRow, ...])
    except msgspec.ValidationError as exc:
        raise KvtoolError(f"image table {path}: {exc}") from exc


@lru_cache(maxsize=1024)
def from_image(image: str) -> LmcacheRelease | None:
    """The LMCache release ``image``'s tag names, when a cited row says its tags do."""
    ref = parse_image(image)
    if ref.tag is None or not any(row.repository == ref.repository for row in tag_rows()):
        return None
    match = _LEADING_TAG.match(ref.tag)
    if match is None:
        return None
    return LmcacheRelease(match.group(1), f"image tag {ref.repository}:{ref.tag}")


@lru_cache(maxsize=1024)
def bundled_in(image: str) -> LmcacheRelease | None:
    """The LMCache release a vLLM image bundles, when a bundling row records that image's
    release (``lmcache==X`` over ``since``/``until``, ``where = "image REPO:vY"``)."""
    ref = parse_image(image)
    release = _PLAIN_RELEASE_TAG.match(ref.tag or "")
    if release is None:
        return None
    for row in bundling_pins():
        content = _IMAGE_CONTENT.match(row.where)
        if (
            row.package == "lmcache"
            and row.requirement.startswith("==")
            and content is not None
            and content.group("repository") == ref.repository
            and row.contains(release.group(1))
        ):
            version = row.requirement.removeprefix("==")
            return LmcacheRelease(version, f"LMCache {version} bundled in {image.strip()}")
    return None


def is_requirements_name(name: str) -> bool:
    """``requirements.txt``, ``requirements-cuda.txt``, ``requirements/common.txt``."""
    lowered = name.lower()
    if ".txt" not in lowered:  # most names of a directory walk: no path to build
        return False
    path = PurePath(lowered)
    return path.suffix == ".txt" and (
        path.name.startswith("requirements") or path.parent.name == "requirements"
    )


def pins_in_text(text: str, file: str) -> tuple[LmcacheRelease, ...]:
    """Every literal LMCache pin in one file, each with its file and line."""
    if "lmcache" not in text.lower():
        return ()
    if is_requirements_name(file):
        found = [(m.start(), m.group(1), "requirement") for m in _REQUIREMENT_PIN.finditer(text)]
    else:
        joined = text.replace("\\\n", "  ")  # same length: offsets still give the line
        found = [(at, version, "pip install") for at, version in _pip_pins(joined)]
    lines = _Lines(text)
    return tuple(
        LmcacheRelease(version, f"{how} lmcache=={version} at {file}:{lines.at(at)}", file)
        for at, version, how in found
    )


def _pip_pins(text: str) -> Iterable[tuple[int, str]]:
    """(offset of the `pip install`, release) of each pin: the first pin after each
    `pip install` of a command, as a shell runs it."""
    for command in _COMMAND.finditer(text):
        position, end = command.start(), command.end()
        while (install := _PIP_INSTALL.search(text, position, end)) is not None:
            pin = _PIN_AFTER_INSTALL.search(text, install.end(), end)
            if pin is None:
                break
            yield install.start(), pin.group(1)
            position = pin.end()


class _Lines:
    """Line numbers of increasing offsets, counted once through the text."""

    def __init__(self, text: str) -> None:
        self.text, self.offset, self.line = text, 0, 1

    def at(self, offset: int) -> int:
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


def _agreed(pins: Iterable[LmcacheRelease]) -> LmcacheRelease | None:
    """The pin when every pin names the same release; None when none or they disagree."""
    listed = list(pins)
    versions = {pin.version for pin in listed}
    return listed[-1] if len(versions) == 1 else None


def resolve(
    *,
    explicit: LmcacheRelease | None,
    file: str | None,
    image: str | None,
    pins: Sequence[LmcacheRelease],
) -> LmcacheRelease | None:
    """The LMCache release of one engine (see the module docstring for the order).

    ``pins`` are the input set's pins (:func:`pins_in_text` over its files); those of
    ``file`` are the engine's own.
    """
    if explicit is not None:
        return explicit
    own = [pin for pin in pins if file is not None and pin.file == file]
    if own:
        return _agreed(own)
    tagged = from_image(image) if image is not None else None
    if tagged is not None:
        return tagged
    if pins:
        return _agreed(pins)  # pins that disagree leave the release unknown
    return bundled_in(image) if image is not None else None
