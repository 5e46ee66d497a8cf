"""Decide which release table a command checks against.

Order: an explicit ``--vllm-version`` wins; else what the deployment says (an image tag
such as ``vllm/vllm-openai:v0.32.0``, or the other evidence
:mod:`kvtool.audit.vllm_release` reads: pip pins, build Dockerfiles, serving-runtime
annotations, requirement pins); else the newest table, which the result says. Versions
are mapped onto tables like this:

* a tabled release: that table;
* a pre-/post-/dev-release (``0.33.0rc1``, ``0.11.0.post2``): its base release's table,
  with a warning;
* newer than the newest table: the newest table, with a warning;
* an untabled patch release inside the covered range (``0.31.1``): the nearest lower
  patch table of the same minor series, with a warning;
* older than the oldest table: the oldest table, not ``exact``, with a warning: such a
  release is audited only for what holds in every release (the engine drops findings
  that depend on the release), never against a newer release's flags;
* a version that names no release at all: ``KvtoolError``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from kvtool.errors import KvtoolError
from kvtool.releases.loader import available_versions
from kvtool.versions import Version

TargetSource = Literal[
    "flag",
    "settings",
    "image",
    "pip",
    "build",
    "annotation",
    "dockerfile",
    "requirement",
    "newest",
]


class TargetRelease(msgspec.Struct, frozen=True, kw_only=True):
    version: str  # always a version that has a table
    source: TargetSource
    warning: str | None = None
    # Where the release was read, in words ("image tag vllm/vllm-openai:v0.9.2").
    origin: str | None = None
    # False when the table only stands in for a release kvtool cannot place (older than
    # every table, or an image whose tag names another project's release): findings that
    # depend on the release are then left out.
    exact: bool = True


def version_from_image(image: str) -> str | None:
    """The vLLM version an image reference's tag names, or None (no tag, ``latest``, digest,
    or a downstream image whose tag is its own release: see ``rules/images/entrypoints.toml``).
    """
    from kvtool.releases.images import vllm_version_of_image

    return vllm_version_of_image(image)


def _map_to_table(requested: str, origin: str) -> tuple[str, str | None, bool]:
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
        return versions[parsed.index(base)], warning, True
    newest, oldest = parsed[-1], parsed[0]
    if base > newest:
        return (
            versions[-1],
            (
                f"vLLM {wanted} is newer than the newest release table ({newest}); "
                f"checking against {newest}"
            ),
            True,
        )
    if base < oldest:
        return (
            versions[0],
            (
                f"vLLM {wanted} ({origin}) is older than the oldest release table ({oldest}): "
                "only what holds in every release is checked (no flag, choice or removal "
                "findings that depend on the release)"
            ),
            False,
        )
    same_series = [v for v in parsed if v.release[:2] == base.release[:2] and v < base]
    if not same_series:
        raise KvtoolError(f"{origin}: vLLM {wanted} is not a known vLLM release")
    nearest = max(same_series)
    return (
        versions[parsed.index(nearest)],
        (
            f"no release table for vLLM {wanted}; checking against {nearest}, "
            "the nearest lower patch release"
        ),
        True,
    )


def target_for(version: str, source: TargetSource, origin: str) -> TargetRelease:
    """The table for a release read from ``origin`` (a flag, an image tag, a pip pin...)."""
    table, warning, exact = _map_to_table(version, origin)
    return TargetRelease(version=table, source=source, warning=warning, origin=origin, exact=exact)


def newest_target(why: str, *, exact: bool = True) -> TargetRelease:
    """The newest table, for an engine whose release nothing names (``why`` says so)."""
    newest = available_versions()[-1] if available_versions() else None
    if newest is None:
        raise KvtoolError("no vLLM release tables are installed")
    if exact:
        warning = f"{why}; checking against the newest release table ({newest})"
    else:
        warning = (
            f"{why}; checking against the newest release table ({newest}) for what holds "
            "in every release only (pass --vllm-version for the rest)"
        )
    return TargetRelease(
        version=newest, source="newest", warning=warning, origin="newest table", exact=exact
    )


def resolve_target(
    requested: str | None, image: str | None, *, origin: str = "--vllm-version"
) -> TargetRelease:
    """Pick the release table for an explicit version, an image tag, or the newest.

    ``origin`` names where ``requested`` was written, for errors about it.
    """
    if requested:
        return target_for(requested, "flag", origin)
    if image:
        tagged = version_from_image(image)
        if tagged is not None:
            return target_for(tagged, "image", f"image tag {image.strip()}")
    why, fair = _unplaced(image)
    return newest_target(why, exact=fair)


def _unplaced(image: str | None) -> tuple[str, bool]:
    """Why no release was found, and whether the newest table is a fair stand-in: not for
    an image whose tag is another project's release (llm-d's v0.2.0 is no vLLM 0.34.0)."""
    if not image:
        return "no --vllm-version given", True
    from kvtool.releases.images import names_other_release

    if names_other_release(image):
        return f"the tag of {image.strip()} is not a vLLM release and no table maps it", False
    return f"the image tag of {image.strip()} names no vLLM version", True
