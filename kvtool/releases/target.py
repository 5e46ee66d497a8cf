"""Decide which release table a command checks against.

Order: an explicit ``--vllm-version`` wins; else the version in an image tag
(``vllm/vllm-openai:v0.32.0``, ``...:0.31.1-cuda12``); else the newest table, which the
result says. Versions are mapped onto tables like this:

* a tabled release: that table;
* a pre-/post-/dev-release (``0.33.0rc1``, ``0.11.0.post2``): its base release's table,
  with a warning;
* newer than the newest table: the newest table, with a warning;
* an untabled patch release inside the covered range (``0.31.1``): the nearest lower
  patch table of the same minor series, with a warning;
* older than the oldest table: the oldest table, with a warning (the security-floor rows
  still apply: they cover the oldest table's release);
* a version that names no release at all: ``KvtoolError``.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from packaging.version import Version

from kvtool.errors import KvtoolError
from kvtool.releases.loader import available_versions


class TargetRelease(msgspec.Struct, frozen=True, kw_only=True):
    version: str  # always a version that has a table
    source: Literal["flag", "image", "newest"]
    warning: str | None = None


def version_from_image(image: str) -> str | None:
    """The vLLM version an image reference's tag names, or None (no tag, ``latest``, digest,
    or a downstream image whose tag is its own release: see ``rules/images/entrypoints.toml``).
    """
    from kvtool.releases.images import vllm_version_of_image

    return vllm_version_of_image(image)


def _map_to_table(requested: str, origin: str) -> tuple[str, str | None]:
    try:
        wanted = Version(requested.strip().lstrip("vV"))
    except ValueError as exc:  # InvalidVersion, or digits past the int_digits limit
        raise KvtoolError(f"{origin}: {requested!r} is not a vLLM version") from exc
    versions = available_versions()
    if not versions:
        raise KvtoolError("no vLLM release tables are installed")
    parsed = [Version(v) for v in versions]
    base = Version(wanted.base_version)
    warning: str | None = None
    if base != wanted:
        warning = f"vLLM {wanted} is not a final release; checking against {base}"
    if base in parsed:
        return versions[parsed.index(base)], warning
    newest, oldest = parsed[-1], parsed[0]
    if base > newest:
        return versions[-1], (
            f"vLLM {wanted} is newer than the newest release table ({newest}); "
            f"checking against {newest}"
        )
    if base < oldest:
        return versions[0], (
            f"vLLM {wanted} ({origin}) is older than the oldest release table ({oldest}); checking "
            f"against {oldest}: flags added after {wanted} are not reported as unknown"
        )
    same_series = [v for v in parsed if v.release[:2] == base.release[:2] and v < base]
    if not same_series:
        raise KvtoolError(f"{origin}: vLLM {wanted} is not a known vLLM release")
    nearest = max(same_series)
    return versions[parsed.index(nearest)], (
        f"no release table for vLLM {wanted}; checking against {nearest}, "
        "the nearest lower patch release"
    )


def resolve_target(
    requested: str | None, image: str | None, *, origin: str = "--vllm-version"
) -> TargetRelease:
    """Pick the release table for an explicit version, an image tag, or the newest.

    ``origin`` names where ``requested`` was written, for errors about it.
    """
    if requested:
        version, warning = _map_to_table(requested, origin)
        return TargetRelease(version=version, source="flag", warning=warning)
    if image:
        tagged = version_from_image(image)
        if tagged is not None:
            version, warning = _map_to_table(tagged, f"image {image}")
            return TargetRelease(version=version, source="image", warning=warning)
    newest = available_versions()[-1] if available_versions() else None
    if newest is None:
        raise KvtoolError("no vLLM release tables are installed")
    why = f"the image tag of {image} names no vLLM version" if image else "no --vllm-version given"
    return TargetRelease(
        version=newest,
        source="newest",
        warning=f"{why}; checking against the newest release table ({newest})",
    )
