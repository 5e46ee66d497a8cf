"""Known-bug ranges that released source can tell are checked against it.

A row's ``introduced``/``fixed`` read from code must agree with the wheels on both sides of
each boundary: the release before ``introduced`` and ``fixed`` do not have the code, the
releases ``introduced`` and the one before ``fixed`` do.
"""

from __future__ import annotations

import re
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from kvtool import lmcache
from kvtool.releases import known_bugs, load_release, release_index
from tests.conftest import REPO_ROOT
from tests.releases.wheelcache import pypi_reachable, release_wheel

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from releasegen import wheels

LMCACHE_CACHE = REPO_ROOT / ".cache" / "lmcache"


def row(bug_id: str):  # type: ignore[no-untyped-def]
    return next(b for b in known_bugs() if b.id == bug_id)


def boundaries(versions: tuple[str, ...], low: str, high: str) -> dict[str, bool]:
    """The releases either side of ``[low, high)`` -> whether they are inside it."""
    ordered = sorted(versions, key=Version)
    picks: dict[str, bool] = {}
    for edge in (low, high):
        index = ordered.index(edge)
        picks[ordered[index - 1]] = Version(low) <= Version(ordered[index - 1]) < Version(high)
        picks[edge] = Version(low) <= Version(edge) < Version(high)
    return picks


def source(wheel: Path, path: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(path).decode("utf-8", "replace")


def lmcache_wheel(version: str) -> Path:
    release = next(r for r in lmcache.releases() if r.version == version)
    wheel = LMCACHE_CACHE / release.wheel.filename
    if not wheel.is_file():
        if not pypi_reachable():
            pytest.skip(f"{wheel.name} is not cached and pypi.org:443 is unreachable")
        wheel = wheels.download(wheels.default_pip(), LMCACHE_CACHE, version, "lmcache")
    return wheel


def check_vllm(bug_id: str, path: str, has_code: Callable[[str], bool]) -> None:
    bug = row(bug_id)
    assert bug.introduced is not None and bug.fixed is not None
    for version, inside in boundaries(release_index().versions, bug.introduced, bug.fixed).items():
        assert has_code(source(release_wheel(version), path)) == inside, version


def test_55503_starts_where_the_fs_tier_is_first_registered() -> None:
    first = next(v for v in release_index().versions if "fs" in load_release(v).offload_tiers)
    assert row("vllm-project/vllm#55503").introduced == first


@pytest.mark.network
@pytest.mark.timeout(600)
def test_45268_range_is_where_the_scheduler_asserts_on_external_tokens() -> None:
    check_vllm(
        "vllm-project/vllm#45268",
        "vllm/v1/core/sched/scheduler.py",
        lambda text: "External KV connector is not verified yet" in text,
    )


@pytest.mark.network
@pytest.mark.timeout(600)
def test_51094_range_is_where_offload_aligns_align_mode_but_not_all() -> None:
    def aligns_align_only(text: str) -> bool:
        match = re.search(r"def resolve_mamba_align_size\(.*?\n(?=def )", text, re.DOTALL)
        return match is not None and '"all"' not in match.group(0)

    check_vllm(
        "vllm-project/vllm#51094",
        "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",
        aligns_align_only,
    )


@pytest.mark.network
@pytest.mark.timeout(600)
def test_lmcache_3688_range_is_where_the_abort_branch_asserts() -> None:
    bug = row("LMCache/LMCache#3688")
    assert bug.introduced is not None and bug.fixed is not None
    versions = tuple(r.version for r in lmcache.releases())
    pattern = re.compile(
        r"FINISHED_ABORTED:\n(?:\s*#.*\n)*\s*assert self\.lmcache_engine is not None"
    )
    for version, inside in boundaries(versions, bug.introduced, bug.fixed).items():
        text = source(lmcache_wheel(version), "lmcache/integration/vllm/vllm_v1_adapter.py")
        assert (pattern.search(text) is not None) == inside, version
