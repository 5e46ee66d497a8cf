"""The Dockerfile, built and run with the suite's podman.

No registry but PyPI and Debian is reachable here, so the base image is assembled
offline: tests/image/rootfs.py's interpreter and standard library, the host's ``sh``
and ``rm`` (a Dockerfile's RUN lines need a shell, as python:*-slim has), plus the
distributions kvtool and its build backend need, copied from the test environment with
the shared libraries their extension modules link. The build runs without network.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.image.rootfs import build_rootfs, interpreter, shared_libraries
from tests.image.servers import podman_missing_reason

pytestmark = pytest.mark.podman

BASE = "localhost/kvtool-test/python-base:offline"
IMAGE = "localhost/kvtool-test/kvtool:dockerfile"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
events_logger = "file"
cgroup_manager = "cgroupfs"
"""
SHELL_TOOLS = (Path("/bin/sh"), Path("/bin/rm"))
ROOTS = ("pip", "hatchling", "typer", "rich", "pydantic", "httpx", "docker", "packaging",
         "pyyaml", "msgspec")


def _requirements(name: str, seen: set[str]) -> None:
    """``name`` and every distribution it requires (markers for extras skipped)."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return
    seen.add(key)
    for requirement in metadata.requires(name) or []:
        if "extra ==" in requirement:
            continue
        dependency = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
        try:
            metadata.distribution(dependency)
        except metadata.PackageNotFoundError:
            continue  # a platform-only dependency this environment does not have
        _requirements(dependency, seen)


def _distribution_files() -> list[Path]:
    seen: set[str] = set()
    for root in ROOTS:
        _requirements(root, seen)
    files: list[Path] = []
    for name in sorted(seen):
        dist = metadata.distribution(name)
        files += [Path(str(dist.locate_file(f))) for f in dist.files or []
                  if "__pycache__" not in str(f)]
    return [f for f in files if f.is_file()]


def _base_rootfs(target: Path, stubs: Path) -> None:
    build_rootfs(target, stubs)
    python = interpreter()
    site = python.parent.parent / "lib" / f"python3.{python.name[-2:].lstrip('.')}"
    files = _distribution_files()
    site_packages = next(p for p in files if p.parent.name == "site-packages").parent
    prefix_site = Path(str(site)) / "site-packages"
    binaries = [f for f in files if f.suffix == ".so"] + [t.resolve() for t in SHELL_TOOLS]
    with tarfile.open(target, "a") as tar:
        for path in files:
            relative = path.relative_to(site_packages) if site_packages in path.parents else None
            if relative is None:
                continue  # scripts outside site-packages: pip puts its own
            tar.add(str(path), arcname=str(prefix_site / relative).lstrip("/"), recursive=False)
        for tool in SHELL_TOOLS:
            tar.add(str(tool.resolve()), arcname=str(tool).lstrip("/"), recursive=False)
        present = set(tar.getnames())
        for library in sorted(shared_libraries(binaries)):
            if str(library).lstrip("/") not in present:
                tar.add(str(library.resolve()), arcname=str(library).lstrip("/"),
                        recursive=False)


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    reason = podman_missing_reason()
    if reason:
        pytest.skip(reason)
    scratch = tmp_path_factory.mktemp("container")
    (scratch / "containers.conf").write_text(CONTAINERS_CONF)
    os.environ["CONTAINERS_CONF"] = str(scratch / "containers.conf")
    command = ["podman", "--root", str(scratch / "root"), "--runroot", str(scratch / "runroot"),
               "--storage-driver", "vfs"]
    stubs = scratch / "stubs"
    stubs.mkdir()
    _base_rootfs(scratch / "rootfs.tar", stubs)
    # pip puts console scripts next to the interpreter (/usr/local/bin in python:*-slim).
    path = f"ENV=PATH={interpreter().parent}:/usr/local/bin:/usr/bin:/bin"
    imported = subprocess.run([*command, "import", "--quiet", "--change", path,
                               str(scratch / "rootfs.tar"), BASE],
                              capture_output=True, text=True, timeout=300)
    if imported.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {imported.stderr.strip()}")
    yield command
    os.environ.pop("CONTAINERS_CONF", None)


def test_dockerfile_builds_and_the_image_audits_a_mounted_folder(
    podman: list[str], tmp_path: Path
) -> None:
    built = subprocess.run(
        [*podman, "build", "--network=none", "--build-arg", f"PYTHON_IMAGE={BASE}",
         "-t", IMAGE, "-f", str(REPO_ROOT / "Dockerfile"), str(REPO_ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    if built.returncode != 0 and "cannot" in built.stderr and "runtime" in built.stderr:
        pytest.skip(f"podman cannot run build steps here: {built.stderr.strip()[-300:]}")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    work = tmp_path / "deploy"
    work.mkdir()
    (work / "serve.sh").write_text("#!/bin/sh\nvllm serve m --calculate-kv-scales\n")
    work.chmod(0o777)
    ran = subprocess.run(
        [*podman, "run", "--rm", "--network=none", "-v", f"{work}:/src", IMAGE,
         "audit", "serve.sh", "--vllm-version", "0.32.0", "--output-format", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert ran.returncode == 1, ran.stderr
    assert '"VG002"' in ran.stdout
    version = subprocess.run([*podman, "run", "--rm", IMAGE, "--version"],
                             capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("kvtool ")
